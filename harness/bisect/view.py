"""What the bisection sees of each verdict, and which cases it bisects.

The verdict cache and the record keep the real verdicts; the pure algorithm
(:mod:`harness.bisect.algorithm`) only knows "good" (PASS), "bad" (FAIL) and "skip". This module
maps one to the other for every mode of ``harness bisect``, in one place:

* every mode first reads a verdict as good or bad (:meth:`Verdict.bisect_view`): a known MB
  bug is bad, a fixed one good, a golden change good unless ``--changed`` (then bad);
* ``--find-fix``: PASS and FAIL swap roles, so the "first bad" commit the algorithm finds is
  the first commit where a failing case passes;
* ``--bisect-untestable``: UNTESTABLE is bad for the cases that lost their coverage (untestable
  at BAD, passing at GOOD);
* a case GOOD cannot run is bisected from the oldest commit where it runs (its start, see
  :mod:`harness.bisect.latestart`): before it, not running is "good";
* while those starts are looked for, running at all (PASS or FAIL) is "bad" and not running
  "good", so the first "bad" commit is where a case starts running.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.bisect.cache import Evaluation
from harness.bisect.document import NotBisected
from harness.records.verdict import Verdict

_SWAP_FOR_FIX = {Verdict.PASS: Verdict.FAIL, Verdict.FAIL: Verdict.PASS}


@dataclass
class CaseView:
    """The mapping from real verdicts to what the bisection sees (called per commit)."""

    find_fix: bool
    index: Mapping[str, int]  # commit -> position in the range
    untestable: set[str] = field(default_factory=set)  # --bisect-untestable: UNTESTABLE counts as bad
    starts: dict[str, int] = field(default_factory=dict)  # case GOOD cannot run -> position where it runs
    finding_starts: set[str] = field(default_factory=set)  # while looking for those positions
    changed: bool = False  # --changed: a golden change counts as bad

    def __call__(self, sha: str, verdicts: Mapping[str, Verdict]) -> dict[str, Verdict]:
        seen = {c: v.bisect_view(changed=self.changed) for c, v in verdicts.items()}
        view = {c: _SWAP_FOR_FIX.get(v, v) for c, v in seen.items()} if self.find_fix else seen
        if self.finding_starts:
            return {c: Verdict.FAIL if c in view and view[c].is_decisive else Verdict.PASS for c in self.finding_starts}
        for case in self.untestable:
            if view.get(case) is Verdict.UNTESTABLE:
                view[case] = Verdict.FAIL
        where = self.index.get(sha, 0)
        for case, start in self.starts.items():
            if where < start and not (case in view and view[case].is_decisive):
                view[case] = Verdict.PASS
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
    seen_at: dict[str, dict[str, set[Verdict]]] = {good: {}, bad: {}}
    for sha, evaluations in ((good, at_good), (bad, at_bad)):
        for evaluation in evaluations:
            for case, verdict in view(sha, evaluation.verdicts).items():
                seen_at[sha].setdefault(case, set()).add(verdict)
    at_good_seen, at_bad_seen = seen_at[good], seen_at[bad]
    if bisect_untestable:  # lost coverage: UNTESTABLE at bad (never FAIL there), PASS at good
        view.untestable = {
            c
            for c, vs in at_bad_seen.items()
            if vs == {Verdict.UNTESTABLE} and Verdict.PASS in at_good_seen.get(c, set())
        }
        for case in view.untestable:
            at_bad_seen[case] = {Verdict.FAIL}
    picked = Selection([], [], {})
    for case in sorted(c for c, vs in at_bad_seen.items() if Verdict.FAIL in vs):
        seen = at_good_seen.get(case, set())
        if Verdict.PASS in seen:
            picked.cases.append(case)
        elif Verdict.FAIL in seen:
            if not view.find_fix:  # with --find-fix it passes at both ends: nothing was fixed
                picked.not_bisected.append(NotBisected(case, "fails at good too"))
        else:
            picked.late[case] = "/".join(sorted(v.value for v in seen)) or "not run"
    return picked
