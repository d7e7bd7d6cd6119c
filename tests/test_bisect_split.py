"""The endpoints of a bisection share the slots (issue 47): at ``-j N`` each endpoint's whole
selection is cut into parts of about equal remembered cost, heaviest first, so the smaller
endpoint's slot does not sit idle while the larger one runs; the parts together stand for the
whole selection (in the bisection, the selection of cases and the verdict cache).

Pure parts: :func:`harness.bisect.split.split_suites`, :func:`harness.bisect.needs.missing_whole`
and :meth:`Evaluation.ran`. End to end: generated histories with the scoped evaluator of
``test_bisect_open_cases``, given the suite costs the MB evaluator reads from the case times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from harness import features
from harness.bisect import needs
from harness.bisect.cache import CacheKey, Evaluation
from harness.bisect.driver import BisectOptions, run_bisection
from harness.bisect.evaluator import EvalOutcome, MBEvaluator
from harness.bisect.scope import Scope
from harness.bisect.split import Part, cut, split_suites
from harness.executors.outcome import results_of
from harness.records import casetimes
from harness.records.results import CaseResult
from harness.records.verdict import Verdict
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import WorkspaceCache, workspace_dir_for
from tests.test_bisect_command import _fake_history, culprits
from tests.test_bisect_open_cases import CASES, ScopedEvaluator


def test_suites_go_heaviest_first_into_the_lightest_part() -> None:
    costs = {"a": 10.0, "b": 7.0, "c": 4.0, "d": 3.0, "e": 1.0}
    # a -> A(10), b -> B(7), c -> B(11), d -> A(13), e -> B(12): the heavier part first
    assert split_suites(costs, 2) == [Part(("a", "d"), 13.0), Part(("b", "c", "e"), 12.0)]
    assert split_suites(costs, 1) == [Part(("a", "b", "c", "d", "e"), 25.0)]
    assert split_suites({"a": 1.0}, 4) == [Part(("a",), 1.0)], "never an empty part"


def test_a_suite_without_remembered_times_weighs_the_mean_of_the_others() -> None:
    assert split_suites({"a": 8.0, "b": 2.0, "new": None}, 2) == [Part(("a",), 8.0), Part(("b", "new"), 7.0)]
    cold = split_suites(dict.fromkeys("abcd"), 2)
    assert [len(p.suites) for p in cold] == [2, 2], "nothing remembered: as many suites in each part"


def test_only_a_selection_of_several_suites_at_several_slots_is_cut() -> None:
    costs = {"s": 5.0, "t": 3.0, "u": None}
    # u weighs the mean of the others (4): s -> A(5), u -> B(4), t -> B(7); the heavier part first
    assert cut(Scope(), costs, 2) == [(Scope(("t", "u")), 7.0), (Scope(("s",)), 5.0)]
    assert cut(Scope(keyword="x"), costs, 2)[0][0].keyword == "x", "a part keeps the selection's -k"
    for scope, slots in ((Scope(), 1), (Scope(cases=("s::a",)), 2), (Scope(("s",)), 2)):
        assert cut(scope, costs, slots) == [(scope, 0.0)], (scope, slots)
    assert cut(Scope(), {}, 2) == [(Scope(), 0.0)], "an evaluator that knows no suites is never cut"


def _ev(scope: Scope, verdicts: dict[str, Verdict]) -> Evaluation:
    return Evaluation(CacheKey("c" * 40, "", "s", "e"), 1, results_of(verdicts), 0.0, "", scope)


def test_parts_of_an_endpoint_stand_for_its_whole_selection() -> None:
    names = ("s", "t", "u")
    part_s = _ev(Scope(("s",)), {"s::a": Verdict.PASS})
    part_tu = _ev(Scope(("t", "u")), {"t::a": Verdict.FAIL})
    assert needs.missing_whole([part_s], Scope(), 1, names) == (Scope(("t", "u")), 1)
    assert needs.missing_whole([part_s, part_tu], Scope(), 1, names) is None
    assert needs.missing_whole([part_s, part_tu], Scope(), 2, names) == (Scope(), 1), "a retry reruns it whole"
    # without the suite list only a run of the default selection covers it (as before)
    assert needs.missing_whole([part_s, part_tu], Scope(), 1) == (Scope(), 1)
    # a part ran its suites' cases: one of them with no verdict was skipped there, others not run
    assert part_s.ran("s::gone") and not part_s.ran("t::a")
    assert part_tu.ran("u::crashed") and not part_tu.ran("s::a")


@dataclass(frozen=True)
class CostedEvaluator(ScopedEvaluator):
    """The scoped evaluator, with the suite costs the MB evaluator reads from its case times."""

    def suite_costs(self) -> dict[str, float | None]:
        return {} if self.cases is not None else {"s": 5.0, "t": 3.0}


def _bisect(tmp_path: Path, repo: Path, shas: list[str], jobs: int, cache: str, costed: bool = True):
    kind = CostedEvaluator if costed else ScopedEvaluator
    ev = kind(repo, workspace_dir_for(tmp_path / cache, open_repo(repo)), tmp_path / f"{cache}-calls.jsonl")
    opts = BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=tmp_path / cache, jobs=jobs)
    return run_bisection(opts, evaluator=ev, progress=None), ev


def test_at_j2_each_endpoint_runs_in_parts_heaviest_first_with_the_same_answer(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 40, {"s::c3": 11, "t::d5": 29})
    run, ev = _bisect(tmp_path, repo, shas, 2, "cache")
    plain, _ = _bisect(tmp_path, repo, shas, 1, "plain", costed=False)
    assert culprits(run.doc) == culprits(plain.doc) == {"s::c3": shas[11], "t::d5": shas[29]}
    ends = {shas[0], shas[-1]}
    at_ends = [(sha, ran) for sha, ran in ev.calls() if sha in ends]
    assert len(at_ends) == 4, at_ends
    # the two heavier parts start first: whichever logs first (a third starts only when one is done)
    assert {c.split("::")[0] for c in at_ends[0][1]} == {"s"}, "the heavier parts first"
    for end in ends:  # the parts of one endpoint ran every case once
        ran = sorted(c for sha, cases in at_ends if sha == end for c in cases)
        assert ran == sorted(CASES)
    costs = run.doc.probe_costs
    assert sorted(c.scope for sha in ends for c in costs[sha]) == ["suites s", "suites s", "suites t", "suites t"]
    assert run.doc.rounds <= plain.doc.rounds, "the parts of the endpoints are one round"
    assert run.doc.probes[shas[0]] == plain.doc.probes[shas[0]], "the parts read as one whole evaluation"
    for case in run.doc.cases:  # a part counts for the cases of its suites only, never as a skip of the others
        assert case.evaluations == sum(case.case_id in ran for _, ran in ev.calls()), case.case_id


def test_a_later_bisect_takes_the_parts_from_the_cache_as_whole_endpoints(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 40, {"s::c3": 17})
    first, ev = _bisect(tmp_path, repo, shas, 2, "cache")
    before = len(ev.calls())
    again, ev = _bisect(tmp_path, repo, shas, 1, "cache")
    assert culprits(again.doc) == culprits(first.doc) == {"s::c3": shas[17]}
    assert len(ev.calls()) == before and again.doc.new_evaluations == 0, "nothing rerun: the parts cover both ends"


def test_one_slot_or_a_listed_case_selection_is_never_cut(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 20, {"t::d1": 7})
    _, ev = _bisect(tmp_path, repo, shas, 1, "cache")
    ends = {shas[0], shas[-1]}
    assert [len(ran) for sha, ran in ev.calls() if sha in ends] == [len(CASES)] * 2
    listed = replace(ev, cases=("t::d1",))
    assert listed.suite_costs() == {}


def test_the_mb_evaluator_costs_its_suites_by_the_remembered_case_times(tmp_path: Path) -> None:
    times = tmp_path / casetimes.FILE
    casetimes.remember(
        times,
        [
            ("direct_sft::a", casetimes.CaseTime("direct_sft", "light", 2.0)),
            ("direct_sft::b", casetimes.CaseTime("direct_sft", "light", 3.0)),
            ("explore::a", casetimes.CaseTime("explore", "full", 9.0)),
        ],
    )
    ev = MBEvaluator(tmp_path, tmp_path, tmp_path, ("direct_sft", "explore", "packed_files"), case_times=times)
    assert ev.suite_costs() == {"direct_sft": 5.0, "explore": 9.0, "packed_files": None}
    assert replace(ev, cases=("explore::a",)).suite_costs() == {}
    default = MBEvaluator(tmp_path, tmp_path, tmp_path, case_times=tmp_path / "absent.json").suite_costs()
    assert set(default) >= {"direct_sft", "explore"} and set(default.values()) == {None}


def test_the_level_driver_asks_what_an_evaluator_declares(tmp_path: Path) -> None:
    """Optional capabilities are declared protocols (harness.bisect.evaluator), not probed names."""
    from harness.bisect.coreeval import CoreEvaluator
    from harness.bisect.evaluator import Costed, Detailing, Narrowing, Selecting, TreeEvaluating

    mb = MBEvaluator(tmp_path, tmp_path, tmp_path)
    core = CoreEvaluator(mb, "held", tmp_path, tmp_path, tmp_path)
    for ev in (mb, core):
        assert all(isinstance(ev, p) for p in (Selecting, Narrowing, Costed, Detailing)), ev
    assert isinstance(mb, TreeEvaluating) and not isinstance(core, TreeEvaluating), "--confirm reverts MB commits"
    scoped = ScopedEvaluator(tmp_path, tmp_path, tmp_path / "log")
    assert isinstance(scoped, Narrowing) and not isinstance(scoped, Costed), "a double without costs is never cut"

    def plain(sha: str) -> None: ...

    assert not any(isinstance(plain, p) for p in (Selecting, Narrowing, Costed, Detailing, TreeEvaluating))


@dataclass(frozen=True)
class LedgerCostedEvaluator(CostedEvaluator):
    """A case not born yet is untestable and names the ledger feature it lacks (as an adapter does)."""

    feature: str = ""

    def __call__(self, sha: str) -> EvalOutcome:
        out = super().__call__(sha)
        tree = WorkspaceCache(self.workspace_dir, self.repo).materialize(sha)
        gone = json.loads((tree / "src" / "megatron" / "bridge" / "state.json").read_text()).get("gone", [])
        cases = dict(out.cases)
        for case in set(gone) & set(cases):
            cases[case] = CaseResult.bare(
                case, Verdict.UNTESTABLE, f"untestable: no such operation here {features.tag(self.feature)}"
            )
        return replace(out, cases=cases)


def test_a_ledger_start_is_read_from_the_part_of_good_that_ran_the_case(tmp_path: Path, monkeypatch) -> None:
    """GOOD's lighter part ran the late case: its ledger feature is read from that part, not from the
    heavier part that never ran it, so the start costs two probes at -j 2 as at -j 1."""
    born, broke = 21, 33
    repo, shas = _fake_history(tmp_path, 48, {"t::d5": broke}, born_at={"t::d5": born})
    ledger = features.Feature("test-op", "a test operation", shas[born][:9], "2026-01-01", "src/x.py", "op")
    monkeypatch.setitem(features.FEATURES, "test-op", ledger)
    ev = LedgerCostedEvaluator(
        repo, workspace_dir_for(tmp_path / "c", open_repo(repo)), tmp_path / "calls.jsonl", feature="test-op"
    )
    opts = BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=tmp_path / "c", jobs=2)
    run = run_bisection(opts, evaluator=ev, progress=None)
    assert culprits(run.doc) == {"t::d5": shas[broke]}
    (start,) = run.doc.late_starts
    assert start.runs_from == shas[born] and start.bisected
    after_ends = [sha for sha, _ in ev.calls()][4:6]  # the four parts of the endpoints first
    assert set(after_ends) == {shas[born - 1], shas[born]}, "the ledger's commit and its parent, not a search"
