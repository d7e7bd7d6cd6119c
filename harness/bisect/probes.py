"""Which commits to probe next, given the open intervals: pure index arithmetic.

Why apart from :mod:`.algorithm`: the state machine decides what each case knows (marks,
intervals, outcomes); choosing where to look next from those intervals needs only indices and
the set already probed, and is where the probe-count bound (:func:`max_steps`) and the
skip-run search live. Both stay free of git and I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection


def best_pick(intervals: list[tuple[int, int, frozenset[int]]], picks: list[int]) -> int | None:
    """The next commit to pick, from the widest gap that still has a commit one of its cases
    has not seen (``intervals``: each open case's last good, first bad and the commits it saw)."""
    taken = set(picks)
    gaps: dict[tuple[int, int], list[frozenset[int]]] = {}
    for good, bad, seen in intervals:
        inner = sorted(p for p in taken if good < p < bad)
        points = [good, *inner, bad]
        for lo, hi in itertools.pairwise(points):
            gaps.setdefault((lo, hi), []).append(seen)
    # widest first, then the gap shared by most cases, then the oldest
    for lo, hi in sorted(gaps, key=lambda g: (-(g[1] - g[0]), -len(gaps[g]), g[0])):
        probed = frozenset.intersection(*gaps[(lo, hi)])  # seen by every case of the gap: no use
        pick = near_midpoint(lo, hi, taken, probed)
        if pick is not None:
            return pick
    return None


def near_midpoint(lo: int, hi: int, taken: set[int], probed: Collection[int]) -> int | None:
    """Midpoint of (lo, hi); when it was skipped, a free index chosen around the skips.

    Commits inside a gap were probed without deciding anything (skipped). Untestable
    commits come in runs (an era whose import fails, a module not yet written), and
    walking out of a run one commit at a time, as plain ``git bisect skip`` tends to,
    costs its length. So the span from the first to the last skip is presumed one run:
    the larger of the two free segments beside it, (lo, first skip) and (last skip, hi),
    is bisected first, which finds a run's edges in O(log) probes. Only when both are
    exhausted is the span itself searched (nearest free commit to the midpoint), so
    testable commits between two separate runs are still found and a culprit inside a
    run is still narrowed honestly (AMBIGUOUS needs every commit there probed).
    """
    mid = (lo + hi) // 2
    if _free(mid, lo, hi, taken, probed):
        return mid
    skips = sorted(i for i in probed if lo < i < hi)
    segments = [(lo, skips[0]), (skips[-1], hi)] if skips else []
    for a, b in sorted(segments, key=lambda g: (-(g[1] - g[0]), g[0])):
        pick = _nearest_free((a + b) // 2, a, b, taken, probed)
        if pick is not None:
            return pick
    return _nearest_free(mid, lo, hi, taken, probed)


def _nearest_free(target: int, lo: int, hi: int, taken: set[int], probed: Collection[int]) -> int | None:
    """The free index in (lo, hi) nearest to ``target`` (ties: the later one)."""
    for d in range(0, hi - lo):
        for cand in (target + d, target - d) if d else (target,):
            if _free(cand, lo, hi, taken, probed):
                return cand
    return None


def _free(idx: int, lo: int, hi: int, taken: set[int], probed: Collection[int]) -> bool:
    return lo < idx < hi and idx not in taken and idx not in probed


def max_steps(n_commits: int, k: int = 1) -> int:
    """Upper bound of interior probe rounds for one culprit: ceil(log_{k+1}(n-1)).

    Useful for progress estimates; the endpoints (when verified) add one round.
    """
    candidates = max(n_commits - 1, 1)
    return math.ceil(math.log(candidates, k + 1) - 1e-12) if candidates > 1 else 0
