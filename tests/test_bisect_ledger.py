"""Eras from the ledger first (issue 47, item 2): a case that GOOD cannot run because a ledger
feature did not exist yet starts where the ledger says, verified by a probe there and one at its
parent, instead of a search over the whole range; without a ledger entry the search stays."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness import features
from harness.bisect.driver import run_bisection
from harness.bisect.evaluator import EvalOutcome
from harness.bisect.options import BisectOptions
from harness.records.verdict import Verdict
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import workspace_dir_for
from tests.test_bisect_command import StateEvaluator, _fake_history, culprits


@dataclasses.dataclass(frozen=True)
class LedgerEvaluator(StateEvaluator):
    """Says why a case cannot run the way an adapter does: naming the ledger feature it lacks."""

    feature: str = ""

    def __call__(self, sha: str) -> EvalOutcome:
        out = super().__call__(sha)
        cases = dict(out.cases)
        for case, result in out.cases.items():
            if result.verdict is Verdict.UNTESTABLE and self.feature:
                said = f"untestable: no such operation here {features.tag(self.feature)}"
                cases[case] = dataclasses.replace(result, message=said)
        return dataclasses.replace(out, cases=cases)


def _bisect(repo: Path, shas: list[str], cache: Path, feature: str, counter: Path):
    ev = LedgerEvaluator(repo, workspace_dir_for(cache, open_repo(repo)), counter=counter, feature=feature)
    return run_bisection(
        BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=cache), evaluator=ev, progress=None
    )


def test_a_ledger_feature_introduced_mid_range_costs_two_evaluations_to_locate(tmp_path: Path, monkeypatch) -> None:
    n, born, broke = 96, 41, 77
    repo, shas = _fake_history(tmp_path, n, {"s::a": broke}, born_at={"s::a": born})
    ledger = features.Feature("test-op", "a test operation", shas[born][:9], "2026-01-01", "src/x.py", "op")
    monkeypatch.setitem(features.FEATURES, "test-op", ledger)

    searched = _bisect(repo, shas, tmp_path / "c1", "", tmp_path / "n1")  # no feature named: searched
    from_ledger = _bisect(repo, shas, tmp_path / "c2", "test-op", tmp_path / "n2")
    for run in (searched, from_ledger):
        assert culprits(run.doc) == {"s::a": shas[broke]}
        (start,) = run.doc.late_starts
        assert start.runs_from == shas[born] and start.bisected
    # the endpoints (2), the start (2: the ledger's commit and its parent), then the culprit from there
    probed = (tmp_path / "n2").read_text().split()
    assert probed[2:4] in ([shas[born - 1], shas[born]], [shas[born], shas[born - 1]])
    assert from_ledger.doc.evaluations <= searched.doc.evaluations - 3
    start_cost = from_ledger.doc.evaluations - 2 - (len(probed) - 4)
    assert start_cost == 2


@pytest.mark.parametrize("wrong", [5, 60])
def test_a_ledger_start_that_does_not_verify_falls_back_to_the_search(tmp_path: Path, monkeypatch, wrong: int) -> None:
    repo, shas = _fake_history(tmp_path, 64, {"s::a": 50}, born_at={"s::a": 30})
    ledger = features.Feature("test-op", "a test operation", shas[wrong][:9], "2026-01-01", "src/x.py", "op")
    monkeypatch.setitem(features.FEATURES, "test-op", ledger)
    run = _bisect(repo, shas, tmp_path / "c", "test-op", tmp_path / "n")
    (start,) = run.doc.late_starts
    assert start.runs_from == shas[30] and culprits(run.doc) == {"s::a": shas[50]}
