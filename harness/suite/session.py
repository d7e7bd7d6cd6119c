"""The harness suite plugin's session state: one object per pytest session.

Why apart from :mod:`harness.suite.plugin`: the plugin's hooks decide verdicts; this is what they
keep between hooks (the events file, the case records, the collection errors, the known-bug book).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness import caselog

if TYPE_CHECKING:
    from harness.suite.knownscope import Book

PROP = "harness_case"  # the report user property that carries a case's record (plain data: crosses xdist)


@dataclass(eq=False)  # a registered plugin is kept in sets: hashed by identity
class SessionState:
    """What this process's harness session keeps between hooks, in one place: the events file it appends
    to, the case records and collection errors the results file is made of, and the known-bug book
    (loaded once). Kept in ``config.stash`` and registered as a plugin for the hooks pytest calls
    without ``config`` (a report's), rather than in module globals that a second session in one
    process (pytest's own tests of the plugin) would share."""

    events: Path | None = None
    cases: list[dict[str, Any]] = field(default_factory=list)
    collection_errors: list[dict[str, str]] = field(default_factory=list)  # suite files that failed to collect
    known: Book | None = None  # once loaded

    def emit(self, **event: object) -> None:
        if self.events is not None:
            caselog.emit(self.events, **event)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == PROP:
                value = {**value, "duration_s": round(report.duration, 4)}  # type: ignore[dict-item]
                self.cases.append(value)
                self.emit(ev="done", case=value)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            text = str(report.longreprtext or "").strip().splitlines()
            errors = [ln.lstrip("E ").strip() for ln in text if ln.startswith("E ")] or text[-1:]
            self.collection_errors.append({"nodeid": report.nodeid, "message": " | ".join(errors)[-1500:]})
