"""A bisection costs what it bisects (issue 26): the endpoints run the whole selection, every
intermediate probe only the cases still open; verdicts are cached per (commit, case), so a
later bisect runs only what the cache lacks; a killed one resumes with its partial probes.

On generated histories with an evaluator that honours scopes like the MB evaluator does
(suites, listed cases) and logs what each call ran.
"""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from harness.bisect.algorithm import CaseStatus
from harness.bisect.driver import BisectInterrupted, BisectOptions, run_bisection
from harness.bisect.evaluator import EvalOutcome
from harness.bisect.scope import Scope, suite_of
from harness.commands import _args
from harness.records.verdict import Verdict
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import WorkspaceCache, workspace_dir_for
from tests.test_bisect_command import _fake_history, culprits

CASES = tuple(f"s::c{i}" for i in range(12)) + tuple(f"t::d{i}" for i in range(12))


@dataclass(frozen=True)
class ScopedEvaluator:
    """Reads ``state.json`` like the fake-history evaluator; runs only its suites / cases."""

    repo: Path
    workspace_dir: Path
    log: Path
    suites: tuple[str, ...] | None = None
    cases: tuple[str, ...] | None = None
    term_after: int = 0  # SIGTERM this process after that many calls (a CI time limit)

    def cache_namespace(self) -> tuple[str, str]:
        return "scoped-suite", "scoped-env"

    @property
    def scope(self) -> Scope:
        return Scope(self.suites, None, self.cases)

    def narrowed(self, scope: Scope) -> ScopedEvaluator:
        if scope.cases is not None:
            return replace(self, suites=tuple(sorted({suite_of(c) for c in scope.cases})), cases=scope.cases)
        return replace(self, suites=scope.suites)

    def __call__(self, sha: str) -> EvalOutcome:
        tree = WorkspaceCache(self.workspace_dir, self.repo).materialize(sha)
        state = json.loads((tree / "src" / "megatron" / "bridge" / "state.json").read_text())
        ran = [
            c
            for c in CASES
            if (self.suites is None or suite_of(c) in self.suites) and (self.cases is None or c in self.cases)
        ]
        with open(self.log, "a") as fh:
            fh.write(json.dumps([sha, ran]) + "\n")
        if self.term_after and len(self.calls()) == self.term_after:
            os.kill(os.getpid(), signal.SIGTERM)
        verdicts = {c: Verdict.FAIL if c in state["fail"] else Verdict.PASS for c in ran}
        return EvalOutcome.of(verdicts, duration_s=0.01, core_pin=PIN)

    def calls(self) -> list[tuple[str, list[str]]]:
        return [tuple(json.loads(line)) for line in self.log.read_text().splitlines()] if self.log.exists() else []


PIN = "5a1ce0fc0ffee0123456789abcdef0123456789a"  # a Megatron-LM commit the evaluator reports


def _bisect(repo: Path, shas: list[str], cache: Path, log: Path, **kw: object):
    ev = ScopedEvaluator(repo, workspace_dir_for(cache, open_repo(repo)), log)
    ev = replace(ev, **{k: kw.pop(k) for k in ("suites", "term_after") if k in kw})  # type: ignore[arg-type]
    opts = BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=cache, suites=ev.suites, **kw)  # type: ignore[arg-type]
    return run_bisection(opts, evaluator=ev, progress=None), ev


def test_intermediate_probes_run_only_the_open_cases(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 48, {"s::c3": 17, "t::d5": 33})
    run, ev = _bisect(repo, shas, tmp_path / "cache", tmp_path / "calls.jsonl")
    assert culprits(run.doc) == {"s::c3": shas[17], "t::d5": shas[33]}
    calls = ev.calls()
    ends = {shas[0], shas[-1]}
    assert all(len(ran) == len(CASES) for sha, ran in calls if sha in ends), "the endpoints run everything"
    probes = [(sha, ran) for sha, ran in calls if sha not in ends]
    assert probes and all(set(ran) <= {"s::c3", "t::d5"} for _, ran in probes), probes
    # what each probe ran is recorded; a case a probe did not run is "not run", never untestable
    costs = run.doc.probe_costs
    assert {c.scope for sha in ends for c in costs[sha]} == {"all"}
    assert all(c.scope.endswith(("open case", "open cases")) for sha, _ in probes for c in costs[sha])
    narrowed = next(sha for sha, ran in probes if ran == ["t::d5"])
    assert run.doc.probes[narrowed]["t::d5"] in ("pass", "fail") and run.doc.probes[narrowed]["s::c3"] == "not-run"


def test_each_probe_on_the_page_says_what_it_ran_its_cost_and_its_megatron_lm(tmp_path: Path) -> None:
    from harness.report.pages import render_bisect_report
    from tests.test_reports import parse_html

    repo, shas = _fake_history(tmp_path, 20, {"s::c3": 13})
    run, ev = _bisect(repo, shas, tmp_path / "cache", tmp_path / "calls.jsonl")
    assert {c.core_pin for costs in run.doc.probe_costs.values() for c in costs} == {PIN}
    page = parse_html(render_bisect_report(run.doc, tmp_path / "bisect.html"))
    rows = page.by_id("probe-log").find("tbody").find_all("tr")
    assert len(rows) == len(ev.calls()) == run.doc.evaluations
    for row in rows:
        sha = row.attrs["data-sha"]
        cells = [td.text() for td in row.find_all("td")]
        ran = dict(ev.calls())[sha]
        endpoint = sha in (shas[0], shas[-1])
        assert cells[1] == "all" if endpoint else cells[1].endswith(("open case", "open cases")), cells
        assert int(cells[2]) == len(ran) and float(cells[3]) >= 0
        assert len(cells[4]) >= 7 and PIN.startswith(cells[4]), cells


def test_one_open_case_keeps_the_information_bound(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 100, {"t::d1": 61})
    run, ev = _bisect(repo, shas, tmp_path / "cache", tmp_path / "calls.jsonl")
    assert culprits(run.doc) == {"t::d1": shas[61]}
    assert run.doc.evaluations <= math.ceil(math.log2(100)) + 2
    assert sum(len(ran) for _, ran in ev.calls()) == 2 * len(CASES) + run.doc.evaluations - 2


def test_the_cache_answers_a_subset_and_runs_only_the_rest_of_a_superset(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 40, {"s::c2": 11, "t::d7": 29})
    cache, log = tmp_path / "cache", tmp_path / "calls.jsonl"
    first, ev = _bisect(repo, shas, cache, log, suites=("s",))
    assert culprits(first.doc) == {"s::c2": shas[11]}
    n = len(ev.calls())
    again, _ = _bisect(repo, shas, cache, log, suites=("s",))
    assert len(ev.calls()) == n and again.doc.new_evaluations == 0, "a subset the cache holds runs nothing"
    both, _ = _bisect(repo, shas, cache, log, suites=("s", "t"))
    assert culprits(both.doc) == {"s::c2": shas[11], "t::d7": shas[29]}
    later = ev.calls()[n:]
    assert later and all(suite_of(c) == "t" for _, ran in later for c in ran), "only what the cache lacked"
    assert {sha for sha, _ in later} >= {shas[0], shas[-1]}, "the endpoints ran suite t only"
    everything, _ = _bisect(repo, shas, cache, log)  # the default selection: no whole run of it is cached
    assert culprits(everything.doc) == {"s::c2": shas[11], "t::d7": shas[29]}


def test_a_partial_probe_never_stands_for_a_whole_selection(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 24, {"s::c0": 9})
    cache, log = tmp_path / "cache", tmp_path / "calls.jsonl"
    _bisect(repo, shas, cache, log)
    probed = {sha for sha, ran in ScopedEvaluator(repo, tmp_path, log).calls() if len(ran) == 1}
    assert probed, "intermediate probes ran one case"
    _wider, ev = _bisect(repo, [next(iter(probed)), shas[-1]], cache, log)  # a probed commit as GOOD
    good_runs = [ran for sha, ran in ev.calls() if sha == next(iter(probed))]
    assert any(len(ran) == len(CASES) for ran in good_runs), "GOOD runs its whole selection, the probe is no stand-in"


def test_a_killed_bisect_resumes_with_its_partial_probes(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 64, {"s::c4": 40, "t::d2": 21})
    cache, log = tmp_path / "cache", tmp_path / "calls.jsonl"
    with _args.sigterm_as_interrupt(), pytest.raises(BisectInterrupted) as stopped:
        _bisect(repo, shas, cache, log, term_after=5)
    assert stopped.value.run.doc.partial
    assert any(c.status is CaseStatus.OPEN for c in stopped.value.run.doc.cases)
    before = ScopedEvaluator(repo, tmp_path, log).calls()
    resumed, ev = _bisect(repo, shas, cache, log)
    assert culprits(resumed.doc) == {"s::c4": shas[40], "t::d2": shas[21]}
    ran_before = {(sha, c) for sha, ran in before[:-1] for c in ran}  # the last one was in flight
    ran_after = {(sha, c) for sha, ran in ev.calls()[len(before) :] for c in ran}
    assert not ran_before & ran_after, "no (commit, case) stored before the kill runs again"


def test_probe_all_cases_records_what_really_ran(tmp_path: Path) -> None:
    """With --probe-all-cases an endpoint the cache half holds still runs only what it lacks, and
    is recorded as that (never as the whole selection it did not run)."""
    repo, shas = _fake_history(tmp_path, 12, {"t::d1": 7})
    cache, log = tmp_path / "cache", tmp_path / "calls.jsonl"
    _bisect(repo, shas, cache, log, suites=("s",))
    n = len(ScopedEvaluator(repo, tmp_path, log).calls())
    run, ev = _bisect(repo, shas, cache, log, suites=("s", "t"), probe_open_cases=False)
    assert culprits(run.doc) == {"t::d1": shas[7]}
    ends = [ran for sha, ran in ev.calls()[n:] if sha in (shas[0], shas[-1])]
    assert ends and all({suite_of(c) for c in ran} == {"t"} for ran in ends)
    assert {c.scope for sha in (shas[0], shas[-1]) for c in run.doc.probe_costs[sha]} == {"suites t"}
