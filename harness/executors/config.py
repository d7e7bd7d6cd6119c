"""``[tool.harness.slurm]``: the cluster settings that do not fit on a command line.

The harness has no general configuration file yet, so this module reads just this table: from
``harness.toml`` or ``pyproject.toml`` in the current directory or the nearest parent that has
either file with the table (``harness.toml`` wins; in it, a top-level ``[slurm]`` table works
too). Keys are the fields of :class:`~harness.executors.slurm.SlurmOptions`; command-line
flags (``--slurm-partition``, ``--slurm-gpus``, ``--slurm-time``, ``--slurm-account``,
``--container-image``, ``--job-retries``) override the file. An unknown key or a value of the
wrong type is a one-line error naming the file.

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

import dataclasses
import math
import tomllib
import typing
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.executors.options import SlurmOptions

CONFIG_FILES = ("harness.toml", "pyproject.toml")


def find_table(start: Path) -> tuple[Path | None, dict[str, Any]]:
    """(file, table) of the nearest ``[tool.harness.slurm]`` from ``start`` upwards; (None, {})."""
    for directory in [start, *start.parents]:
        for name in CONFIG_FILES:
            path = directory / name
            if not path.is_file():
                continue
            try:
                doc = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise UsageError(f"{path}: not readable TOML ({exc})") from None
            table = doc.get("tool", {}).get("harness", {}).get("slurm")
            if table is None and name == "harness.toml":
                table = doc.get("slurm")
            if table is not None:
                if not isinstance(table, dict):
                    raise UsageError(f"{path}: [tool.harness.slurm] must be a table")
                return path, table
    return None, {}


def options_from(table: dict[str, Any], source: str, **overrides: Any) -> SlurmOptions:
    """SlurmOptions from a config table plus command-line ``overrides`` (None = not given)."""
    fields = {f.name: f for f in dataclasses.fields(SlurmOptions)}
    hints = typing.get_type_hints(SlurmOptions)
    values: dict[str, Any] = {}
    for key, raw in table.items():
        if key not in fields:
            raise UsageError(f"{source}: unknown key {key!r} in [tool.harness.slurm] (known: {', '.join(fields)})")
        values[key] = _convert(raw, hints[key], f"{source}: [tool.harness.slurm] {key}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return SlurmOptions(**values)


def _convert(raw: Any, hint: Any, where: str) -> Any:
    """A TOML value as the field's type: str, int, float, a list of strings, or (sbatch_extra) a
    table of flag = value."""
    if hint == tuple[tuple[str, str], ...]:
        if isinstance(raw, dict):
            return tuple((str(k), str(v)) for k, v in raw.items())
        raise UsageError(f"{where} must be a table of flag = value")
    if hint == tuple[str, ...]:
        if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            return tuple(raw)
        raise UsageError(f"{where} must be a list of strings")
    kinds = {a for a in typing.get_args(hint) if a is not type(None)} or {hint}
    if isinstance(raw, bool):
        pass
    elif type(raw) in kinds:
        return raw
    elif float in kinds and isinstance(raw, int):
        return float(raw)
    wanted = " or ".join(sorted(getattr(k, "__name__", str(k)) for k in kinds))
    raise UsageError(f"{where} must be {wanted}, not {raw!r}")


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
