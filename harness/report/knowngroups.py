"""Known-fail cases grouped by the reviewed MB bug that explains them, for the reports.

Split from :mod:`harness.suite.known` (which decides verdicts in the suite process): this only
reads the entries' prose for the pages and the terminal, in the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from harness.errors import CorruptFile
from harness.records.known import FILENAME, load
from harness.records.results import CaseResult
from harness.records.verdict import Verdict


class KnownGroup(TypedDict):
    """One known MB bug of a run, with the cases it explains."""

    id: str
    impact: str
    reason: str
    upstream: str
    cases: list[str]


def groups(cases: Sequence[CaseResult], path: Path | None = None) -> list[KnownGroup]:
    """Known-fail ``cases`` (CaseResult) grouped by bug, most cases first: each group's entry id,
    impact, reason and MB file:line (from ``path``, default the run's fixtures), and its case ids.
    A report never fails for want of the entries' prose: unreadable entries give bare groups."""
    from harness import paths

    try:
        entries = {e.id: e for e in load(path or paths.fixtures_dir() / FILENAME)}
    except CorruptFile:
        entries = {}
    found: dict[str, KnownGroup] = {}
    for c in cases:
        if c.verdict is not Verdict.KNOWN_FAIL:
            continue
        for entry_id in c.known or ["?"]:
            e = entries.get(entry_id)
            group = found.setdefault(
                entry_id,
                {
                    "id": entry_id,
                    "impact": e.impact if e else ", ".join(c.impacts),
                    "reason": e.reason if e else "",
                    "upstream": e.upstream if e else "",
                    "cases": [],
                },
            )
            group["cases"].append(c.case_id)
    return sorted(found.values(), key=lambda g: (-len(g["cases"]), g["id"]))
