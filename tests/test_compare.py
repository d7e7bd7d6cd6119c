"""``harness compare A B`` and ``harness run --summary-md``: the answer for a PR comment or a CI
job summary (issue 24, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import cli
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report.markdown import compare, run_summary


def _run(run_id: str, *cases: tuple[str, Verdict], impacts: dict[str, list[str]] | None = None) -> RunResult:
    return RunResult(
        run_id,
        {"kind": "installed"},
        {"megatron-bridge": "0.6.2"},
        Machine(),
        "full",
        cases=[
            CaseResult(cid, cid.split("::")[0], v, message=f"{v.value} here", impacts=(impacts or {}).get(cid, []))
            for cid, v in cases
        ],
    )


A = _run(
    "night1",
    ("s::broke", Verdict.PASS),
    ("s::mended", Verdict.FAIL),
    ("s::moved", Verdict.PASS),
    ("s::lost", Verdict.PASS),
    ("s::golden", Verdict.PASS),
)
B = _run(
    "night2",
    ("s::broke", Verdict.FAIL),
    ("s::mended", Verdict.PASS),
    ("s::moved", Verdict.UNTESTABLE),
    ("s::golden", Verdict.CHANGED),
    impacts={"s::broke": ["trains-padding"]},
)


def test_compare_sorts_every_change_and_says_when_b_is_worse():
    diff = compare(A, B)
    assert [n.case_id for _, n in diff.new_failures] == ["s::broke"]
    assert [n.case_id for _, n in diff.fixed] == ["s::mended"]
    assert [n.case_id for _, n in diff.untestable] == ["s::moved"]
    assert [n.case_id for _, n in diff.changed] == ["s::golden"]
    assert [c.case_id for c in diff.gone] == ["s::lost"]
    assert diff.worse and not compare(A, A).worse


def test_the_compare_command_prints_and_writes_markdown(tmp_path: Path, capsys, monkeypatch):
    A.save(tmp_path / "a" / "results.json")
    B.save(tmp_path / "b" / "results.json")
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    md = tmp_path / "diff.md"
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b" / "results.json"), "--markdown", str(md)]) == 1
    out = capsys.readouterr().out
    assert "new failures (1):" in out and "s::broke  pass -> fail [trains-padding]" in out
    assert "gone (1):" in out and "s::lost  pass -> not run" in out
    assert "new defects (1):" in out and "environment: the same" in out
    text = md.read_text()
    assert "### harness compare: MB 0.6.2 → MB 0.6.2" in text and "`s::broke`: pass → fail" in text
    assert "1 new defect(s), 1 gone, 0 still there." in text
    assert summary.read_text() == text
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "a")]) == 0


def test_compare_of_something_that_is_no_run_is_a_one_line_error(tmp_path: Path, capsys):
    assert cli.main(["compare", str(tmp_path), str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("(give a run's results.json or its directory)")


@pytest.mark.parametrize("verdict", [Verdict.FAIL, Verdict.PASS])
def test_the_run_summary_gives_the_answer_first(verdict: Verdict):
    run = _run("r", ("s::a", verdict), ("s::k", Verdict.KNOWN_FAIL), impacts={"s::a": ["crash"]})
    run.cases[1].known = ["eos-masked@0.6.2"]
    run.cases[1].impacts = ["drops-trained-token"]
    text = run_summary(run, "https://ci/report.html")
    head = "❌ 1 defect(s) to act on" if verdict is Verdict.FAIL else "✅ nothing"
    assert text.startswith("### harness run: " + head) and "[report](https://ci/report.html)" in text
    assert "1 known MB bug(s) (1 cases)" in text
    assert ("| crash | `fail here` | 1 |" in text) == (verdict is Verdict.FAIL)  # one row per defect
    assert ("harness run --suite s -k 'a'" in text) == (verdict is Verdict.FAIL)
    assert len(text.encode()) < 2048
