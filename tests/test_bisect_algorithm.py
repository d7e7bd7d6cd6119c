"""The bisection state machine against scripted verdict oracles (no git, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pytest

from harness.bisect.algorithm import Bisection, CaseStatus, max_steps
from harness.bisect.status import Mark
from harness.errors import UsageError

# an UNTESTABLE and an ERROR verdict are both skips to the bisection (harness.bisect.view.mark_of)
P, F, U, E = Mark.GOOD, Mark.BAD, Mark.SKIP, Mark.SKIP

Oracle = Callable[[int], Mapping[str, Mark]]


def shas(n: int) -> list[str]:
    return [f"c{i:03d}" for i in range(n)]


def idx(sha: str) -> int:
    return int(sha[1:])


def step(culprit: int, skips: frozenset[int] = frozenset(), skip_verdict: Mark = U) -> Callable[[int], Mark]:
    """A case that passes before ``culprit`` and fails from it on, skipping ``skips``."""

    def verdict(i: int) -> Mark:
        if i in skips:
            return skip_verdict
        return P if i < culprit else F

    return verdict


def oracle_of(**cases: Callable[[int], Mark]) -> Oracle:
    return lambda i: {name: fn(i) for name, fn in cases.items()}


def drive(b: Bisection, oracle: Oracle, k: int = 1, max_rounds: int = 200) -> int:
    """Run rounds until done; returns the number of rounds."""
    rounds = 0
    while not b.done:
        probes = b.next_probes(k)
        assert probes, "an unfinished bisection must propose probes"
        assert len(probes) <= k
        assert len(set(probes)) == len(probes)
        for sha in probes:
            assert sha not in b.probes, "a commit is never proposed twice"
            b.record(sha, oracle(idx(sha)))
        rounds += 1
        assert rounds <= max_rounds
    assert b.next_probes(k) == []
    return rounds


# ----------------------------------------------------------------- one culprit


@pytest.mark.parametrize("n", range(2, 51))
def test_single_culprit_every_position_within_log_bound(n: int) -> None:
    commits = shas(n)
    for culprit in range(1, n):
        b = Bisection(commits, ["a"], verify_endpoints=False)
        drive(b, oracle_of(a=step(culprit)))
        out = b.outcome("a")
        assert out.status is CaseStatus.FOUND
        assert out.culprit == commits[culprit]
        assert out.last_good == commits[culprit - 1]
        assert out.evaluations <= math.ceil(math.log2(n)) + 1
        assert out.evaluations == len(b.probes)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 16, 33, 50])
def test_verified_endpoints_cost_exactly_two_more(n: int) -> None:
    commits = shas(n)
    for culprit in range(1, n):
        b = Bisection(commits, ["a"])
        first = b.next_probes(1)
        assert first == [commits[0]], "endpoints are verified first"
        drive(b, oracle_of(a=step(culprit)))
        out = b.outcome("a")
        assert (out.status, out.culprit) == (CaseStatus.FOUND, commits[culprit])
        assert out.evaluations <= math.ceil(math.log2(n - 1)) + 2
        assert {commits[0], commits[-1]} <= set(b.probes)


def test_max_steps_matches_worst_case() -> None:
    assert [max_steps(n) for n in (2, 3, 5, 9, 17)] == [0, 1, 2, 3, 4]
    assert max_steps(17, k=3) == 2


# ----------------------------------------------------------------- skips


@pytest.mark.parametrize("offsets", [(0,), (-1,), (1,), (-1, 1), (-1, 0, 1), (-2, -1)])
@pytest.mark.parametrize("skip_verdict", [U, E])
def test_skips_around_the_culprit(offsets: tuple[int, ...], skip_verdict: Mark) -> None:
    n, culprit = 30, 14
    commits = shas(n)
    skips = frozenset(culprit + o for o in offsets)
    b = Bisection(commits, ["a"])
    drive(b, oracle_of(a=step(culprit, skips, skip_verdict)))
    out = b.outcome("a")
    if culprit not in skips and culprit - 1 not in skips:
        assert out.status is CaseStatus.FOUND
        assert out.culprit == commits[culprit]
    else:
        # the good/bad boundary is hidden by skipped commits: git bisect's "could be any of"
        assert out.status is CaseStatus.AMBIGUOUS
        last_good = max(i for i in range(culprit) if i not in skips)
        first_bad = min(i for i in range(culprit, n) if i not in skips)
        assert out.last_good == commits[last_good]
        assert out.candidates == tuple(commits[last_good + 1 : first_bad + 1])
        assert commits[culprit] in out.candidates


def test_skipped_midpoint_bisects_the_larger_side_of_the_skip_span() -> None:
    commits = shas(11)
    b = Bisection(commits, ["a"], verify_endpoints=False)
    assert b.next_probes(1) == [commits[5]]
    b.record(commits[5], {"a": U})
    # skip span [5]; sides (0,5) and (5,10) are equally wide: the older is bisected first
    assert b.next_probes(1) == [commits[2]]
    b.record(commits[2], {"a": U})
    # span [2,5]; sides (0,2) and (5,10): the wider one, at its midpoint
    assert b.next_probes(1) == [commits[7]]
    b.record(commits[7], {})  # a case missing from the verdicts is a skip too
    # span [2,7]: sides (0,2) and (7,10) -> (7,10) is wider
    assert b.next_probes(1) == [commits[8]]


def test_all_skipped_range_is_ambiguous_with_all_candidates() -> None:
    n = 9
    commits = shas(n)
    b = Bisection(commits, ["a"])
    drive(b, lambda i: {"a": P if i == 0 else F if i == n - 1 else U})
    out = b.outcome("a")
    assert out.status is CaseStatus.AMBIGUOUS
    assert out.last_good == commits[0]
    assert out.candidates == tuple(commits[1:])
    assert out.evaluations == n
    assert "ambiguous" in b.summary()


# ------------------------------------------------------------- endpoints


@pytest.mark.parametrize(
    ("good_end", "bad_end", "reason"),
    [
        (F, F, "good endpoint is bad"),
        (P, P, "bad endpoint is good"),
        (U, F, "good endpoint is skip"),
        (P, E, "bad endpoint is skip"),
    ],
)
def test_endpoints_not_showing_regression(good_end: Mark, bad_end: Mark, reason: str) -> None:
    commits = shas(8)
    b = Bisection(commits, ["a", "ok"])
    probes = drive(b, lambda i: {"a": good_end if i == 0 else bad_end if i == 7 else P, "ok": step(3)(i)}, k=2)
    out = b.outcome("a")
    assert out.status is CaseStatus.NOT_REPRODUCED
    assert any(reason in n for n in out.notes)
    assert out.evaluations <= 2, "no interior probe is spent on a case that does not reproduce"
    assert b.outcome("ok").culprit == commits[3]
    assert probes >= 2


def test_not_reproduced_stops_everything_after_endpoints() -> None:
    b = Bisection(shas(40), ["a"])
    drive(b, lambda i: {"a": P})
    assert b.outcome("a").status is CaseStatus.NOT_REPRODUCED
    assert len(b.probes) == 2


def test_assumed_endpoints_can_be_contradicted_by_a_probe() -> None:
    commits = shas(5)
    b = Bisection(commits, ["a"], verify_endpoints=False)
    b.record(commits[0], {"a": F})
    assert b.outcome("a").status is CaseStatus.NOT_REPRODUCED


# ------------------------------------------------------------------ flaky


def test_flaky_retry_marks_case_flaky_and_never_blames() -> None:
    commits = shas(10)
    b = Bisection(commits, ["a", "b"])
    for sha in b.next_probes(2):
        b.record(sha, {"a": step(4)(idx(sha)), "b": step(6)(idx(sha))})
    mid = b.next_probes(1)[0]
    b.record(mid, {"a": P, "b": step(6)(idx(mid))})
    b.record(mid, {"a": F, "b": step(6)(idx(mid))})  # retry disagrees for "a" only
    out = b.outcome("a")
    assert out.status is CaseStatus.FLAKY
    assert out.flaky_commits == (mid,)
    assert out.culprit is None
    drive(b, oracle_of(a=step(4), b=step(6)))
    assert b.outcome("a").status is CaseStatus.FLAKY
    assert b.outcome("b").culprit == commits[6]
    assert "flaky" in b.summary()


def test_retry_turning_error_into_verdict_is_not_flaky() -> None:
    commits = shas(3)
    b = Bisection(commits, ["a"])
    b.record(commits[0], {"a": P})
    b.record(commits[2], {"a": F})
    b.record(commits[1], {"a": E})
    b.record(commits[1], {"a": F})
    out = b.outcome("a")
    assert (out.status, out.culprit) == (CaseStatus.FOUND, commits[1])
    assert any("retries" in n for n in out.notes)
    assert b.evaluations == 4 and len(b.probes) == 3


def test_flaky_at_an_endpoint() -> None:
    commits = shas(6)
    b = Bisection(commits, ["a"])
    b.record(commits[0], {"a": P})
    b.record(commits[0], {"a": F})
    assert b.outcome("a").status is CaseStatus.FLAKY
    assert b.done and b.next_probes(3) == []


# --------------------------------------------------------- several culprits


def separate_cost(n: int, culprit: int) -> int:
    b = Bisection(shas(n), ["x"])
    drive(b, oracle_of(x=step(culprit)))
    return len(b.probes)


@pytest.mark.parametrize("culprits", [(10, 30), (5, 21, 38), (12, 12, 13)])
def test_independent_culprits_share_probes(culprits: tuple[int, ...]) -> None:
    n = 41
    commits = shas(n)
    names = [f"case{j}" for j in range(len(culprits))]
    b = Bisection(commits, names)
    drive(b, oracle_of(**{name: step(c) for name, c in zip(names, culprits)}))
    for name, c in zip(names, culprits):
        assert b.outcome(name).culprit == commits[c]
    separate = sum(separate_cost(n, c) for c in culprits)
    assert len(b.probes) < separate


def test_two_culprits_scripted_probe_sequence() -> None:
    commits = shas(17)
    b = Bisection(commits, ["a", "b"], verify_endpoints=False)
    seen = []
    while not b.done:
        (sha,) = b.next_probes(1)
        seen.append(idx(sha))
        b.record(sha, {"a": step(3)(idx(sha)), "b": step(12)(idx(sha))})
    # 8 splits both cases; each then narrows alone in 3 probes; separately each needs log2(16) = 4
    assert seen[0] == 8
    assert b.outcome("a").culprit == commits[3] and b.outcome("b").culprit == commits[12]
    assert len(seen) == 7 < 2 * 4


def test_non_monotonic_evidence_keeps_git_semantics_and_notes_it() -> None:
    commits = shas(9)
    b = Bisection(commits, ["a"], verify_endpoints=False)
    # commit 3 is bad, commit 6 passes again (e.g. a revert), commit 2 good
    b.record(commits[6], {"a": P})
    b.record(commits[3], {"a": F})
    b.record(commits[2], {"a": P})
    out = b.outcome("a")
    assert (out.status, out.culprit, out.last_good) == (CaseStatus.FOUND, commits[3], commits[2])
    assert any("non-monotonic" in n for n in out.notes)


# ----------------------------------------------------------------- k-ary


@pytest.mark.parametrize("n", range(2, 51))
def test_three_parallel_probes_rounds_within_log4_bound(n: int) -> None:
    commits = shas(n)
    bound = math.ceil(math.log(n, 4)) + 1
    for culprit in range(1, n):
        b = Bisection(commits, ["a"])
        rounds = drive(b, oracle_of(a=step(culprit)), k=3)
        assert b.outcome("a").culprit == commits[culprit]
        assert rounds <= bound, (n, culprit, rounds, b.probes)


def test_parallel_round_splits_union_of_open_intervals() -> None:
    commits = shas(33)
    b = Bisection(commits, ["a", "b"], verify_endpoints=False)
    b.record(commits[16], {"a": F, "b": P})  # a in (0, 16], b in (16, 32]
    picks = sorted(idx(s) for s in b.next_probes(2))
    assert picks == [8, 24]


def test_needs_tells_which_in_flight_probes_a_result_made_moot() -> None:
    commits = shas(33)
    b = Bisection(commits, ["a", "b"])
    assert b.needs(commits[0]) and b.needs(commits[32]), "endpoints to verify are needed"
    assert not b.needs("elsewhere")
    b.record(commits[0], {"a": P, "b": P})
    b.record(commits[32], {"a": F, "b": F})
    assert all(b.needs(c) for c in commits[1:32])
    b.record(commits[10], {"a": F, "b": P})  # a in (0, 10], b in (10, 32]
    assert b.needs(commits[5]) and b.needs(commits[20])
    b.record(commits[20], {"a": F, "b": F})  # b in (10, 20]: nothing above 20 matters any more
    assert [i for i in range(33) if b.needs(commits[i])] == [*range(1, 10), *range(11, 20)]
    for i in range(1, 10):
        b.record(commits[i], {"a": P if i < 4 else F})
    assert not b.needs(commits[5]), "case a is found; b's interval is (10, 20)"
    assert b.needs(commits[15])


# ------------------------------------------------------------ edge cases


def test_invalid_inputs() -> None:
    with pytest.raises(UsageError):
        Bisection(["a"], ["x"])
    with pytest.raises(UsageError):
        Bisection(["a", "a"], ["x"])
    with pytest.raises(UsageError):
        Bisection(["a", "b"], [])
    b = Bisection(["a", "b"], ["x"])
    with pytest.raises(ValueError):
        b.record("zzz", {})
    with pytest.raises(ValueError):
        b.next_probes(0)


def test_two_commit_range_needs_only_endpoints() -> None:
    b = Bisection(["g", "b"], ["x"])
    assert b.next_probes(5) == ["g", "b"]
    b.record("g", {"x": P, "extra": F})
    b.record("b", {"x": F})
    assert b.outcome("x").culprit == "b"
    assert b.done
    assert "found" in b.summary()


@pytest.mark.parametrize("culprit", [250, 30, 300, 10, 59])
def test_long_untestable_run_costs_log_not_length(culprit: int) -> None:
    """An era of 181 untestable commits (an operation not written yet) beside the culprit: its
    edges are found by bisection instead of walking it (plain neighbour walking took ~170)."""
    block = range(60, 241)
    n = 322
    commits = shas(n)
    b = Bisection(commits, ["c"])
    drive(b, oracle_of(c=step(culprit, frozenset(block))))
    o = b.outcome("c")
    assert o.status is CaseStatus.FOUND and o.culprit == commits[culprit]
    assert b.evaluations <= 30, f"{b.evaluations} evaluations: walking the untestable run one commit at a time"


def test_culprit_inside_an_untestable_run_is_ambiguous_over_the_run() -> None:
    """Honest, not cheap: AMBIGUOUS needs every commit of the run probed (none can be assumed)."""
    commits = shas(40)
    block = frozenset(range(10, 25))
    b = Bisection(commits, ["c"])
    drive(b, oracle_of(c=step(17, block)))
    o = b.outcome("c")
    assert o.status is CaseStatus.AMBIGUOUS
    assert o.candidates == tuple(commits[10:26]), "the run plus the first bad commit after it"


def _three_culprits(n: int, seed: int, k: int) -> tuple[Bisection, int, dict[str, int]]:
    import random

    rnd = random.Random(seed)
    commits = [f"c{i}" for i in range(n)]
    where = sorted(rnd.sample(range(1, n), 3))
    cases = {f"k{j}": where[j % 3] for j in range(12)}
    b = Bisection(commits, cases)
    rounds = 0
    while not b.done:
        rounds += 1
        for sha in b.next_probes(k):
            i = int(sha[1:])
            b.record(sha, {c: F if i >= at else P for c, at in cases.items()})
    return b, rounds, cases


@pytest.mark.parametrize("n", [100, 1000, 2086])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_three_faults_breaking_twelve_cases_cost_three_bisections_not_twelve(n: int, seed: int) -> None:
    """Issue 47: cases that flip at one commit share every probe (one target), so 3 culprits cost
    about 3 * ceil(log2 N) evaluations plus the endpoints, whatever the number of cases; and two
    probes at a time halve the rounds."""
    import math

    b, rounds, cases = _three_culprits(n, seed, 1)
    assert all(b.outcome(c).culprit == f"c{at}" for c, at in cases.items())
    assert b.evaluations <= 3 * math.ceil(math.log2(n)) + 3
    from harness.bisect.targets import targets

    assert len(targets(b)) == 3 and sorted(len(t) for t in targets(b)) == [4, 4, 4]
    _b2, rounds2, _ = _three_culprits(n, seed, 2)
    assert rounds2 <= math.ceil(rounds / 2) + 1
