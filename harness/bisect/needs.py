"""What a commit still needs evaluated, given what the cache holds there: pure set arithmetic.

Why: a bisection's answer depends only on its open cases, so an intermediate probe runs those
and nothing else; its endpoints run the whole selection (they decide which cases are open).
Verdicts are cached per (commit, case) with the :class:`~harness.bisect.scope.Scope` each
evaluation ran, so what is missing is computed, never assumed: a case probe covers its cases,
a selection run covers its suites for the same ``-k``, the default selection covers every
suite. ``want`` is 1 + retries: each case (or suite) needs that many verdicts.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence

from harness.bisect.cache import Evaluation
from harness.bisect.scope import Scope, suite_of


def missing_whole(
    evaluations: Sequence[Evaluation], whole: Scope, want: int, suites: Sequence[str] | None = None
) -> tuple[Scope, int] | None:
    """What an endpoint lacks of the selection ``whole``: (the scope to run, how many times).

    ``suites``: the suites the default selection runs (``whole.suites`` None); given, runs of
    listed suites cover it too (an endpoint cut into parts), and what is missing is the suites
    no run covered yet. Not given, only runs of the default selection cover it.
    """
    if whole.cases is not None:  # a selection of listed cases (a second level re-running its cases)
        return missing_cases(evaluations, whole.cases, want)
    full = [e for e in evaluations if not e.scope.partial and e.scope.keyword == whole.keyword]
    names = whole.suites if whole.suites is not None else suites
    if names is None:
        everything = sum(e.scope.suites is None for e in full)
        return (whole, want - everything) if everything < want else None
    per_suite: Counter[str] = Counter()
    for e in full:
        for suite in names if e.scope.suites is None else e.scope.suites:
            per_suite[suite] += 1
    lacking = [s for s in names if per_suite[s] < want]
    if not lacking:
        return None
    times = want - min(per_suite[s] for s in lacking)
    return (whole if len(lacking) == len(names) else Scope(tuple(lacking), whole.keyword)), times


def missing_cases(evaluations: Sequence[Evaluation], cases: Iterable[str], want: int) -> tuple[Scope, int] | None:
    """What a probe lacks of ``cases`` (the open ones): a case probe of those with fewer than
    ``want`` verdicts here, and how many times to run it."""
    held = Counter({c: sum(e.ran(c) for e in evaluations) for c in set(cases)})
    lacking = sorted(c for c in held if held[c] < want)
    if not lacking:
        return None
    return Scope(cases=tuple(lacking)), want - min(held[c] for c in lacking)


def in_selection(evaluation: Evaluation, whole: Scope) -> Evaluation:
    """``evaluation`` with only the verdicts of cases the selection ``whole`` has: its suites,
    its listed cases; for a ``-k`` selection, only what a run with that ``-k`` produced."""
    scope = evaluation.scope
    # a run of another -k, or (under -k) a probe whose cases may lie outside this -k
    foreign = whole.keyword is not None if scope.partial else scope.keyword != whole.keyword
    if foreign:
        return dataclasses.replace(evaluation, cases={})

    def keep(case: str) -> bool:
        if whole.cases is not None:
            return case in whole.cases
        return whole.suites is None or suite_of(case) in whole.suites

    return dataclasses.replace(evaluation, cases={c: r for c, r in evaluation.cases.items() if keep(c)})
