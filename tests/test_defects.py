"""One row per defect (issue 45): a red night reads as the few MB defects behind it, in every output.

The runs here are records as the suite process writes them (the violations of a real padding
regression: ``padding-never-trains`` with its consequences on the step's loss totals, in three
suites; a second, unrelated fault: MB raising in a function of its own), so each output is
checked on the same input: the terminal's last block, the page's defect table, the Markdown
summary, ``compare`` and JUnit.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.golden import training
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report import defects
from harness.report.junit import write_junit
from harness.report.markdown import compare, compare_lines, compare_markdown, run_summary
from harness.report.terminal import print_run_summary


def _violation(invariant: str, impact: str, row: int = 0) -> dict[str, object]:
    return {"invariant": invariant, "row": row, "position": 3, "expected": "0", "got": "1", "detail": "", "tags": []}


def _padding_case(cid: str, seconds: float, consequence: bool = False) -> CaseResult:
    violations = [_violation("padding-never-trains", "trains-padding", r) for r in range(12)]
    violations = [{**v, "impact": "trains-padding"} for v in violations]
    if consequence:  # the step's totals follow the padding that trains: not a second defect
        violations.append({**_violation("loss-totals-equal-unpacked", ""), "impact": "wrong-loss-normalisation"})
    lines = [f"padding-never-trains [trains-padding]: row {r}, position 3" for r in range(12)]
    return CaseResult(
        cid,
        cid.split("::")[0],
        Verdict.FAIL,
        duration_s=seconds,
        message="assertion failed: packed != MB's own unpacked path: padding-never-trains x12\n" + "\n".join(lines),
        violations=violations,
        impacts=sorted({str(v["impact"]) for v in violations}),
    )


def _raised(cid: str) -> CaseResult:
    return CaseResult(
        cid,
        cid.split("::")[0],
        Verdict.FAIL,
        message="Megatron raised IndexError: list index out of range [at megatron/bridge/data/x.py:42 in pack]",
        impacts=["crash"],
    )


def _run(run_id: str, cases: list[CaseResult]) -> RunResult:
    return RunResult(run_id, {"kind": "source"}, {"megatron-bridge": "0.7.0"}, Machine(), "full", cases=cases)


ONE_FAULT = [
    _padding_case("offline_packed_dataset::test_packed_equals_unpacked[prompt-mult4]", 2.0),
    _padding_case("packed_files::test_packed_files_the_user_names[plain]", 1.0),
    _padding_case("forward_cpu::test_offline_gpt_step[prompt-mult4]", 9.0, consequence=True),
    CaseResult("chat_collate::test_ok", "chat_collate", Verdict.PASS),
]


def test_one_fault_in_three_suites_is_one_defect_everywhere(tmp_path: Path):
    run = _run("night2", ONE_FAULT)
    (found,) = defects.defects(run)
    assert found.kind == "fail" and found.what == "padding-never-trains" and len(found.cases) == 3
    assert found.suites == ["offline_packed_dataset", "packed_files", "forward_cpu"]
    assert found.smallest == "packed_files::test_packed_files_the_user_names[plain]"  # the quickest

    out = io.StringIO()
    print_run_summary(run, out)
    text = out.getvalue()
    last = text.rstrip().splitlines()[-4:]  # the answer closes the output, where a CI log's tail is
    assert last[0] == "defects: 1 (3 case(s)); known MB bugs: 0"
    assert last[1].startswith(f"DEFECT {found.id} trains-padding,wrong-loss-normalisation padding-never-trains")
    assert "3 case(s), 3 suites" in last[1] and "--suite packed_files" in last[3]
    assert "... and 7 more lines" in text  # the per-case detail above is capped

    summary = run_summary(run, "https://ci/report")
    assert summary.count("| `D-") == 1 and len(summary.encode()) < 2048

    from harness.report.runpage import render_run_report

    page = render_run_report(run, tmp_path / "report.html").read_text()
    assert page.count('data-defect-id="') == 1 and page.index('id="defects"') < page.index('id="target"')

    junit = ET.parse(write_junit(run, tmp_path / "junit.xml"))
    tagged = {p.get("value") for p in junit.iter("property") if p.get("name") == "defect"}
    assert tagged == {found.id}


def test_a_second_unrelated_fault_is_a_second_defect_and_new_against_the_base():
    base = _run("night1", ONE_FAULT)
    now = _run("night2", [*ONE_FAULT, _raised("data_loaders::test_rows[a]"), _raised("in_batch_packing::test_b")])
    found = defects.defects(now, base)
    assert [len(d.cases) for d in found] == [3, 2]
    assert [d.new for d in found] == [False, True]  # ids are stable from one night to the next
    assert found[1].where == "megatron/bridge/data/x.py:42" and found[1].impacts == ["crash"]

    diff = compare(base, now)
    assert [d.id for d in diff.defects_new] == [found[1].id] and [d.id for d in diff.defects_still] == [found[0].id]
    lines = compare_lines(diff)
    assert lines[0] == "new defects (1):" and "environment: the same" in lines
    md = compare_markdown(diff, "MB 0.7.0 aaa", "MB 0.7.0 bbb")
    assert "1 new defect(s), 0 gone, 1 still there." in md


def test_compare_names_every_environment_difference():
    a = _run("a", ONE_FAULT)
    b = _run("b", ONE_FAULT)
    b.versions = {**a.versions, "megatron-core": "Megatron-LM 2a75ac12c54b (pinned by the MB commit)"}
    b.standins = ["te-thd-partition"]
    lines = compare_lines(compare(a, b))
    assert "environment differs:" in lines
    assert any(line.strip().startswith("megatron-core: - -> Megatron-LM 2a75ac") for line in lines)
    assert any("stand-ins: + te-thd-partition" in line for line in lines)


def test_a_known_bug_is_one_row_per_piece_of_code():
    cases = [
        CaseResult("s::a", "s", Verdict.KNOWN_FAIL, known=["packed-collate-masks-eos-inputs@0.6.2"]),
        CaseResult("s::b", "s", Verdict.KNOWN_FAIL, known=["packed-collate-masks-eos-inputs-loss-totals@0.6.2"]),
    ]
    (found,) = defects.defects(_run("r", cases))  # the loss totals of the same line of MB
    assert found.kind == "known" and found.where.startswith("data/packing/gpt_sft.py:269")


def test_a_golden_change_is_read_in_training_terms():
    mismatches = {
        "mismatches": [
            {"path": "$.micro_batches[0].trained", "expected_row": [7.0, 23.0], "obtained_row": [16.0, 25.0]},
            {"path": "$.value.cu_seqlens_q_padded", "expected_row": [0, 8], "obtained_row": [0, 16]},
        ]
    }
    assert training.from_mismatches(mismatches) == ["trains 11 more token(s)", "boundaries move (1 field(s))"]
    assert training.between(
        {"micro_batches": [{"trained": [3.0], "width": 32}]}, {"micro_batches": [{"trained": [1.0], "width": 64}]}
    ) == ["trains 2 fewer token(s)"]
    assert training.between({"refused": "ValueError", "width": 8}, {"refused": "TypeError", "width": 16}) == []


def test_fixtures_record_holds_back_a_change_in_what_trains(tmp_path: Path):
    """The suite process stages each value with its review (harness.suite.goldenfixture.review);
    ``harness fixtures record`` reads the reviews and holds back what changes what trains."""
    from harness.commands.fixtures import _changes
    from harness.errors import CorruptFile
    from harness.golden.storage import Golden, golden_path, review_path, write_golden, write_review
    from harness.suite.goldenfixture import review

    def golden(value: dict[str, object], case: str) -> Golden:
        return Golden(suite="parallel_layouts", case=case, value=value, tolerances={}, provenance={})

    fixtures, obtained = tmp_path / "fixtures", tmp_path / "obtained"
    for case, old, new in (
        ("trains", {"trained": [7.0, 23.0]}, {"trained": [16.0, 25.0]}),
        ("wording", {"refused": "ValueError"}, {"refused": "TypeError"}),
        ("same", {"refused": "ValueError"}, {"refused": "ValueError"}),
    ):
        current = golden_path(fixtures, "parallel_layouts", case)
        write_golden(current, golden(old, case))
        staged = golden_path(obtained, "parallel_layouts", case)
        write_golden(staged, golden(new, case))
        write_review(staged, review(current, golden(new, case)))
    out = io.StringIO()
    changes, held = _changes(obtained, fixtures, out)
    assert len(changes) == 2 and [dest.stem for _src, dest in held] == ["trains"]
    assert "TRAINING parallel_layouts::trains: trains 11 more token(s)" in out.getvalue()
    assert json.loads(golden_path(fixtures, "parallel_layouts", "trains").read_text())["value"]["trained"] == [
        7.0,
        23.0,
    ]
    review_path(golden_path(obtained, "parallel_layouts", "wording")).unlink()
    with pytest.raises(CorruptFile, match="no review beside the staged golden"):
        _changes(obtained, fixtures, io.StringIO())


def test_a_change_that_trains_more_tokens_is_named_with_the_open_padding_defect():
    (found,) = defects.defects(_run("night", ONE_FAULT))
    assert defects.matching(["trains 11 more token(s)"], [found]) == [found.id]
    assert defects.matching(["trains 2 fewer token(s)"], [found]) == []  # the other direction
    assert defects.matching([], [found]) == []
    out = io.StringIO()
    changed = CaseResult(
        "parallel_layouts::test_cp[x]",
        "parallel_layouts",
        Verdict.CHANGED,
        message="changed: golden mismatch",
        diff_data={"mismatches": [{"path": "$.trained", "expected_row": [7.0], "obtained_row": [16.0]}]},
    )
    print_run_summary(_run("night", [*ONE_FAULT, changed]), out)
    assert f"trains 9 more token(s), the way of open defect {found.id}" in out.getvalue()
    assert "not offered for accept" in out.getvalue()


def _bisect_record(path: Path, found: dict[str, str]) -> Path:
    """A bisect.json whose cases were each blamed on the commit ``found`` names (``c`` + parent ``p``)."""
    from harness.bisect.caserecords import CaseDoc, CaseStatus, Culprit
    from harness.bisect.document import BisectDoc, RangeDoc

    cases = [
        CaseDoc(cid, CaseStatus.FOUND, Culprit(sha, f"subject of {sha}"), last_good="p" + sha[1:])
        for cid, sha in found.items()
    ]
    path.mkdir(parents=True, exist_ok=True)
    doc = BisectDoc(RangeDoc("g" * 40, "b" * 40), cases=cases)
    (path / "bisect.json").write_text(json.dumps(doc.to_json()))
    return path / "bisect.json"


def test_the_culprit_refines_a_defect_its_other_cases_checked_there(tmp_path: Path) -> None:
    """One defect's lead case is blamed on commit C; of its two other cases, the one that flips at
    C (fails there, passes at its parent) stays in the defect, the one that does not is split off."""
    from harness.nightly import refine

    culprit = "c" * 40
    record = _bisect_record(tmp_path / "main", {"s::lead": culprit})
    calls: list[tuple[str, str, list[str]]] = []

    def check(parent: str, bad: str, cases: list[str], where: Path):
        calls.append((parent, bad, cases))
        _bisect_record(where, {"s::twin": bad})  # only the twin flips at the culprit
        return None

    out = io.StringIO()
    got = refine.refine({"D-1": ["s::lead", "s::twin", "s::other"]}, record, check, tmp_path, out)
    assert calls == [("p" + culprit[1:], culprit, ["s::twin", "s::other"])], "checked at the culprit and its parent"
    (row,) = got.defects
    assert row.culprit == culprit and row.same == ["s::lead", "s::twin"] and row.split == ["s::other"]
    assert "1 split off" in out.getvalue()
    assert refine.DefectCulprits.read(tmp_path / refine.FILENAME) == got, "written as a typed record"
    # a lead without a single culprit names no culprit and checks nothing
    got = refine.refine({"D-2": ["s::x", "s::y"]}, record, check, tmp_path, io.StringIO())
    assert got.defects[0].culprit == "" and len(calls) == 1
