"""The machine a run ran on: one typed record for the writer (the runner) and every reader
(run report header, terminal summary, results.json).

Two hand-written dicts with different keys (``cpus``/``accelerator`` written, ``cpu``/``gpu``
read) once made every real report say "CPU: (blank), GPU: none"; a record cannot drift that way.
Probed without importing torch (no CUDA initialisation in the parent process).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.records.atomicio import record_from


@dataclass(frozen=True)
class Machine:
    hostname: str = ""
    platform: str = ""
    cpu: str = ""  # CPU model name ("" when unknown)
    cpus: int | None = None  # logical CPUs this process may use
    gpu: str | None = None  # the first GPU nvidia-smi names; None: no GPU seen

    @property
    def cpu_label(self) -> str:
        """What a header shows: "AMD EPYC 7B13 (2 CPUs)"."""
        count = f"{self.cpus} CPUs" if self.cpus else ""
        if self.cpu and count:
            return f"{self.cpu} ({count})"
        return self.cpu or count or "unknown"

    @property
    def gpu_label(self) -> str:
        return self.gpu or "none"

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, object] | None) -> Machine:
        return record_from(cls, doc)


def upgrade_v1(doc: dict[str, object]) -> dict[str, object]:
    """A results.json machine of schema 1 (``cpus``, ``accelerator`` = a GPU name or "CPU only")."""
    accelerator = doc.get("accelerator")
    return {
        "hostname": doc.get("hostname", ""),
        "platform": doc.get("platform", ""),
        "cpu": "",
        "cpus": doc.get("cpus"),
        "gpu": None if accelerator in (None, "", "CPU only") else accelerator,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor()


def _gpu_name() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() if lines else None


def this_machine() -> Machine:
    try:  # the CPUs this process may use (a shared or pinned machine has fewer than os.cpu_count())
        cpus: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    return Machine(platform.node(), platform.platform(), _cpu_model(), cpus, _gpu_name())
