"""How long each case took when it last ran: what the progress line of the next run expects.

Why: a run's import groups collect one after the other, so its total used to be known only group
by group (the bar reached ``78/78``, then restarted at ``78/138``), and rich's time left was a
guess from the pace of the cases so far. With the last run's cases the line counts every group
from the start and its time left is the remembered time of what is still to run, scaled by how
this run's finished cases compare with their remembered times.

Only an estimate: a file that is absent, corrupt or of another schema is no estimate (the line
falls back to counting what has been collected); every finished run rewrites the entries of the
cases it ran. One file per cache directory (``case-times.json``; ``harness run``, ``nightly``
and ``matrix`` keep it there), kind :data:`KIND`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import CorruptFile
from harness.records.atomicio import read_versioned_json, write_versioned_json

KIND = "harness-case-times"
SCHEMA = 1
FILE = "case-times.json"


@dataclass(frozen=True)
class CaseTime:
    """One case as it last ran: its suite, the import group it ran in ("" for one process), seconds."""

    suite: str
    group: str
    seconds: float


def in_cache(cache_dir: Path) -> Path:
    """The case-times file of a cache directory (``harness run``, ``nightly``, ``matrix`` and
    ``bisect`` share it)."""
    return cache_dir / FILE


def load(path: Path | None) -> dict[str, CaseTime]:
    """The remembered cases by id; nothing when there is no usable file (it is only an estimate)."""
    if path is None:
        return {}
    try:
        doc = read_versioned_json(path, KIND, SCHEMA)
        return {
            str(cid): CaseTime(str(t["suite"]), str(t["group"]), float(t["seconds"]))
            for cid, t in dict(doc["cases"]).items()
        }
    except (FileNotFoundError, CorruptFile, KeyError, TypeError, ValueError, AttributeError):
        return {}


def remember(path: Path | None, ran: Iterable[tuple[str, CaseTime]]) -> None:
    """Merge a finished run's cases into the file (theirs replace the old entries)."""
    if path is None:
        return
    times = load(path)
    times.update(ran)
    payload = {"cases": {cid: {"suite": t.suite, "group": t.group, "seconds": t.seconds} for cid, t in times.items()}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_versioned_json(path, KIND, SCHEMA, payload)
    except OSError:  # a read-only cache costs the next run its estimate, never this run's result
        pass
