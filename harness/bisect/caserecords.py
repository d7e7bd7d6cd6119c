"""The leaf records of ``bisect.json``: commits, culprits, per-case outcomes, late starts,
confirmations, the range, the selection and the cache namespace.

Why apart from :mod:`.document`: the drivers, confirm and late-start modules and the reports
build and read these pieces without the whole record; :class:`~harness.bisect.document.BisectDoc`
(with the descent records it nests) composes them and owns the schema version.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.bisect.algorithm import CaseStatus
from harness.records import fields

FIND_REGRESSION = "find-regression"
FIND_FIX = "find-fix"
FIND_CHANGE = "find-change"  # --changed: CHANGED counts as bad; culprits are changes, not regressions


@dataclass
class CommitMeta:
    """A commit of the range as the timeline shows it."""

    sha: str
    subject: str = ""
    author: str = ""
    date: str = ""  # author date, strict ISO 8601

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> CommitMeta:
        return cls(
            str(doc.get("sha") or ""),
            str(doc.get("subject") or ""),
            str(doc.get("author") or ""),
            str(doc.get("date") or ""),
        )


@dataclass
class Culprit:
    """The commit blamed for a case, with what a reader needs to judge it."""

    sha: str
    subject: str = ""
    author: str = ""
    email: str = ""
    date: str = ""
    files: list[str] = field(default_factory=list)  # changed under src/ (megatron/ for a Megatron-LM commit)
    diff: str = ""  # limited to packing-related files when the commit touches any
    diff_scope: str = ""  # which files the diff covers

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Culprit:
        return cls(
            fields.text(doc, "sha"),
            fields.text(doc, "subject"),
            fields.text(doc, "author"),
            fields.text(doc, "email"),
            fields.text(doc, "date"),
            fields.texts(doc, "files"),
            fields.text(doc, "diff"),
            fields.text(doc, "diff_scope"),
        )


@dataclass
class CaseDoc:
    """Where one case's bisection ended."""

    case_id: str
    status: CaseStatus
    culprit: Culprit | None = None  # FOUND
    last_good: str | None = None
    candidates: list[str] = field(default_factory=list)  # AMBIGUOUS: oldest first; OPEN: the range left
    flaky_commits: list[str] = field(default_factory=list)
    evaluations: int | None = None  # None: not recorded (a partial record)
    notes: list[str] = field(default_factory=list)
    golden_diff: str = ""  # the case's diff (or message) at the culprit, else at the bad end
    source: str = "golden"  # which source of verdicts: "golden" or "upstream"
    # the answer at the culprit (else the bad end): why it is red, never "golden" for an invariant
    broken: str = ""  # invariants that broke, "logical-boundaries x4, padding-never-trains x1"
    impacts: list[str] = field(default_factory=list)  # training impacts (harness.records.impact)
    violation: str = ""  # one concrete violation: invariant, impact, row, position, expected, got

    @property
    def kind(self) -> str:
        """What made it red: "invariant", "mb-raised", "break", "rule" or "golden" (a changed value)."""
        text = self.golden_diff.lstrip()
        if self.broken:
            return "invariant"
        if text.startswith("Megatron raised"):
            return "mb-raised"
        if text.startswith("broken:"):
            return "break"
        if text.startswith("changed:") or text.startswith("golden mismatch"):
            return "golden"
        return "rule" if self.impacts else "failure"

    def to_json(self) -> dict[str, object]:
        return {
            "case_id": self.case_id,
            "status": self.status.value,
            "culprit": vars(self.culprit).copy() if self.culprit else None,
            "last_good": self.last_good,
            "candidates": list(self.candidates),
            "flaky_commits": list(self.flaky_commits),
            "evaluations": self.evaluations,
            "notes": list(self.notes),
            "golden_diff": self.golden_diff,
            "source": self.source,
            "broken": self.broken,
            "impacts": list(self.impacts),
            "violation": self.violation,
            "kind": self.kind,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> CaseDoc:
        culprit = doc.get("culprit")
        return cls(
            case_id=fields.text(doc, "case_id"),
            status=CaseStatus(doc.get("status") or CaseStatus.OPEN.value),
            culprit=Culprit.from_json(culprit) if isinstance(culprit, dict) else None,
            last_good=fields.optional_text(doc, "last_good"),
            candidates=fields.texts(doc, "candidates"),
            flaky_commits=fields.texts(doc, "flaky_commits"),
            evaluations=fields.whole(doc, "evaluations") if doc.get("evaluations") is not None else None,
            notes=fields.texts(doc, "notes"),
            golden_diff=fields.text(doc, "golden_diff"),
            source=fields.text(doc, "source", "golden"),
            broken=fields.text(doc, "broken"),
            impacts=fields.texts(doc, "impacts"),
            violation=fields.text(doc, "violation"),
        )


@dataclass
class NotBisected:
    """A case failing at the bad end that was not bisected, and why."""

    case_id: str
    reason: str


@dataclass
class LateStart:
    """A case that FAILs at BAD and that GOOD cannot run, and where it starts running.

    ``runs_from`` is the oldest commit of the range where the case runs (PASS or FAIL), found
    by bisecting "runs or not"; ``bisected`` says whether the case was then bisected from
    there (it must pass there, and --strict-good must not be given).
    """

    case_id: str
    at_good: str  # what GOOD gave: "untestable", "error", "not run"
    runs_from: str | None = None  # None: could not be found
    verdict_there: str = ""  # the case's verdict at runs_from
    bisected: bool = False
    reason: str = ""  # the sentence the terminal and the report show

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> LateStart:
        return cls(
            fields.text(doc, "case_id"),
            fields.text(doc, "at_good"),
            fields.optional_text(doc, "runs_from"),
            fields.text(doc, "verdict_there"),
            fields.flag(doc, "bisected"),
            fields.text(doc, "reason"),
        )


class ConfirmStatus(enum.Enum):
    """What reverting a culprit on top of BAD showed (``--confirm``, see :mod:`harness.bisect.confirm`)."""

    CONFIRMED = "confirmed"  # its cases pass again (or fail differently)
    NOT_CONFIRMED = "not_confirmed"  # a case fails as at BAD with the culprit reverted
    NOT_CHECKABLE = "not_checkable"  # the revert does not apply, or the cases cannot run there


@dataclass
class Confirmation:
    """The check of one culprit: its cases re-run on BAD with the culprit reverted."""

    culprit: str
    status: ConfirmStatus
    seen: dict[str, str] = field(default_factory=dict)  # case -> verdict with the revert, "same" or "changed"
    detail: str = ""  # what was seen, or why it could not be checked

    def to_json(self) -> dict[str, object]:
        return {"culprit": self.culprit, "status": self.status.value, "seen": dict(self.seen), "detail": self.detail}

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Confirmation:
        return cls(
            fields.text(doc, "culprit"),
            ConfirmStatus(doc.get("status") or ConfirmStatus.NOT_CHECKABLE.value),
            fields.text_map(doc, "seen"),
            fields.text(doc, "detail"),
        )


@dataclass
class RangeDoc:
    good: str  # full shas
    bad: str
    n_commits: int | None = None  # None: not recorded (a partial record)
    given: str = ""  # as the user typed it, GOOD..BAD
    first_parent: bool = False


@dataclass
class SelectionDoc:
    suites: list[str] | None = None
    keyword: str | None = None


@dataclass
class CacheNamespace:
    """The verdict-cache keys the evaluations were stored under."""

    suite_key: str = ""
    env_key: str = ""


@dataclass
class CulpritGroup:
    """One culprit commit with every case it was blamed for."""

    culprit: Culprit
    cases: list[CaseDoc]

    @property
    def sources(self) -> list[str]:
        return sorted({c.source for c in self.cases})

    @property
    def blamed_by(self) -> str:
        """Whether the harness's suites, MB's own upstream tests, or both pointed at the commit."""
        sources = self.sources
        if len(sources) > 1:
            return "harness suites and MB's upstream tests"
        return "MB's upstream tests" if sources == ["upstream"] else "harness suites"


#: A probe-table cell for a case no evaluation at that commit ran (a probe of other open cases).
NOT_RUN = "not-run"


@dataclass(frozen=True)
class ProbeCost:
    """What one new evaluation of a commit ran and what it cost (``bisect.json``, the report)."""

    scope: str  # "all", "suites a, b", "3 open cases" (harness.bisect.scope.Scope.label)
    cases: int  # verdicts it produced
    seconds: float
    endpoint: bool  # GOOD or BAD (the whole selection), else an intermediate probe
    core_pin: str = ""  # the Megatron-LM commit whose megatron-core ran ("": the installed one)

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> ProbeCost:
        return cls(
            fields.text(doc, "scope"),
            fields.whole(doc, "cases"),
            fields.number(doc, "seconds"),
            fields.flag(doc, "endpoint"),
            fields.text(doc, "core_pin"),
        )
