"""``[tool.harness.slurm]``: the cluster settings that do not fit on a command line.

Read through the harness's configuration file (:mod:`harness.config`: the nearest
``harness.toml``, or ``pyproject.toml`` with ``[tool.harness]``, from the current directory
upwards; in ``harness.toml`` a top-level ``[slurm]`` table works too). Keys are the fields of
:class:`~harness.executors.options.SlurmOptions`; command-line flags (``--slurm-partition``,
``--slurm-gpus``, ``--slurm-time``, ``--slurm-account``, ``--container-image``,
``--job-retries``) override the file. An unknown key or a value of the wrong type is a one-line
error naming the file.

Example (``harness.toml`` next to where the harness is started)::

    [tool.harness.slurm]
    partition = "batch"
    account = "llm-packing"
    gpus = 1
    time_min = 60
    container_image = "nvcr.io#nvidia/nemo:25.09"
    container_mounts = ["/lustre/fsw:/lustre/fsw"]
    python = "/lustre/fsw/harness/.venv/bin/python"
    sbatch_extra = { qos = "normal" }
"""

from __future__ import annotations

import math
from pathlib import Path

from harness import config
from harness.errors import UsageError
from harness.executors.options import SlurmOptions


def slurm_options(directory: Path | None = None, **flags: object) -> SlurmOptions:
    """SlurmOptions from the configuration that applies in ``directory`` (default: the current
    one) plus the command-line ``flags`` (None = not given)."""
    return config.load(directory).section("slurm", SlurmOptions, **flags)


def parse_minutes(text: str) -> int:
    """``--slurm-time`` in any of sbatch's formats (``90``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM``, ``D-HH:MM:SS``) as whole minutes, rounded up."""
    try:
        days, dash, clock = text.strip().rpartition("-")
        parts = [float(p) for p in clock.split(":")]
        if dash:  # D-HH[:MM[:SS]]
            if len(parts) > 3:
                raise ValueError(text)
            h, m, sec = (parts + [0.0, 0.0])[:3]
            minutes = (float(days) * 24 + h) * 60 + m + sec / 60
        else:  # M, M:S, H:M:S
            weights = {1: (1.0,), 2: (1.0, 1 / 60), 3: (60.0, 1.0, 1 / 60)}[len(parts)]
            minutes = sum(p * w for p, w in zip(parts, weights))
    except (ValueError, KeyError):
        raise UsageError(f"--slurm-time {text!r}: minutes (90) or sbatch's [D-]HH:MM:SS (1:30:00)") from None
    if minutes <= 0:
        raise UsageError(f"--slurm-time {text!r} must be more than 0")
    return math.ceil(minutes)
