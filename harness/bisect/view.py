"""What the bisection sees of each verdict, and which cases it bisects.

The verdict cache and the record keep the suite process's records, verdicts included; the pure
algorithm (:mod:`harness.bisect.algorithm`) only knows marks
(:class:`~harness.bisect.status.Mark`: good, bad, skip). This module reads one as the other for
every mode of ``harness bisect``, in one place:

* every mode first reads a verdict as a mark (:func:`mark_of`): PASS good, FAIL bad, a known MB
  bug bad, a fixed one good, a golden change good unless ``--changed`` (then bad), anything else
  a skip;
* ``--find-fix``: good and bad swap roles, so the "first bad" commit the algorithm finds is
  the first commit where a failing case passes;
* ``--bisect-untestable``: UNTESTABLE is bad for the cases that lost their coverage (untestable
  at BAD, passing at GOOD);
* a case GOOD cannot run is bisected from the oldest commit where it runs (its start, see
  :mod:`harness.bisect.latestart`): before it, not running is good;
* while those starts are looked for, running at all (good or bad) is bad and not running
  good, so the first bad commit is where a case starts running.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.bisect.cache import Evaluation
from harness.bisect.document import NotBisected
from harness.bisect.status import Mark
from harness.records.verdict import Verdict

_SWAP_FOR_FIX = {Mark.GOOD: Mark.BAD, Mark.BAD: Mark.GOOD}


def mark_of(verdict: Verdict, *, changed: bool = False) -> Mark:
    """A verdict as a bisection reads it: broken behaviour is bad (a known MB bug too), held
    behaviour good (a fixed bug too), a golden change good unless the user bisects changes
    (``--changed``), and what says nothing about MB (ERROR, UNTESTABLE) a skip."""
    if verdict in (Verdict.FAIL, Verdict.KNOWN_FAIL) or (verdict is Verdict.CHANGED and changed):
        return Mark.BAD
    if verdict in (Verdict.PASS, Verdict.FIXED, Verdict.CHANGED):
        return Mark.GOOD
    return Mark.SKIP


@dataclass
class CaseView:
    """The mapping from real verdicts to what the bisection sees (called per commit)."""

    find_fix: bool
    index: Mapping[str, int]  # commit -> position in the range
    untestable: set[str] = field(default_factory=set)  # --bisect-untestable: UNTESTABLE counts as bad
    starts: dict[str, int] = field(default_factory=dict)  # case GOOD cannot run -> position where it runs
    finding_starts: set[str] = field(default_factory=set)  # while looking for those positions
    changed: bool = False  # --changed: a golden change counts as bad

    def __call__(self, sha: str, verdicts: Mapping[str, Verdict]) -> dict[str, Mark]:
        seen = {c: mark_of(v, changed=self.changed) for c, v in verdicts.items()}
        view = {c: _SWAP_FOR_FIX.get(m, m) for c, m in seen.items()} if self.find_fix else seen
        if self.finding_starts:
            return {c: Mark.BAD if view.get(c) in (Mark.GOOD, Mark.BAD) else Mark.GOOD for c in self.finding_starts}
        for case in self.untestable:
            if verdicts.get(case) is Verdict.UNTESTABLE:
                view[case] = Mark.BAD
        where = self.index.get(sha, 0)
        for case, start in self.starts.items():
            if where < start and view.get(case) not in (Mark.GOOD, Mark.BAD):
                view[case] = Mark.GOOD
        return view


@dataclass
class Selection:
    """The cases to bisect, as the endpoints decide them."""

    cases: list[str]  # FAIL at bad, PASS at good
    not_bisected: list[NotBisected]  # failing at bad for another reason
    late: dict[str, str]  # FAIL at bad, GOOD cannot run them: case -> what GOOD gave


def select_cases(
    view: CaseView,
    at_good: Iterable[Evaluation],
    at_bad: Iterable[Evaluation],
    good: str,
    bad: str,
    bisect_untestable: bool,
) -> Selection:
    """Cases that FAIL at bad and PASS at good (as seen through ``view``); with
    ``bisect_untestable`` also those untestable at bad that pass at good (recorded in the view)."""
    seen_at: dict[str, dict[str, set[Mark]]] = {good: {}, bad: {}}
    real_at: dict[str, dict[str, set[Verdict]]] = {good: {}, bad: {}}
    for sha, evaluations in ((good, at_good), (bad, at_bad)):
        for evaluation in evaluations:
            for case, mark in view(sha, evaluation.verdicts).items():
                seen_at[sha].setdefault(case, set()).add(mark)
                real_at[sha].setdefault(case, set()).add(evaluation.verdicts[case])
    at_good_seen, at_bad_seen = seen_at[good], seen_at[bad]
    if bisect_untestable:  # lost coverage: UNTESTABLE at bad (never FAIL there), good at good
        view.untestable = {
            c
            for c, vs in real_at[bad].items()
            if vs == {Verdict.UNTESTABLE} and Mark.GOOD in at_good_seen.get(c, set())
        }
        for case in view.untestable:
            at_bad_seen[case] = {Mark.BAD}
    picked = Selection([], [], {})
    for case in sorted(c for c, ms in at_bad_seen.items() if Mark.BAD in ms):
        seen = at_good_seen.get(case, set())
        if Mark.GOOD in seen:
            picked.cases.append(case)
        elif Mark.BAD in seen:
            if not view.find_fix:  # with --find-fix it passes at both ends: nothing was fixed
                picked.not_bisected.append(NotBisected(case, "fails at good too"))
        else:
            picked.late[case] = "/".join(sorted(v.value for v in real_at[good].get(case, set()))) or "not run"
    return picked
