"""The machine a run ran on: one typed record, written by the runner and read by every report.

Why a record: the runner once wrote ``cpus``/``accelerator`` while the HTML report read
``cpu``/``gpu``, so every real report showed a blank CPU and "none" for the GPU (and the test
fixture, written with the reader's keys, never noticed). Now :func:`this_machine` builds a
:class:`Machine`, ``results.json`` stores it, and the renderers read its fields.

The description is cheap: no torch import and no CUDA initialisation in the parent
(``nvidia-smi`` names the GPU, ``/proc/cpuinfo`` the CPU model).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
from dataclasses import dataclass
from typing import Any

NO_GPU = "none"


@dataclass(frozen=True)
class Machine:
    hostname: str = ""
    platform: str = ""
    cpu: str = ""  # the CPU model, as the OS names it ("" when unknown)
    cpus: int | None = None  # logical CPUs this process may use
    gpu: str = ""  # the first GPU's name; "" = none seen

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> "Machine":
        """Lenient: results.json files written before this record kept ``accelerator``
        ("CPU only" or the GPU's name) instead of ``gpu``, and had no CPU model."""
        doc = dict(doc or {})
        if "gpu" not in doc and "accelerator" in doc:
            accelerator = str(doc["accelerator"] or "")
            doc["gpu"] = "" if accelerator == "CPU only" else accelerator
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})

    @property
    def cpu_text(self) -> str:
        """The CPU as a reader wants it: model and count ("AMD EPYC 7B13, 2 CPUs")."""
        count = f"{self.cpus} CPU{'' if self.cpus == 1 else 's'}" if self.cpus else ""
        return ", ".join(p for p in (self.cpu, count) if p) or "unknown"

    @property
    def gpu_text(self) -> str:
        return self.gpu or NO_GPU


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() if lines else ""


def this_machine() -> Machine:
    """This machine, described without importing torch (cheap, no CUDA init)."""
    try:
        cpus: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    return Machine(hostname=platform.node(), platform=platform.platform(), cpu=_cpu_model(), cpus=cpus, gpu=_gpu_name())
