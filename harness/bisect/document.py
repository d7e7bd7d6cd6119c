"""``bisect.json``: the typed record of one bisection.

The driver builds a :class:`BisectDoc`; ``harness bisect`` writes it (kind ``harness-bisect``,
schema-versioned, atomic); the HTML report (:func:`harness.report.pages.bisect_context`) and
the terminal summary (:func:`harness.report.terminal.bisect_summary_lines`) read the same
record. Schema 2 added ``late_starts`` (cases GOOD cannot run, :class:`LateStart`) and
``confirmations`` (``--confirm``, :class:`Confirmation`) to the keys of schema 1; a schema 1
file is read as one where neither was looked for. Schema 3 added the descent into Megatron-LM
(:class:`HeldMB`, :class:`PinCheck`, :class:`Descent`): ``held`` and ``pin_change`` on a second-level record,
``descents`` on a first-level one; a schema 2 file is read as a first-level record that did
not descend. ``repo_url`` (the web repository commits link to) is optional, written only when
known; ``infrastructure``, ``cancelled`` and ``cluster_jobs`` (``--executor slurm``) are
optional keys, written only when a cluster ran jobs. :meth:`BisectDoc.from_json` is lenient about
missing fields, because a report of an interrupted bisection is still worth rendering; a wrong
``kind`` or a newer schema is refused by :meth:`BisectDoc.load`.

The descent records live here with :class:`BisectDoc` because they nest one (a recursive
record is one module, or an import circle); the leaf records are in :mod:`.caserecords`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bisect.caserecords import (
    FIND_CHANGE,
    FIND_FIX,
    FIND_REGRESSION,
    NOT_RUN,
    CacheNamespace,
    CaseDoc,
    CommitMeta,
    Confirmation,
    ConfirmStatus,
    Culprit,
    CulpritGroup,
    LateStart,
    NotBisected,
    ProbeCost,
    RangeDoc,
    SelectionDoc,
)
from harness.executors.local import JobLog
from harness.records import fields
from harness.records.atomicio import read_versioned_json, write_versioned_json

__all__ = [
    "BISECT_KIND",
    "BISECT_SCHEMA",
    "FIND_CHANGE",
    "FIND_FIX",
    "FIND_REGRESSION",
    "NOT_RUN",
    "BisectDoc",
    "CacheNamespace",
    "CaseDoc",
    "CommitMeta",
    "ConfirmStatus",
    "Confirmation",
    "Culprit",
    "CulpritGroup",
    "Descent",
    "HeldMB",
    "LateStart",
    "NotBisected",
    "PinCheck",
    "PinStatus",
    "ProbeCost",
    "RangeDoc",
    "SelectionDoc",
]

BISECT_KIND = "harness-bisect"
BISECT_SCHEMA = 4  # 2: late_starts, confirmations; 3: held, pin_change, descents; 4: partial, probe_costs


@dataclass(frozen=True)
class HeldMB:
    """The Megatron-Bridge held fixed while Megatron-LM commits vary (the second level)."""

    sha: str  # the MB commit, or "tree-<content hash>" for a source tree given with --mb-held-src
    repo: str = ""  # the MB repository holding ``sha`` ('' for a source tree)
    src: str = ""  # the source tree given with --mb-held-src ('' for a commit)
    subject: str = ""  # the MB commit's subject

    @property
    def label(self) -> str:
        """How the terminal and the report name it."""
        return f"source tree {self.src}" if self.src else f"{self.sha[:12]} {self.subject}".rstrip()

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> HeldMB:
        return cls(*(str(doc.get(k) or "") for k in ("sha", "repo", "src", "subject")))


class PinStatus(enum.Enum):
    """Whether the Megatron-LM change alone reproduces the cases, MB held fixed."""

    CONFIRMED = "confirmed"  # every case failing with the new commit is good with the old one
    PARTLY = "partly"  # some are; the others fail with the old commit too
    NOT_CONFIRMED = "not_confirmed"  # none: the change is not observable, or MB's side of it is the cause


@dataclass
class PinCheck:
    """The endpoints of a second-level bisection read as a check of the Megatron-LM change."""

    status: PinStatus
    detail: str = ""

    @property
    def label(self) -> str:
        return {
            PinStatus.CONFIRMED: "confirmed as the cause",
            PinStatus.PARTLY: "partly confirmed as the cause",
            PinStatus.NOT_CONFIRMED: "not confirmed as the cause",
        }[self.status]

    def to_json(self) -> dict[str, object]:
        return {"status": self.status.value, "detail": self.detail}

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> PinCheck:
        return cls(PinStatus(doc.get("status") or PinStatus.NOT_CONFIRMED.value), str(doc.get("detail") or ""))


@dataclass
class Descent:
    """One MB culprit that moved the pinned Megatron-LM, and the bisection of Megatron-LM behind it."""

    mb_culprit: str  # the MB commit that moved 3rdparty/Megatron-LM
    cases: list[str] = field(default_factory=list)  # the cases blamed on it (re-run at the second level)
    old_pin: str | None = None  # its parent's pin
    new_pin: str | None = None  # its pin
    descended: bool = False
    reason: str = ""  # not descended: why; descended: how the Megatron-LM range was walked
    doc: BisectDoc | None = None  # the second-level record

    def to_json(self) -> dict[str, object]:
        return {
            "mb_culprit": self.mb_culprit,
            "cases": list(self.cases),
            "old_pin": self.old_pin,
            "new_pin": self.new_pin,
            "descended": self.descended,
            "reason": self.reason,
            "doc": self.doc.to_json() if self.doc else None,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Descent:
        nested = doc.get("doc")
        return cls(
            fields.text(doc, "mb_culprit"),
            fields.texts(doc, "cases"),
            fields.optional_text(doc, "old_pin"),
            fields.optional_text(doc, "new_pin"),
            fields.flag(doc, "descended"),
            fields.text(doc, "reason"),
            BisectDoc.from_json(nested) if isinstance(nested, dict) else None,
        )


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
    probe_costs: dict[str, list[ProbeCost]] = field(default_factory=dict)  # sha -> each new evaluation's cost
    hint_flags: list[str] = field(default_factory=list)  # options a reproduce hint repeats (--megatron-lm...)

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

    def to_json(self) -> dict[str, object]:
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
            "probe_costs": {sha: [vars(c).copy() for c in v] for sha, v in self.probe_costs.items()},
            "hint_flags": list(self.hint_flags),
            **self._cluster_json(),
        }

    def _cluster_json(self) -> dict[str, object]:
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
            probe_costs={
                str(k): [ProbeCost.from_json(c) for c in v] for k, v in (doc.get("probe_costs") or {}).items()
            },
            hint_flags=[str(f) for f in doc.get("hint_flags") or []],
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


def _from_schema_1(doc: dict[str, object]) -> dict[str, object]:
    """Schema 1 had no late starts and no confirmations: none were looked for."""
    return {**doc, "late_starts": [], "confirmations": []}


def _job_log(doc: Mapping[str, object]) -> JobLog:
    return JobLog(
        job_id=fields.text(doc, "job_id"),
        cluster=fields.text(doc, "cluster"),
        stdout=fields.text(doc, "stdout"),
        stderr=fields.text(doc, "stderr"),
        attempt=fields.whole(doc, "attempt", 1),
        state=fields.text(doc, "state"),
    )


def _from_schema_2(doc: dict[str, object]) -> dict[str, object]:
    """Schema 2 bisected MB's history only: a first-level record that did not descend."""
    return {**doc, "held": None, "pin_change": None, "descents": []}


def _from_schema_3(doc: dict[str, object]) -> dict[str, object]:
    """Schema 3 was written only by bisections that finished (an interrupted one wrote nothing),
    and did not record what each probe ran."""
    return {**doc, "partial": False, "probe_costs": {}, "hint_flags": []}
