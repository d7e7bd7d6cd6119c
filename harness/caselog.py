"""The live event log of a suite process: which cases it collected, started and finished.

Why: the verdict file is written once, when the pytest session ends. A suite process killed
at its time limit, or dying on its own, leaves none, and every case used to get one
whole-suite verdict. With this log the runner knows which case was running when the process
was killed (a hang in MB is that case's failure: ``broken: timeout``), which cases finished
(they keep their verdicts) and which never started (not run: untestable).

Format: JSON lines appended (``O_APPEND``, one ``write`` per line, so pytest-xdist workers and
the controller can share the file); the first line is the header ``{"kind", "schema_version"}``.
Events: ``{"ev": "collected", "cases": [[case_id, suite], ...]}`` (after selection, per
process that collects), ``{"ev": "start", "case_id"}`` (where the case runs) and ``{"ev": "done",
"case": {...}}`` (the verdict record, as in the verdict file). A line cut short by a kill is
ignored.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIND = "harness-case-events"
SCHEMA_VERSION = 1


def start_log(path: Path) -> None:
    """Create (truncate) the log with its header."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"kind": KIND, "schema_version": SCHEMA_VERSION}) + "\n")


def emit(path: Path, **event: object) -> None:
    """Append one event as one ``write`` (atomic for appends on a local file system)."""
    data = (json.dumps(event) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


@dataclass
class CaseLog:
    """What a (possibly killed) suite process got through."""

    collected: dict[str, str] = field(default_factory=dict)  # case_id -> suite, in collection order
    started: list[str] = field(default_factory=list)  # in start order, no repeats
    done: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # case_id -> verdict records

    @property
    def in_flight(self) -> list[str]:
        """Cases started and never finished (the ones running when the process stopped)."""
        return [c for c in self.started if c not in self.done]

    @property
    def not_started(self) -> list[str]:
        return [c for c in self.collected if c not in self.done and c not in self.started]


def read_log(path: Path) -> CaseLog:
    """The events in ``path``; an absent file, a foreign header or a cut line count as nothing."""
    log = CaseLog()
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return log
    if not lines or not _header_ok(lines[0]):
        return log
    for line in lines[1:]:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        ev = event.get("ev") if isinstance(event, dict) else None
        if ev == "collected":
            for case_id, suite in event.get("cases", []):
                log.collected.setdefault(str(case_id), str(suite))
        elif ev == "start" and event.get("case_id") not in log.started:
            log.started.append(str(event.get("case_id")))
        elif ev == "done" and isinstance(event.get("case"), dict):
            log.done.setdefault(str(event["case"].get("case_id")), []).append(event["case"])
    return log


def _header_ok(line: str) -> bool:
    try:
        head = json.loads(line)
    except json.JSONDecodeError:
        return False
    return isinstance(head, dict) and head.get("kind") == KIND and head.get("schema_version") == SCHEMA_VERSION
