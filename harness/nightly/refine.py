"""After the nightly's bisection: the culprit refines each defect's grouping.

Why: a night's defects are grouped by what broke (impact, invariants, MB code), and the nightly
bisects one case per defect, its quickest. Two regressions can look alike and come from two
commits. So each defect's other cases are checked at the culprit its lead case was blamed on: a
one-commit ``harness bisect PARENT..CULPRIT`` of those cases (two evaluations, the verdict cache
shared). A case that fails at the culprit and passes at its parent has that culprit too; one that
does not is split off as a defect of its own, to bisect on its own next. What the nightly learned
is written as ``defects.json`` (:class:`DefectCulprits`) beside the bisect record, and the trend
page links each defect to its culprit and to the bisection.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from harness.bisect.document import BisectDoc
from harness.errors import CorruptFile

FILENAME = "defects.json"
SCHEMA = 1


@dataclass
class DefectCulprit:
    """One defect of the night and what its bisection found."""

    defect: str
    lead: str  # the case the bisection probed
    culprit: str = ""  # "" when the bisection did not name one commit for the lead
    subject: str = ""
    same: list[str] = field(default_factory=list)  # fail at the culprit and pass at its parent
    split: list[str] = field(default_factory=list)  # do not: a defect of their own
    note: str = ""


@dataclass
class DefectCulprits:
    """``defects.json``: the night's defects refined by their culprits."""

    defects: list[DefectCulprit]
    schema: int = SCHEMA

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> DefectCulprits:
        try:
            doc = json.loads(path.read_text())
            return cls([DefectCulprit(**d) for d in doc["defects"]], int(doc.get("schema", SCHEMA)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CorruptFile(f"{path}: not a defects record ({exc})") from exc


def culprits_of(record: Path) -> dict[str, tuple[str, str, str]]:
    """case id -> (culprit sha, its parent as the bisection saw it, subject) of every found case."""
    doc = BisectDoc.from_json(json.loads(record.read_text()))
    return {
        c.case_id: (c.culprit.sha, c.last_good or "", c.culprit.subject) for c in doc.cases if c.culprit is not None
    }


def refine(
    defects: dict[str, list[str]],
    record: Path,
    check: Callable[[str, str, list[str], Path], subprocess.CompletedProcess[str]],
    out_dir: Path,
    out: TextIO,
) -> DefectCulprits:
    """Check each defect's other cases at its lead's culprit (``check(parent, culprit, cases, dir)``
    runs the one-commit bisection) and split off those that do not flip there."""
    found = culprits_of(record) if record.exists() else {}
    rows: list[DefectCulprit] = []
    for n, (defect, cases) in enumerate(defects.items(), 1):
        lead, others = cases[0], cases[1:]
        if lead not in found:
            rows.append(DefectCulprit(defect, lead, note="the bisection named no single culprit for its lead case"))
            continue
        culprit, parent, subject = found[lead]
        row = DefectCulprit(defect, lead, culprit, subject, same=[lead])
        if others and parent:
            check_dir = out_dir / f"check-{n}"
            check(parent, culprit, others, check_dir)
            at = culprits_of(check_dir / "bisect.json") if (check_dir / "bisect.json").exists() else {}
            row.same += [c for c in others if at.get(c, ("",))[0] == culprit]
            row.split = [c for c in others if c not in row.same]
            row.note = f"{len(others)} other case(s) checked at the culprit and its parent"
        elif others:
            row.split, row.note = list(others), "the culprit's parent is not recorded: the other cases stay unchecked"
        rows.append(row)
        tail = f"; {len(row.split)} split off (not at this culprit)" if row.split else ""
        print(f"auto-bisect: {defect} -> {culprit[:12]} {subject[:60]} ({len(row.same)} case(s){tail})", file=out)
    record_out = DefectCulprits(rows)
    record_out.write(out_dir / FILENAME)
    return record_out
