"""Multi-case, k-ary bisection as a pure state machine (no git, no subprocess, no I/O).

Why pure: the driver (git, workspaces, the test runner, retries, the cache) is where
things go wrong in practice; keeping the decision logic free of it lets us test every
culprit position, skip pattern and flaky sequence with scripted oracles in milliseconds.

Model (mozregression-style explicit states):

* ``commits[0..n-1]`` is a linear candidate list, oldest first. ``commits[0]`` is the
  known-good endpoint, ``commits[-1]`` the known-bad one.
* A *probe* evaluates one commit and yields one :class:`~harness.bisect.status.Mark` per
  case: GOOD, BAD or SKIP (git bisect's exit code 125); a case missing from a probe it ran is
  a skip too. Probes are shared: every case sees every probe. Which verdict is which mark is
  the driver's reading (:mod:`harness.bisect.view`), not this module's.
* Each case is bisected independently over the shared probes and ends in one
  :class:`CaseStatus`. ``OPEN`` is the only non-terminal state.

Endpoints: with ``verify_endpoints=True`` (default) the endpoints are probed first, because
a "known good" that fails (or a "known bad" that passes) means there is nothing to bisect
for that case (``NOT_REPRODUCED``). With ``verify_endpoints=False`` they are *assumed* good
and bad, like ``git bisect good/bad`` typed by a user, unless a recorded probe says otherwise.

Retries: :meth:`Bisection.record` may be called again for the same commit. A case is FLAKY
when its marks disagree at one commit (GOOD in one record, BAD in another); a FLAKY case is
never blamed on anything. A skip followed by GOOD or BAD is not flaky: that is what a retry of
an ERROR/UNTESTABLE probe is for; the decisive mark wins and a note records it.

Non-monotonic evidence (a GOOD above the first BAD, which shared probes can produce) keeps
git bisect's semantics: first bad = lowest bad commit, last good = highest good commit
below it; the case gets a note so a person can look.

Where to probe next, given the intervals, is :mod:`.probes` (index arithmetic only).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.bisect.probes import best_pick, max_steps
from harness.bisect.status import CaseOutcome, CaseStatus, Mark
from harness.errors import UsageError


@dataclass
class _CaseState:
    """Mutable per-case bookkeeping: observed verdicts per commit index."""

    seen: dict[int, list[Mark | None]] = field(default_factory=dict)
    evaluations: int = 0


def _mark_of(observed: Sequence[Mark | None]) -> Mark:
    """Fold the marks of all records of one commit for one case into one: GOOD and BAD together
    are FLAKY; either one outweighs skips (a retry of a skipped probe); else a skip."""
    seen = set(observed)
    if Mark.GOOD in seen and Mark.BAD in seen:
        return Mark.FLAKY
    return Mark.GOOD if Mark.GOOD in seen else Mark.BAD if Mark.BAD in seen else Mark.SKIP


class Bisection:
    """Bisect every case of a suite at once over one linear list of commits.

    Usage::

        b = Bisection(commits, cases)
        while not b.done:
            for sha in b.next_probes(k):
                b.record(sha, evaluate(sha))   # dict[case_id, Mark]
        print(b.summary())
    """

    def __init__(
        self,
        commits: Sequence[str],
        cases: Iterable[str],
        *,
        verify_endpoints: bool = True,
    ) -> None:
        self._commits: tuple[str, ...] = tuple(commits)
        if len(self._commits) < 2:
            raise UsageError("bisection needs at least two commits (a good and a bad one)")
        if len(set(self._commits)) != len(self._commits):
            raise UsageError("the commit list to bisect contains duplicates")
        self._index = {c: i for i, c in enumerate(self._commits)}
        self._cases: dict[str, _CaseState] = {c: _CaseState() for c in cases}
        if not self._cases:
            raise UsageError("bisection needs at least one case")
        self._verify_endpoints = verify_endpoints
        self._probed: dict[int, int] = {}  # commit index -> number of records
        self._order: list[str] = []  # distinct probed commits, first-probe order

    # ------------------------------------------------------------------ inputs

    @property
    def commits(self) -> tuple[str, ...]:
        return self._commits

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(self._cases)

    @property
    def probes(self) -> tuple[str, ...]:
        """Distinct commits recorded so far, in the order they were first recorded."""
        return tuple(self._order)

    @property
    def evaluations(self) -> int:
        """Total record() calls (retries included)."""
        return sum(self._probed.values())

    def record(self, commit: str, marks: Mapping[str, Mark], ran: Collection[str] | None = None) -> None:
        """Add one evaluation of ``commit``; may be called again for retries.

        ``ran``: the cases this evaluation ran (a probe of the open cases, or one that a cache
        holds for other cases); None: every case. Cases it ran but missing from ``marks``
        count as skipped; cases it did not run learn nothing (no mark, the commit stays free
        for them); unknown case ids are ignored (a suite may grow cases the bisection was not
        asked about).
        """
        idx = self._index.get(commit)
        if idx is None:
            raise ValueError(f"commit {commit!r} is not in the bisection range")
        targets = self._cases if ran is None else {c: s for c, s in self._cases.items() if c in ran}
        if not targets:
            return
        open_before = {c for c in targets if self.outcome(c).status is CaseStatus.OPEN}
        for case_id, state in targets.items():
            state.seen.setdefault(idx, []).append(marks.get(case_id))
            if case_id in open_before:
                state.evaluations += 1
        if idx not in self._probed:
            self._order.append(commit)
        self._probed[idx] = self._probed.get(idx, 0) + 1

    # ------------------------------------------------------------- per case

    def _mark(self, state: _CaseState, idx: int) -> Mark | None:
        """The combined mark of a commit for a case, None when never probed."""
        observed = state.seen.get(idx)
        if observed is None:
            return None
        return _mark_of(observed)

    def _endpoint_mark(self, state: _CaseState, idx: int, assumed: Mark) -> Mark | None:
        """Endpoints are assumed unless probed; None = still to be verified."""
        mark = self._mark(state, idx)
        if mark is not None:
            return mark
        return None if self._verify_endpoints else assumed

    def _interval(self, state: _CaseState, *, speculative: bool) -> tuple[int, int, list[str]]:
        """(last good, first bad, notes) using git bisect semantics.

        ``speculative`` assumes unverified endpoints hold, so interior probes can be
        chosen in the same parallel round as the endpoints.
        """
        last = len(self._commits) - 1
        marks = {i: _mark_of(v) for i, v in state.seen.items()}
        if speculative or not self._verify_endpoints:
            marks.setdefault(0, Mark.GOOD)
            marks.setdefault(last, Mark.BAD)
        bad = min(i for i, m in marks.items() if m is Mark.BAD)
        good = max(i for i, m in marks.items() if m is Mark.GOOD and i < bad)
        notes: list[str] = []
        later_goods = sorted(i for i, m in marks.items() if m is Mark.GOOD and i > bad)
        if later_goods:
            notes.append(
                "non-monotonic: good at "
                + ", ".join(self._commits[i][:12] for i in later_goods)
                + f" after first bad {self._commits[bad][:12]}; git bisect semantics kept"
            )
        return good, bad, notes

    def outcome(self, case_id: str) -> CaseOutcome:
        """The current result for one case (OPEN while undecided)."""
        state = self._cases[case_id]

        def make(
            status: CaseStatus,
            *,
            notes: list[str],
            culprit: str | None = None,
            last_good: str | None = None,
            candidates: tuple[str, ...] = (),
            flaky_commits: tuple[str, ...] = (),
        ) -> CaseOutcome:
            return CaseOutcome(
                case_id, status, culprit, last_good, candidates, flaky_commits, state.evaluations, tuple(notes)
            )

        notes = self._retry_notes(state)
        flaky = sorted(i for i, v in state.seen.items() if _mark_of(v) is Mark.FLAKY)
        if flaky:
            return make(CaseStatus.FLAKY, flaky_commits=tuple(self._commits[i] for i in flaky), notes=notes)
        last = len(self._commits) - 1
        start = self._endpoint_mark(state, 0, Mark.GOOD)
        end = self._endpoint_mark(state, last, Mark.BAD)
        problems = self._endpoint_problems(start, end)
        if problems:
            return make(CaseStatus.NOT_REPRODUCED, notes=notes + problems)
        if start is None or end is None:
            good, bad, _ = self._interval(state, speculative=True)
            return make(CaseStatus.OPEN, last_good=None, candidates=self._commits[good + 1 : bad + 1], notes=notes)
        good, bad, interval_notes = self._interval(state, speculative=False)
        notes += interval_notes
        if any(i not in state.seen for i in range(good + 1, bad)):  # still open: the range left to search
            return make(
                CaseStatus.OPEN,
                last_good=self._commits[good],
                candidates=self._commits[good + 1 : bad + 1],
                notes=notes,
            )
        if bad == good + 1:
            return make(CaseStatus.FOUND, culprit=self._commits[bad], last_good=self._commits[good], notes=notes)
        return make(
            CaseStatus.AMBIGUOUS,
            last_good=self._commits[good],
            candidates=self._commits[good + 1 : bad + 1],
            notes=notes + [f"{bad - good - 1} commit(s) before the first bad one were all skipped"],
        )

    @staticmethod
    def _endpoint_problems(start: Mark | None, end: Mark | None) -> list[str]:
        """Why the endpoints do not show good -> bad (empty while unknown or fine)."""
        problems: list[str] = []
        if start is not None and start is not Mark.GOOD:
            problems.append(f"good endpoint is {start.value}, not good")
        if end is not None and end is not Mark.BAD:
            problems.append(f"bad endpoint is {end.value}, not bad")
        return problems

    def _retry_notes(self, state: _CaseState) -> list[str]:
        """Mention retries that turned a skip into a decisive verdict (not flaky)."""
        notes = []
        for i, observed in sorted(state.seen.items()):
            kinds = set(observed)
            if len(observed) > 1 and len(kinds) > 1 and _mark_of(observed) in (Mark.GOOD, Mark.BAD):
                names = "/".join(sorted(v.value if v else "missing" for v in kinds))
                notes.append(f"retries at {self._commits[i][:12]} disagreed ({names}); decisive mark kept")
        return notes

    def remaining(self) -> tuple[int, int]:
        """(commits that can still be a culprit of some open case, the widest such interval):
        what progress reports as "N commits left", and what the steps left depend on."""
        left: set[int] = set()
        widest = 0
        for case_id, state in self._cases.items():
            if self.outcome(case_id).status is not CaseStatus.OPEN:
                continue
            good, bad, _ = self._interval(state, speculative=True)
            left.update(range(good + 1, bad + 1))
            widest = max(widest, bad - good)
        return len(left), widest

    def outcomes(self) -> dict[str, CaseOutcome]:
        return {c: self.outcome(c) for c in self._cases}

    def marks(self, case: str) -> dict[int, str]:
        """Commit index -> what the records there say of ``case`` (good, bad, skip, flaky)."""
        return {i: _mark_of(v).value for i, v in self._cases[case].seen.items()}

    @property
    def done(self) -> bool:
        """True when every case reached a terminal status."""
        return all(o.status is not CaseStatus.OPEN for o in self.outcomes().values())

    # ------------------------------------------------------------ choosing

    def needs(self, commit: str) -> bool:
        """Whether an evaluation of ``commit`` (not recorded yet) can still change an outcome.

        Why: with k-ary speculation several commits are in flight; one result can settle the
        interval another in-flight commit was probing (it now lies above a first bad or below a
        last good of every open case). On a cluster that job is worth cancelling. True for an
        endpoint still to verify and for a commit strictly inside some OPEN case's interval.
        """
        idx = self._index.get(commit)
        if idx is None:
            return False
        last = len(self._commits) - 1
        for state in (s for c, s in self._cases.items() if self.outcome(c).status is CaseStatus.OPEN):
            if self._verify_endpoints and idx in (0, last) and idx not in state.seen:
                return True
            good, bad, _ = self._interval(state, speculative=True)
            if good < idx < bad:
                return True
        return False

    def cases_needing(self, commit: str) -> list[str]:
        """The open cases an evaluation of ``commit`` can still tell something: an endpoint they
        have not verified, or a commit strictly inside their interval they have not seen. What an
        intermediate probe runs (the other cases' verdicts there would change nothing)."""
        idx = self._index.get(commit)
        if idx is None:
            return []
        last = len(self._commits) - 1
        out = []
        for case_id, state in self._cases.items():
            if idx in state.seen or self.outcome(case_id).status is not CaseStatus.OPEN:
                continue
            good, bad, _ = self._interval(state, speculative=True)
            if (self._verify_endpoints and idx in (0, last)) or good < idx < bad:
                out.append(case_id)
        return out

    def next_probes(self, k: int = 1) -> list[str]:
        """Up to ``k`` unprobed commits to evaluate next (in parallel); [] when done.

        Endpoints still to verify come first. The remaining slots split the open
        intervals of all OPEN cases: repeatedly take the widest gap between split points
        (a case's last good, first bad and the commits already picked this round) and
        pick its midpoint, or, when the midpoint was already probed (skipped), an
        unprobed commit galloping away from it (see :func:`.probes.near_midpoint`). A pick inside
        several cases' intervals splits all of them: that is how
        probes are shared.
        """
        if k < 1:
            raise ValueError("k must be at least 1")
        open_cases = [s for c, s in self._cases.items() if self.outcome(c).status is CaseStatus.OPEN]
        if not open_cases:
            return []
        picks: list[int] = []
        if self._verify_endpoints:
            ends = (0, len(self._commits) - 1)
            picks = [i for i in ends if any(i not in s.seen for s in open_cases)][:k]
        # each open interval with the commits its case has seen: a commit another case's probe
        # ran is still free for this one (verdicts are per case, probes run the open cases)
        intervals = [(*self._interval(s, speculative=True)[:2], frozenset(s.seen)) for s in open_cases]
        while len(picks) < k:
            pick = best_pick(intervals, picks)
            if pick is None:
                break
            picks.append(pick)
        return [self._commits[i] for i in picks]

    # ------------------------------------------------------------ reporting

    def summary(self) -> str:
        """A few lines for a terminal: totals, then one line per case."""
        outcomes = self.outcomes()
        counts: dict[str, int] = {}
        for o in outcomes.values():
            counts[o.status.value] = counts.get(o.status.value, 0) + 1
        totals = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        head = (
            f"bisection over {len(self._commits)} commits: {len(self._order)} probed, "
            f"{self.evaluations} evaluations; {totals}"
        )
        return "\n".join([head, *(o.describe() for o in outcomes.values())])


__all__ = ["Bisection", "CaseOutcome", "CaseStatus", "max_steps"]
