"""An interrupted bisection (Ctrl-C, or SIGTERM from a CI time limit) writes what it knows.

Issue 23, item 6: a real ``harness bisect`` killed by SIGTERM wrote nothing under ``--out``
although every verdict was cached. Now the driver hands back a partial record (each open case
with the range still to search), the command writes bisect.json and the report, exits 130, and
the same command resumes from the cache to the culprit.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.bisect.algorithm import CaseStatus
from harness.bisect.document import BisectDoc
from harness.bisect.driver import BisectInterrupted, BisectOptions, run_bisection
from harness.bisect.evaluator import EvalOutcome
from harness.commands import _args
from harness.commands.bisect import write_outputs
from harness.report.terminal import bisect_summary_lines
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import workspace_dir_for
from tests.test_bisect_command import StateEvaluator, _fake_history, culprits


@dataclass(frozen=True)
class TermAfter(StateEvaluator):
    """Sends this process SIGTERM on its ``after``-th call, as a CI job's time limit does."""

    after: int = 3

    def __call__(self, sha: str) -> EvalOutcome:
        outcome = super().__call__(sha)
        assert self.counter is not None
        if len(self.counter.read_text().split()) == self.after:
            os.kill(os.getpid(), signal.SIGTERM)
        return outcome


def _bisect(repo: Path, shas: list[str], cache: Path, counter: Path, after: int) -> BisectDoc:
    ev = TermAfter(repo, workspace_dir_for(cache, open_repo(repo)), counter=counter, after=after)
    opts = BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=cache)
    with _args.sigterm_as_interrupt():
        return run_bisection(opts, evaluator=ev, progress=None).doc


def test_sigterm_mid_search_writes_a_partial_record_and_the_rerun_resumes(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 64, {"s::a": 41})
    cache, counter = tmp_path / "cache", tmp_path / "calls.txt"
    counter.write_text("")
    with pytest.raises(BisectInterrupted) as stopped:
        _bisect(repo, shas, cache, counter, after=4)  # both endpoints, probes, one in flight at the stop
    doc = stopped.value.run.doc
    assert doc.partial and stopped.value.run.exit_code == 1
    (case,) = doc.cases
    assert case.status is CaseStatus.OPEN
    assert case.last_good is not None and case.candidates, "an open case keeps the range left to search"
    lo, hi = shas.index(case.last_good), shas.index(case.candidates[-1])
    assert lo < 41 <= hi and case.candidates == shas[lo + 1 : hi + 1] and len(case.candidates) < 63
    json_path, report = write_outputs(doc, tmp_path / "out")
    again = BisectDoc.load(json_path)
    assert again.partial and again.cases[0].candidates == case.candidates
    assert "Partial:" in report.read_text() and "PARTIAL" in "\n".join(bisect_summary_lines(doc))
    calls = counter.read_text().split()
    resumed = _bisect(repo, shas, cache, counter, after=10**6)  # the same command again
    assert culprits(resumed) == {"s::a": shas[41]} and not resumed.partial
    # every evaluation recorded before the stop is reused; only the one in flight may run again
    assert resumed.cached_evaluations >= len(calls) - 1
    assert set(counter.read_text().split()[len(calls) :]) & set(calls) <= {calls[-1]}


def test_sigterm_before_the_endpoints_says_nothing_was_bisected(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 8, {"s::a": 5})
    counter = tmp_path / "calls.txt"
    counter.write_text("")
    with pytest.raises(BisectInterrupted) as stopped:
        _bisect(repo, shas, tmp_path / "cache", counter, after=1)
    run = stopped.value.run
    assert run.doc.partial and run.doc.cases == [] and "before both endpoints" in run.message


def test_the_command_writes_bisect_json_and_the_report_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness import cli
    from harness.bisect import driver

    repo, shas = _fake_history(tmp_path, 24, {"s::a": 13})
    counter = tmp_path / "calls.txt"
    counter.write_text("")
    ev = TermAfter(repo, workspace_dir_for(tmp_path / "cache", open_repo(repo)), counter=counter, after=3)
    real = driver.run_bisection
    monkeypatch.setattr(driver, "run_bisection", lambda opts, **kw: real(opts, **{**kw, "evaluator": ev}))
    out = tmp_path / "out"
    argv = ["bisect", f"{shas[0]}..{shas[-1]}", "--repo", str(repo), "--cache-dir", str(tmp_path / "cache")]
    code = cli.main([*argv, "--out", str(out), "-q", "--suite", "packing_algorithms"])
    assert code == 130
    doc = BisectDoc.load(out / "bisect.json")
    assert doc.partial and doc.cases[0].status is CaseStatus.OPEN and (out / "report.html").is_file()
    captured = capsys.readouterr()
    assert "PARTIAL" in captured.out and "rerun the same command to resume" in captured.err
