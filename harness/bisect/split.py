"""An endpoint's whole selection cut into parts of about equal cost, one per evaluation slot.

Why: a bisection's two endpoints run its whole selection (every default suite: 371 cases at MB
main), every later probe only the cases still open. At ``-j 2`` both endpoints ran side by side
as two evaluations, but they are unequal: GOOD, far in the past, runs fewer cases (the features
were not there yet), so its slot sat idle while BAD ran on (55 s against 164 s on a real 2,086-
commit range). Cut into one part per slot, largest first, the two endpoints share the slots and
the phase ends when the machine's work is done, not when the larger endpoint is.

Pure: the cost of a suite is what its cases took when they last ran (the case times every run
remembers, :mod:`harness.records.casetimes`); a suite without remembered times weighs the mean of
those with them (all alike when none has: the parts then hold about as many suites each). Parts
are built by longest-processing-time-first (each suite, heaviest first, into the lightest part).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.bisect.scope import Scope


@dataclass(frozen=True)
class Part:
    """One part of a selection: its suites and their estimated seconds."""

    suites: tuple[str, ...]
    seconds: float


def split_suites(costs: Mapping[str, float | None], parts: int) -> list[Part]:
    """``costs`` (every suite of the selection -> remembered seconds, None when unknown) cut into
    at most ``parts`` non-empty parts, heaviest part first; one part when ``parts`` < 2."""
    known = [c for c in costs.values() if c is not None]
    default = sum(known) / len(known) if known else 1.0
    weights = {s: (c if c is not None else default) for s, c in costs.items()}
    n = max(1, min(parts, len(weights)))
    bins: list[list[str]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for suite in sorted(weights, key=lambda s: (-weights[s], s)):
        lightest = min(range(n), key=lambda i: (loads[i], i))
        bins[lightest].append(suite)
        loads[lightest] += weights[suite]
    cut = [Part(tuple(sorted(b)), load) for b, load in zip(bins, loads, strict=True) if b]
    return sorted(cut, key=lambda p: (-p.seconds, p.suites))


def cut(scope: Scope, costs: Mapping[str, float | None], slots: int) -> list[tuple[Scope, float]]:
    """What to run of an endpoint's ``scope``, as (scope, estimated seconds): its suites (every suite
    of ``costs`` for the default selection) in one part per slot, heaviest first; ``scope`` itself
    for listed cases, one slot, no known suites, or a selection of one suite."""
    if slots < 2 or scope.partial or not costs:
        return [(scope, 0.0)]
    names = scope.suites if scope.suites is not None else tuple(costs)
    parts = split_suites({s: costs.get(s) for s in names}, slots)
    if len(parts) < 2:
        return [(scope, 0.0)]
    return [(Scope(part.suites, scope.keyword), part.seconds) for part in parts]
