"""``bisect.json``: the typed record of one bisection.

The driver builds a :class:`BisectDoc`; ``harness bisect`` writes it (kind ``harness-bisect``,
schema-versioned, atomic); the HTML report (:func:`harness.report.pages.bisect_context`) and
the terminal summary (:func:`harness.report.terminal.bisect_summary_lines`) read the same
record. Schema 2 added ``late_starts`` (cases GOOD cannot run, :class:`LateStart`) and
``confirmations`` (``--confirm``, :class:`Confirmation`) to the keys of schema 1; a schema 1
file is read as one where neither was looked for. Schema 3 added the descent into Megatron-LM
(:mod:`harness.bisect.descentdoc`): ``held`` and ``pin_change`` on a second-level record,
``descents`` on a first-level one; a schema 2 file is read as a first-level record that did
not descend. ``repo_url`` (the web repository commits link to) is optional, written only when
known; ``infrastructure``, ``cancelled`` and ``cluster_jobs`` (``--executor slurm``) are
optional keys, written only when a cluster ran jobs. :meth:`BisectDoc.from_json` is lenient about
missing fields, because a report of an interrupted bisection is still worth rendering; a wrong
``kind`` or a newer schema is refused by :meth:`BisectDoc.load`.

One module because it is one schema-versioned record: the nested dataclasses and the
upgrades from schemas 1 and 2 change together with the ``bisect.json`` schema version.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bisect.algorithm import CaseStatus
from harness.bisect.descentdoc import Descent, HeldMB, PinCheck
from harness.executors.local import JobLog
from harness.records.atomicio import read_versioned_json, write_versioned_json

BISECT_KIND = "harness-bisect"
BISECT_SCHEMA = 4  # 2: late_starts, confirmations (--confirm); 3: held, pin_change, descents; 4: partial
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
    def from_json(cls, doc: dict[str, Any]) -> CommitMeta:
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
    def from_json(cls, doc: dict[str, Any]) -> Culprit:
        def text(key: str) -> str:
            return str(doc.get(key) or "")

        return cls(
            text("sha"),
            text("subject"),
            text("author"),
            text("email"),
            text("date"),
            [str(f) for f in doc.get("files") or []],
            text("diff"),
            text("diff_scope"),
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

    def to_json(self) -> dict[str, Any]:
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
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CaseDoc:
        culprit = doc.get("culprit")
        evaluations = doc.get("evaluations")
        return cls(
            case_id=str(doc.get("case_id") or ""),
            status=CaseStatus(doc.get("status") or CaseStatus.OPEN.value),
            culprit=Culprit.from_json(culprit) if isinstance(culprit, dict) else None,
            last_good=doc.get("last_good"),
            candidates=[str(s) for s in doc.get("candidates") or []],
            flaky_commits=[str(s) for s in doc.get("flaky_commits") or []],
            evaluations=int(evaluations) if evaluations is not None else None,
            notes=[str(n) for n in doc.get("notes") or []],
            golden_diff=str(doc.get("golden_diff") or ""),
            source=str(doc.get("source") or "golden"),
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
    def from_json(cls, doc: dict[str, Any]) -> LateStart:
        return cls(
            str(doc.get("case_id") or ""),
            str(doc.get("at_good") or ""),
            doc.get("runs_from"),
            str(doc.get("verdict_there") or ""),
            bool(doc.get("bisected", False)),
            str(doc.get("reason") or ""),
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

    def to_json(self) -> dict[str, Any]:
        return {"culprit": self.culprit, "status": self.status.value, "seen": dict(self.seen), "detail": self.detail}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Confirmation:
        return cls(
            str(doc.get("culprit") or ""),
            ConfirmStatus(doc.get("status") or ConfirmStatus.NOT_CHECKABLE.value),
            {str(k): str(v) for k, v in (doc.get("seen") or {}).items()},
            str(doc.get("detail") or ""),
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
        """Whether golden cases, MB's own upstream tests, or both pointed at the commit."""
        sources = self.sources
        if len(sources) > 1:
            return "golden cases and upstream tests"
        return "upstream tests" if sources == ["upstream"] else "golden cases"


@dataclass
class BisectDoc:
    """The whole record of one bisection (``bisect.json``)."""

    range: RangeDoc
    mode: str = FIND_REGRESSION  # or FIND_FIX: PASS and FAIL swapped roles
    repo: str = ""
    repo_url: str = ""  # the repository's web address commits link to ("" = no links; see harness.records.provenance)
    commits: list[CommitMeta] = field(default_factory=list)  # the range, oldest first
    probes: dict[str, dict[str, str]] = field(default_factory=dict)  # sha -> case -> settled verdict or "flaky"
    attempts: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # sha -> one verdict map per attempt
    cases: list[CaseDoc] = field(default_factory=list)
    not_bisected: list[NotBisected] = field(default_factory=list)
    late_starts: list[LateStart] = field(default_factory=list)  # cases GOOD cannot run (see LateStart)
    confirmations: list[Confirmation] = field(default_factory=list)  # --confirm: one per culprit commit
    notes: dict[str, list[str]] = field(default_factory=dict)  # sha -> evaluator notes
    duration_s: float = 0.0
    evaluations: int | None = None
    new_evaluations: int = 0
    cached_evaluations: int = 0
    rounds: int = 0
    jobs: int = 1
    retries: int = 0
    selection: SelectionDoc = field(default_factory=SelectionDoc)
    cache: CacheNamespace = field(default_factory=CacheNamespace)
    finished: str = ""  # UTC, ISO 8601
    # cluster executors only: skips the cluster caused (never cached), moot jobs cancelled, job logs
    infrastructure: dict[str, list[str]] = field(default_factory=dict)  # sha -> why its jobs were lost
    cancelled: list[str] = field(default_factory=list)  # shas whose in-flight evaluation was cancelled
    cluster_jobs: dict[str, list[JobLog]] = field(default_factory=dict)  # sha -> jobs, every attempt
    held: HeldMB | None = None  # second level: the MB held fixed; the commits are Megatron-LM commits
    pin_change: PinCheck | None = None  # second level: does the change GOOD..BAD alone reproduce the cases?
    descents: list[Descent] = field(default_factory=list)  # first level: one per culprit that moved the pin
    # interrupted (Ctrl-C, SIGTERM): what finished; an OPEN case keeps the range still to search
    partial: bool = False

    @property
    def find_fix(self) -> bool:
        return self.mode == FIND_FIX

    @property
    def first_label(self) -> str:
        """What a culprit is called in this mode."""
        if self.find_fix:
            return "first fixed"
        return "first changed or bad" if self.mode == FIND_CHANGE else "first bad"

    def commit(self, sha: str) -> CommitMeta:
        """Metadata of a commit of the range (empty fields for one outside it)."""
        return next((c for c in self.commits if c.sha == sha), CommitMeta(sha))

    def confirmation(self, sha: str) -> Confirmation | None:
        """The ``--confirm`` check of a culprit commit, when one ran."""
        return next((c for c in self.confirmations if c.culprit == sha), None)

    def culprit_groups(self) -> list[CulpritGroup]:
        """One group per culprit commit, in the order the cases name them."""
        groups: dict[str, CulpritGroup] = {}
        for case in self.cases:
            if case.culprit is not None:
                groups.setdefault(case.culprit.sha, CulpritGroup(case.culprit, [])).cases.append(case)
        return list(groups.values())

    # ---------------------------------------------------------------- json

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "range": vars(self.range).copy(),
            "repo": self.repo,
            **({"repo_url": self.repo_url} if self.repo_url else {}),
            "commits": [vars(c).copy() for c in self.commits],
            "probes": {sha: dict(v) for sha, v in self.probes.items()},
            "attempts": {sha: [dict(a) for a in v] for sha, v in self.attempts.items()},
            "cases": [c.to_json() for c in self.cases],
            "not_bisected": [vars(n).copy() for n in self.not_bisected],
            "late_starts": [vars(s).copy() for s in self.late_starts],
            "confirmations": [c.to_json() for c in self.confirmations],
            "notes": {sha: list(v) for sha, v in self.notes.items()},
            "duration_s": self.duration_s,
            "evaluations": self.evaluations,
            "new_evaluations": self.new_evaluations,
            "cached_evaluations": self.cached_evaluations,
            "rounds": self.rounds,
            "jobs": self.jobs,
            "retries": self.retries,
            "selection": vars(self.selection).copy(),
            "cache": vars(self.cache).copy(),
            "finished": self.finished,
            "held": vars(self.held).copy() if self.held else None,
            "pin_change": self.pin_change.to_json() if self.pin_change else None,
            "descents": [d.to_json() for d in self.descents],
            "partial": self.partial,
            **self._cluster_json(),
        }

    def _cluster_json(self) -> dict[str, Any]:
        """The cluster keys, only when a cluster executor ran (a local record keeps the other keys)."""
        if not (self.infrastructure or self.cancelled or self.cluster_jobs):
            return {}
        return {
            "infrastructure": {sha: list(v) for sha, v in self.infrastructure.items()},
            "cancelled": list(self.cancelled),
            "cluster_jobs": {sha: [vars(j).copy() for j in v] for sha, v in self.cluster_jobs.items()},
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BisectDoc:
        rng = doc.get("range") or {}
        sel = doc.get("selection") or {}
        cache = doc.get("cache") or {}
        held, pin_change = doc.get("held"), doc.get("pin_change")
        n_commits = rng.get("n_commits")
        return cls(
            range=RangeDoc(
                str(rng.get("good") or ""),
                str(rng.get("bad") or ""),
                int(n_commits) if n_commits is not None else None,
                str(rng.get("given") or ""),
                bool(rng.get("first_parent", False)),
            ),
            mode=str(doc.get("mode") or FIND_REGRESSION),
            repo=str(doc.get("repo") or ""),
            repo_url=str(doc.get("repo_url") or ""),
            commits=[CommitMeta.from_json(c) for c in doc.get("commits") or []],
            probes={str(k): dict(v) for k, v in (doc.get("probes") or {}).items()},
            attempts={str(k): [dict(a) for a in v] for k, v in (doc.get("attempts") or {}).items()},
            cases=[CaseDoc.from_json(c) for c in doc.get("cases") or []],
            not_bisected=[
                NotBisected(str(n.get("case_id", "")), str(n.get("reason", ""))) for n in doc.get("not_bisected") or []
            ],
            late_starts=[LateStart.from_json(s) for s in doc.get("late_starts") or []],
            confirmations=[Confirmation.from_json(c) for c in doc.get("confirmations") or []],
            notes={str(k): list(v) for k, v in (doc.get("notes") or {}).items()},
            duration_s=float(doc.get("duration_s") or 0.0),
            evaluations=doc.get("evaluations"),
            new_evaluations=int(doc.get("new_evaluations") or 0),
            cached_evaluations=int(doc.get("cached_evaluations") or 0),
            rounds=int(doc.get("rounds") or 0),
            jobs=int(doc.get("jobs") or 1),
            retries=int(doc.get("retries") or 0),
            selection=SelectionDoc(sel.get("suites"), sel.get("keyword")),
            cache=CacheNamespace(str(cache.get("suite_key") or ""), str(cache.get("env_key") or "")),
            finished=str(doc.get("finished") or ""),
            infrastructure={str(k): [str(n) for n in v] for k, v in (doc.get("infrastructure") or {}).items()},
            cancelled=[str(s) for s in doc.get("cancelled") or []],
            cluster_jobs={str(k): [_job_log(j) for j in v] for k, v in (doc.get("cluster_jobs") or {}).items()},
            held=HeldMB.from_json(held) if isinstance(held, dict) else None,
            pin_change=PinCheck.from_json(pin_change) if isinstance(pin_change, dict) else None,
            descents=[Descent.from_json(d) for d in doc.get("descents") or []],
            partial=bool(doc.get("partial", False)),
        )

    def save(self, path: Path) -> None:
        write_versioned_json(path, BISECT_KIND, BISECT_SCHEMA, self.to_json())

    @classmethod
    def load(cls, path: Path) -> BisectDoc:
        return cls.from_json(
            read_versioned_json(
                path, BISECT_KIND, BISECT_SCHEMA, {1: _from_schema_1, 2: _from_schema_2, 3: _from_schema_3}
            )
        )


def _from_schema_1(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 had no late starts and no confirmations: none were looked for."""
    return {**doc, "late_starts": [], "confirmations": []}


def _job_log(doc: dict[str, Any]) -> JobLog:
    def text(key: str) -> str:
        return str(doc.get(key) or "")

    attempt = doc.get("attempt")
    return JobLog(
        job_id=text("job_id"),
        cluster=text("cluster"),
        stdout=text("stdout"),
        stderr=text("stderr"),
        attempt=int(attempt) if attempt is not None else 1,
        state=text("state"),
    )


def _from_schema_2(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 bisected MB's history only: a first-level record that did not descend."""
    return {**doc, "held": None, "pin_change": None, "descents": []}


def _from_schema_3(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 was written only by bisections that finished (an interrupted one wrote nothing)."""
    return {**doc, "partial": False}
