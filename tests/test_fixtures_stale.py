"""`harness fixtures record` deletes a golden only when its case is gone from the suite.

A case that ran without producing a value (untestable on this MB, a known MB bug, a failure
before its golden check, a harness error) keeps its golden, and a suite that never reported its
cases (crash, timeout) keeps all of them: deleting those would lose valid goldens on --yes.
"""

from __future__ import annotations

import io
from pathlib import Path

from harness.commands.fixtures import _stale
from harness.golden.serializer import encode
from harness.golden.storage import Golden, golden_path, write_golden
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict


def _golden(root: Path, suite: str, case: str) -> Path:
    path = golden_path(root, suite, case)
    write_golden(path, Golden(suite, case, encode({"x": 1}, {})))
    return path


def _run(cases: list[CaseResult]) -> RunResult:
    return RunResult(run_id="r", target={}, versions={}, machine=Machine(), import_mode="auto", cases=cases)


def test_only_goldens_of_cases_that_no_longer_exist_are_stale(tmp_path):
    names = {
        "passing": Verdict.PASS,
        "untestable_here": Verdict.UNTESTABLE,
        "harness_error": Verdict.ERROR,
        "failed_before_golden": Verdict.FAIL,
        "known_mb_bug": Verdict.KNOWN_FAIL,
        "changed": Verdict.CHANGED,
    }
    kept = [_golden(tmp_path, "s", f"test_{n}") for n in names]
    gone = _golden(tmp_path, "s", "test_removed_from_the_suite")
    run = _run([CaseResult(f"s::test_{n}", "s", v) for n, v in names.items()])
    out = io.StringIO()
    assert _stale(tmp_path, run, out) == [gone]
    assert all(p.exists() for p in kept + [gone]), "_stale only proposes; --yes deletes"
    assert "test_removed_from_the_suite no longer exists" in out.getvalue()


def test_a_suite_that_never_reported_its_cases_keeps_every_golden(tmp_path):
    _golden(tmp_path, "s", "test_a")
    _golden(tmp_path, "t", "test_b")
    timed_out = CaseResult("s::*", "s", Verdict.FAIL, message="broken: timeout")
    assert _stale(tmp_path, _run([timed_out, CaseResult("t::test_b", "t", Verdict.PASS)]), io.StringIO()) == []


def test_unreadable_goldens_are_never_proposed_for_deletion(tmp_path):
    bad = golden_path(tmp_path, "s", "test_x")
    bad.parent.mkdir(parents=True)
    bad.write_text("{corrupt")
    assert _stale(tmp_path, _run([CaseResult("s::test_y", "s", Verdict.PASS)]), io.StringIO()) == []
