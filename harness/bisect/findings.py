"""What the driver observed, and what it means: cases to bisect, and the parts of a BisectDoc.

The driver collects :class:`Evidence` (every attempt per commit, golden diffs, evaluator
notes); this module decides from it which cases to bisect (:func:`select_cases`) and turns
it into the tables of a :class:`~harness.bisect.document.BisectDoc`: the probe table (one settled verdict
per commit and case), the per-case records and, for a culprit, its metadata and the part of
its diff that can affect packing. The repository is only read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from harness.bisect.algorithm import CaseOutcome, CaseStatus
from harness.bisect.axis import Axis
from harness.bisect.cache import Evaluation
from harness.bisect.document import NOT_RUN, CaseDoc, CommitMeta, Culprit, ProbeCost
from harness.executors.local import JobLog
from harness.progress import duration
from harness.records.oracle import counts_line, violation_line
from harness.records.results import CaseResult
from harness.records.verdict import Verdict, is_flaky, settle
from harness.repository.gitrepo import GitRepo

MAX_DIFF_CHARS = 200_000

#: case -> {"diff": golden diff or message, "source": "golden" | "upstream"}
Details = dict[str, CaseResult]  # case -> the suite process's record of it at one commit


@dataclass
class Evidence:
    """Everything a bisection run observed, cached or new."""

    attempts: dict[str, list[Evaluation]] = field(default_factory=dict)  # commit -> attempts, oldest first
    details: dict[str, Details] = field(default_factory=dict)  # commit -> the case records of its newest run
    notes: dict[str, list[str]] = field(default_factory=dict)  # commit -> evaluator notes
    new_evaluations: int = 0
    cached_evaluations: int = 0
    evaluated: set[str] = field(default_factory=set)  # commits evaluated (not just read from the cache) here
    infrastructure: dict[str, list[str]] = field(default_factory=dict)  # commit -> why the cluster lost its jobs
    cancelled: list[str] = field(default_factory=list)  # in-flight evaluations a newer result made moot
    jobs: dict[str, list[JobLog]] = field(default_factory=dict)  # commit -> cluster jobs (ids, log paths)
    costs: dict[str, list[ProbeCost]] = field(default_factory=dict)  # commit -> what each new evaluation ran

    @property
    def evaluations(self) -> int:
        return sum(len(a) for a in self.attempts.values())


def eta(costs: dict[str, list[ProbeCost]], steps: int) -> str:
    """ ", ~2 min left (13 s a probe)": measured probe cost (intermediate probes once there are
    some, else the endpoints) times the steps left; "" before anything was measured."""
    probes = [c.seconds for cs in costs.values() for c in cs if not c.endpoint]
    measured = probes or [c.seconds for cs in costs.values() for c in cs]
    if not measured or steps <= 0:
        return ""
    each = sum(measured) / len(measured)
    total = each * steps
    if total < 1:
        return ""
    return f", ~{duration(total)} left ({each:.0f} s a probe)"


def probe_cell(values: Iterable[Verdict | None]) -> str:
    """One verdict value per (commit, case) for the report's probe table."""
    values = list(values)
    if is_flaky(values):
        return "flaky"
    settled = settle(values)
    return settled.value if settled else Verdict.UNTESTABLE.value


def probe_tables(
    commits: Sequence[str], attempts: dict[str, list[Evaluation]], case_ids: Sequence[str]
) -> tuple[dict[str, dict[str, str]], dict[str, list[dict[str, str]]]]:
    """(sha -> case -> settled verdict, sha -> one verdict map per attempt) for probed commits."""
    probes: dict[str, dict[str, str]] = {}
    per_attempt: dict[str, list[dict[str, str]]] = {}
    for sha in commits:
        evs = attempts.get(sha)
        if not evs:
            continue
        ids = sorted({c for ev in evs for c in ev.verdicts} | set(case_ids))

        # a case no evaluation here ran (a probe of other open cases) is "not run": nothing inferred
        probes[sha] = {
            c: probe_cell(ev.verdicts.get(c) for ev in evs if ev.ran(c)) if any(ev.ran(c) for ev in evs) else NOT_RUN
            for c in ids
        }
        per_attempt[sha] = [{c: v.value for c, v in sorted(ev.verdicts.items())} for ev in evs]
    return probes, per_attempt


def commit_table(repo: GitRepo, shas: Sequence[str]) -> list[CommitMeta]:
    """Subject, author and date of every commit of the range, oldest first."""
    meta = repo.commit_summaries(shas)
    return [CommitMeta(*meta[sha]) if sha in meta else CommitMeta(sha) for sha in shas]


def packing_diff(repo: GitRepo, sha: str, axis: Axis) -> tuple[str, str]:
    """(diff limited to packing-related files, scope note); the whole diff under the axis's
    source directory (src/, or megatron/ for Megatron-LM) when none is touched."""
    diff = repo.diff(sha, axis.pathspecs)
    scope = "packing-related files"
    if not diff.strip():
        under = axis.files_under
        diff, scope = repo.diff(sha, (under,)), f"all of {under}/ (no packing-related file changed)"
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n... diff truncated at {MAX_DIFF_CHARS} characters\n"
    return diff, scope


def culprit_record(repo: GitRepo, sha: str, axis: Axis) -> Culprit:
    info = repo.commit_info(sha, axis.files_under)
    diff, scope = packing_diff(repo, sha, axis)
    return Culprit(info.sha, info.subject, info.author, info.email, info.date, list(info.files), diff, scope)


def case_docs(
    repo: GitRepo,
    outcomes: Iterable[CaseOutcome],
    evidence: Evidence,
    bad: str,
    details_of: Callable[[str], Details],
    axis: Axis,
) -> list[CaseDoc]:
    """One record per bisected case; each culprit commit is described (and diffed) once."""
    culprits: dict[str, Culprit] = {}
    docs = []
    for outcome in outcomes:
        culprit = None
        if outcome.status is CaseStatus.FOUND and outcome.culprit:
            if outcome.culprit not in culprits:
                culprits[outcome.culprit] = culprit_record(repo, outcome.culprit, axis)
            culprit = culprits[outcome.culprit]
        where = outcome.culprit or bad
        shown = details_of(where).get(outcome.case_id) or details_of(bad).get(outcome.case_id)
        message = next(
            (
                ev.messages[outcome.case_id]
                for ev in reversed(evidence.attempts.get(where, []))
                if ev.messages.get(outcome.case_id)
            ),
            "",
        )
        docs.append(
            CaseDoc(
                case_id=outcome.case_id,
                status=outcome.status,
                culprit=culprit,
                last_good=outcome.last_good,
                candidates=list(outcome.candidates),
                flaky_commits=list(outcome.flaky_commits),
                evaluations=outcome.evaluations,
                notes=list(outcome.notes),
                golden_diff=(shown.diff or shown.message if shown else "") or message,
                source=shown.source if shown else "golden",
                broken=broken_line(shown) if shown else "",
                impacts=list(shown.impacts) if shown else [],
                violation=violation_of(shown) if shown else "",
            )
        )
    return docs


def broken_line(case: CaseResult) -> str:
    """Which invariants broke, and how often (``logical-boundaries x4``)."""
    counts: dict[str, int] = {}
    for v in case.violations:
        counts[str(v.get("invariant"))] = counts.get(str(v.get("invariant")), 0) + 1
    return counts_line(counts)


def violation_of(case: CaseResult) -> str:
    """One concrete violation of the case, the first, in one line ("" when none)."""
    if not case.violations:
        return ""
    first = case.violations[0]
    return violation_line(
        str(first.get("invariant")),
        str(first.get("impact")),
        first.get("row"),
        first.get("position"),
        str(first.get("expected")),
        str(first.get("got")),
    )
