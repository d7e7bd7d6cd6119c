"""Mutation scoring on synthetic case results: invariant-level vs golden-level differences from the baseline.

No MB, no subprocess: case records are built here the way the plugin writes them (verdict,
message, structured violations), including the verdicts CHANGED / KNOWN_FAIL / FIXED.
"""

from __future__ import annotations

import io
from dataclasses import asdict

import pytest

from harness.commands import mutate
from harness.mutations import scoring, table
from harness.mutations.scoring import Level, Status, compare_case, evidence
from harness.records.atomicio import read_versioned_json
from harness.records.results import CaseResult
from harness.records.verdict import Verdict

EOS_MASK = {
    "invariant": "loss-mask-equals-unpacked",
    "row": 0,
    "position": 3,
    "expected": "1",
    "got": "0",
    "detail": "example #1, token 3 of 9",
    "tags": ["input:eos", "input:eod"],
}
PAD_MASK = dict(EOS_MASK, position=5, tags=["input:pad"])
PADDING = {
    "invariant": "padding-never-trains",
    "row": 1,
    "position": 20,
    "expected": "0",
    "got": "1",
    "detail": "not a real token of any example",
    "tags": ["padding:eod"],
}
ORACLE_MSG = "assertion failed: packed != MB's own unpacked path: loss-mask-equals-unpacked x1"


def case(verdict: str, message: str = "", violations: list | None = None) -> dict:
    return {"case_id": "s::c", "suite": "s", "verdict": verdict, "message": message, "violations": violations or []}


def ev(verdict: str, message: str = "", violations: list | None = None, digest: str | None = None):
    return evidence(case(verdict, message, violations), digest)


def test_evidence_kinds_from_the_plugins_messages():
    assert ev("fail", ORACLE_MSG, [EOS_MASK]).kinds == {"oracle"}
    assert ev("fail", ORACLE_MSG, [EOS_MASK]).signatures == {("loss-mask-equals-unpacked", ("input:eos", "input:eod"))}
    assert ev("changed", "changed: golden mismatch (x):\n$.rows[0]").kinds == {scoring.GOLDEN}
    assert ev("fail", "golden mismatch (/a/b.json):\n...").kinds == {scoring.GOLDEN}  # before CHANGED existed
    assert ev("fail", "no golden at /x/y.json; obtained value written to /z").kinds == {scoring.GOLDEN}
    assert ev("fail", "Megatron raised ValueError: boom 3").kinds == {"raised: ValueError"}
    assert ev("fail", "assertion failed: shapes vary: [5, 6]\nassert 2 == 1").kinds == {
        "assertion: shapes vary: [#...]"
    }
    assert ev("fail", "assertion failed: ").kinds == {"assertion: (no message: a bare assert)"}
    assert ev("error", "harness error KeyError: 'x'").kinds == {scoring.ERROR}
    for quiet in ("pass", "fixed", "untestable"):
        assert ev(quiet).kinds == frozenset() and ev(quiet).signatures == frozenset()
    # a CaseResult works as well as its JSON form, and KNOWN_FAIL is read by its violations
    known = CaseResult(
        "s::c", "s", Verdict.KNOWN_FAIL, message="known MB bug eos-mask\n" + ORACLE_MSG, violations=[EOS_MASK]
    )
    assert evidence(known).kinds == {"oracle"} and evidence(known).signatures == ev("fail", "", [EOS_MASK]).signatures


def test_a_known_bug_in_the_baseline_is_neither_a_catch_nor_a_mask():
    base = ev("fail", ORACLE_MSG, [EOS_MASK])
    assert compare_case(base, ev("fail", ORACLE_MSG, [EOS_MASK, dict(EOS_MASK, position=9)])) == (Level.NONE, [])
    level, reasons = compare_case(base, ev("fail", ORACLE_MSG, [EOS_MASK, PAD_MASK]))
    assert level is Level.INVARIANT and reasons == ["new violation loss-mask-equals-unpacked [input:pad]"]
    # the lead's KNOWN_FAIL for the same bug is the baseline's too
    assert compare_case(ev("known-fail", "k", [EOS_MASK]), ev("known-fail", "k", [EOS_MASK]))[0] is Level.NONE
    assert compare_case(ev("known-fail", "k", [EOS_MASK]), ev("fail", "x", [EOS_MASK, PADDING]))[0] is Level.INVARIANT


def test_new_failure_kinds_are_invariant_level():
    level, reasons = compare_case(ev("pass"), ev("fail", ORACLE_MSG, [PADDING]))
    assert level is Level.INVARIANT and reasons == ["new violation padding-never-trains [padding:eod]"]
    level, reasons = compare_case(
        ev("changed", "changed: no golden at /a"), ev("fail", "Megatron raised IndexError: x")
    )
    assert level is Level.INVARIANT and reasons == ["new failure raised: IndexError"]
    same_rule = compare_case(
        ev("fail", "assertion failed: rule broken: 3 != 4"), ev("fail", "assertion failed: rule broken: 5 != 4")
    )
    assert same_rule[0] is Level.NONE, "numbers in a message do not make a new failure"
    assert (
        compare_case(ev("fail", "assertion failed: rule A"), ev("fail", "assertion failed: rule B"))[0]
        is Level.INVARIANT
    )
    assert compare_case(None, ev("fail", ORACLE_MSG, [PADDING]))[0] is Level.INVARIANT  # case absent from the baseline


def test_golden_level_differences():
    assert compare_case(ev("pass"), ev("changed", "changed: golden mismatch"))[0] is Level.GOLDEN
    assert compare_case(ev("pass"), ev("fail", "golden mismatch (p)"))[0] is Level.GOLDEN
    both = ("changed", "changed: no golden at /a; obtained value written to /b")
    assert compare_case(ev(*both, digest="v1"), ev(*both, digest="v1"))[0] is Level.NONE
    assert compare_case(ev(*both, digest="v1"), ev(*both, digest="v2")) == (
        Level.GOLDEN,
        ["obtained value differs from the baseline's"],
    )
    assert compare_case(ev(*both), ev(*both))[0] is Level.NONE, "unknown values: no evidence of a change"
    # an invariant failure outranks the golden one in the same case
    assert compare_case(ev("changed", "changed: x"), ev("fail", ORACLE_MSG, [EOS_MASK]))[0] is Level.INVARIANT


def test_errors_and_passes_are_no_catch():
    assert compare_case(ev("pass"), ev("error", "harness error X"))[0] is Level.ERROR
    assert compare_case(ev("error", "e"), ev("error", "e"))[0] is Level.NONE
    assert compare_case(ev("fail", ORACLE_MSG, [EOS_MASK]), ev("pass"))[0] is Level.NONE
    assert compare_case(ev("pass"), ev("untestable", "no such op"))[0] is Level.NONE


def _cases(**by_id):
    return {k: ev(*v) if isinstance(v, tuple) else v for k, v in by_id.items()}


def test_score_statuses():
    base = _cases(a=("fail", ORACLE_MSG, [EOS_MASK]), b=("pass",), c=("changed", "changed: no golden"))
    caught = scoring.score(base, _cases(a=("fail", ORACLE_MSG, [EOS_MASK, PAD_MASK]), b=("pass",), c=("pass",)))
    assert caught.status is Status.CAUGHT and list(caught.invariant_cases) == ["a"]
    golden = scoring.score(base, _cases(a=("fail", ORACLE_MSG, [EOS_MASK]), b=("changed", "changed: golden mismatch")))
    assert golden.status is Status.GOLDEN_ONLY and list(golden.golden_cases) == ["b"]
    errors = scoring.score(base, _cases(a=("error", "harness error"), b=("pass",)))
    assert errors.status is Status.ERROR_ONLY and errors.error_cases == ["a"]
    assert scoring.score(base, dict(base)).status is Status.ESCAPED


def test_fix_mutants():
    base = _cases(a=("fail", ORACLE_MSG, [EOS_MASK, PADDING]), b=("fail", ORACLE_MSG, [EOS_MASK]))
    clean = scoring.score(base, _cases(a=("fail", ORACLE_MSG, [EOS_MASK]), b=("fixed",)), fix=True)
    assert clean.status is Status.CLEAN and not clean.invariant_cases
    assert clean.fixed_cases == {
        "a": ["violation gone padding-never-trains [padding:eod]"],
        "b": ["violation gone loss-mask-equals-unpacked [input:eos, input:eod]", "now fixed"],
    }
    # a fix that makes a golden change is fine (goldens pin the old behaviour); one that breaks an invariant is not
    assert (
        scoring.score(base, _cases(a=("changed", "changed: golden mismatch"), b=("pass",)), fix=True).status
        is Status.CLEAN
    )
    broken = scoring.score(base, _cases(a=("fail", ORACLE_MSG, [PAD_MASK]), b=("pass",)), fix=True)
    assert broken.status is Status.BREAKS and list(broken.invariant_cases) == ["a"]


def _row(id: str, status: Status, kind: str = "fault", catchable: bool = True, **kw) -> table.Row:
    return table.Row(id, "collate", kind, catchable, "d", status.value, **kw)


ROWS = [
    _row("f1", Status.CAUGHT, invariant_cases={"s::a": ["new violation x"]}),
    _row("f2", Status.CAUGHT),
    _row("f3", Status.GOLDEN_ONLY, golden_cases={"s::b": ["golden"]}),
    _row("f4", Status.ESCAPED),
    _row("f5", Status.NOT_APPLICABLE),
    _row("f6", Status.ESCAPED, catchable=False, reason="needs CP>1"),
    _row("x1", Status.CLEAN, kind="fix", fixed_cases={"s::a": ["now pass"]}),
    _row("x2", Status.BREAKS, kind="fix", invariant_cases={"s::c": ["new violation y"]}),
]


def test_overall_score_counts_catchable_applicable_faults_only():
    s = scoring.overall([asdict(r) for r in ROWS])
    assert (s.caught, s.golden_only, s.scored) == (2, 1, 4)
    assert s.value == pytest.approx(0.5) and s.with_goldens == pytest.approx(0.75)
    assert scoring.overall([]).value == 0.0


def test_table_prints_invariant_score_golden_catches_and_fixes_apart():
    buf = io.StringIO()
    table.print_table(ROWS, buf)
    text = buf.getvalue()
    assert "invariant-only score: 2/4 = 50.0%  (1 not applicable)" in text
    assert "golden-only catches: 1 (f3); with goldens: 75.0%" in text
    assert "escaped: f4\n" in text
    assert "not catchable here (n/c, not scored): f6: escaped; needs CP>1" in text
    assert "fix x1: clean [OK]" in text and "fix x2: breaks invariants [ORACLE OR FIX WRONG]" in text


def test_summary_is_typed_and_versioned(tmp_path):
    summary = table.Summary(0.5, 2, 1, 4, 1, 2, [{"suites": ["s"], "cases": 3}], ROWS)
    summary.save(tmp_path / "summary.json")
    doc = read_versioned_json(tmp_path / "summary.json", scoring.SUMMARY_KIND, scoring.SUMMARY_SCHEMA)
    assert doc["score"] == 0.5 and doc["faults"][0]["invariant_cases"] == {"s::a": ["new violation x"]}
    assert [f["id"] for f in doc["faults"]] == [r.id for r in ROWS]


def test_one_baseline_per_suite_selection(tmp_path, monkeypatch):
    """Suites of one import group share a process, so only the same selection is a comparable baseline."""
    calls = []

    def fake_run_baseline(out, suites, *, timeout, pkg, keyword=None):
        calls.append((out.name, suites))
        result = mutate.RunResult(
            "r", {}, {}, {}, "auto", cases=[CaseResult(f"{s}::c", s, Verdict.PASS) for s in suites or ["all"]]
        )
        return result, {c.case_id: evidence(c) for c in result.cases}

    monkeypatch.setattr(mutate, "run_baseline", fake_run_baseline)
    baselines = mutate.Baselines(tmp_path, timeout=1, pkg=tmp_path)
    first = baselines.get(["padding_loss_masks", "offline_packed_dataset"])
    assert baselines.get(["offline_packed_dataset", "padding_loss_masks"]) is first, "order does not matter"
    assert set(baselines.get(["cp_constraints"])) == {"cp_constraints::c"}
    assert set(baselines.get(None)) == {"all::c"}
    assert [s for _, s in calls] == [["padding_loss_masks", "offline_packed_dataset"], ["cp_constraints"], None]
    assert [d["suites"] for d in baselines.describe()] == [
        ["all"],
        ["cp_constraints"],
        ["offline_packed_dataset", "padding_loss_masks"],
    ]
