"""Reports, JUnit and the nightly history, checked on recorded results (no Megatron-Bridge).

HTML is checked by parsing it into a small element tree, never by searching the template
text, so the tests say what a reader of the page sees: which cells are highlighted, which
commit is blamed, which cases newly fail.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.bisect.document import BisectDoc
from harness.errors import CorruptFile, UsageError
from harness.nightly import history
from harness.nightly.history import write_trend_page
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report import render_bisect_report, render_run_report, write_junit
from harness.report.diffview import row_window

XSS = "<script>alert('pwned')</script>"

# --------------------------------------------------------------------------------------------
# A tiny DOM built with the stdlib parser
# --------------------------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)
    parent: Node | None = None

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Iterator[Node]:
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            if cls is not None and cls not in n.classes:
                continue
            if any(n.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            out.append(n)
        return out

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}> found"
        return found[0]

    def by_id(self, ident: str) -> Node:
        return self.find(id=ident)


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, parent=self.stack[-1])
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}, parent=self.stack[-1]))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return
        raise AssertionError(f"unbalanced </{tag}>")

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(path: Path) -> Node:
    builder = _TreeBuilder()
    builder.feed(path.read_text(encoding="utf-8"))
    builder.close()
    assert len(builder.stack) == 1, f"unclosed elements: {[n.tag for n in builder.stack[1:]]}"
    return builder.root


def external_urls(doc: Node) -> list[str]:
    """Every attribute value or inline style that would make the browser fetch from outside."""
    bad = []
    for n in doc.iter():
        for name, value in n.attrs.items():
            v = value.strip().lower()
            if name in {"src", "href", "xlink:href", "action", "srcset", "poster", "data"} and (
                v.startswith(("http:", "https:", "//", "ftp:", "ws:", "wss:"))
            ):
                bad.append(f"{n.tag}[{name}]={value}")
        if n.tag in {"link", "iframe", "img", "object", "embed", "video", "audio", "source"}:
            bad.append(f"<{n.tag}> element")
        if n.tag == "script" and "src" in n.attrs:
            bad.append("script with src")
        if n.tag == "style" and ("url(" in n.text() or "@import" in n.text()):
            bad.append("style with url()/@import")
    return bad


# --------------------------------------------------------------------------------------------
# Recorded results
# --------------------------------------------------------------------------------------------


def _row_mismatch(path: str, expected: list[Any], obtained: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "path": path,
        "kind": "tensor",
        "expected": None,
        "obtained": None,
        "first_index": None,
        "max_abs": None,
        "max_rel": None,
        "n_mismatch": None,
        "expected_row": expected,
        "obtained_row": obtained,
        **extra,
    }


LONG_EXPECTED = list(range(1000))
LONG_OBTAINED = [(-1 if i in (10, 900) else i) for i in range(1000)]


def sample_run(run_id: str = "run-1", started: str = "2025-05-01T02:00:00+00:00") -> RunResult:
    """A run with every verdict, every kind of diff, an upstream section and hostile text."""
    cases = [
        CaseResult("packing::basic", "packing", Verdict.PASS, 0.12),
        CaseResult(
            "packing::loss_mask",
            "packing",
            Verdict.FAIL,
            0.3,
            message="loss mask differs",
            diff="rows[0].loss_mask differs at 2, 5",
            diff_data={
                "mismatches": [
                    _row_mismatch(
                        "rows[0].loss_mask", [1, 1, 1, 0, 1, 1], [1, 1, 0, 0, 1, 0], first_index=[2], n_mismatch=2
                    )
                ]
            },
        ),
        CaseResult(
            "packing::cu_seqlens",
            "packing",
            Verdict.FAIL,
            0.2,
            message="boundary moved",
            diff="cu_seqlens differ",
            diff_data={"mismatches": [_row_mismatch("rows[0].cu_seqlens_padded", [0, 4, 9, 12], [0, 5, 9, 12])]},
        ),
        CaseResult(
            "packing::long_tokens",
            "packing",
            Verdict.FAIL,
            0.4,
            message="two tokens differ",
            diff="tokens differ at 10 and 900",
            diff_data={"mismatches": [_row_mismatch("rows[1].tokens", LONG_EXPECTED, LONG_OBTAINED)]},
        ),
        CaseResult(
            "packing::logits",
            "packing",
            Verdict.FAIL,
            0.5,
            message="float drift",
            diff="logits max abs 1.5e-3",
            diff_data={
                "mismatches": [
                    {
                        "path": "rows[0].logits",
                        "kind": "tensor",
                        "expected": "tensor(4, 8)",
                        "obtained": "tensor(4, 8)",
                        "first_index": [0, 3],
                        "max_abs": 0.0015,
                        "max_rel": 0.02,
                        "n_mismatch": 3,
                        "expected_row": None,
                        "obtained_row": None,
                    }
                ]
            },
        ),
        CaseResult(
            "packing::needs_cuda",
            "packing",
            Verdict.UNTESTABLE,
            0.0,
            message="needs CUDA: pack_sequences uses torch.cuda",
        ),
        CaseResult(
            "packing::hostile",
            "packing",
            Verdict.FAIL,
            0.1,
            message=f"message with {XSS}",
            diff=f"diff with {XSS}",
            diff_data=None,
        ),
        CaseResult(
            "config::seq_len_too_small",
            "config",
            Verdict.FAIL,
            0.05,
            message="config accepted",
            diff="outcome: expected error, got ok",
            diff_data={
                "mismatches": [
                    {"path": "outcome", "kind": "value", "expected": "error", "obtained": "ok"},
                    {"path": "error_class", "kind": "value", "expected": "ValueError", "obtained": None},
                ]
            },
        ),
        CaseResult("config::ok", "config", Verdict.PASS, 0.01),
        CaseResult("adapters::boom", "adapters", Verdict.ERROR, 0.0, message="KeyError: 'rows' in adapter"),
        CaseResult("upstream::tests/unit/test_packing.py::test_pack", "upstream", Verdict.PASS, 1.0, source="upstream"),
        CaseResult(
            "upstream::tests/unit/test_packing.py::test_flaky",
            "upstream",
            Verdict.FAIL,
            1.0,
            message="flaky: failed 1 of 3 attempts",
            diff="AssertionError",
            source="upstream",
        ),
    ]
    return RunResult(
        run_id=run_id,
        target={"version": "0.6.2", "commit": "a" * 40, "path": "/src/Megatron-Bridge"},
        versions={"megatron-core": "0.19.2", "torch": "2.13.0"},
        machine=Machine(hostname="ci-7", cpu="AMD EPYC 7B13", cpus=2),
        import_mode="installed",
        standins=["transformer_engine"],
        started=started,
        duration_s=93.4,
        cases=cases,
        notes=[f"note with {XSS}", "stand-in transformer_engine used"],
    )


GOOD, BAD = "1" * 40, "9" * 40
COMMITS = [
    {"sha": f"{i}" * 40, "subject": f"commit {i}", "author": "Dev <dev@example.com>", "date": f"2025-04-0{i}T10:00:00Z"}
    for i in range(2, 9)
]


def sample_bisect() -> dict[str, Any]:
    """Seven commits; case A blames commit 5, case B is left ambiguous between 6, 7, 8."""
    probes = {
        COMMITS[1]["sha"]: {"packing::a": "pass", "packing::b": "pass"},
        COMMITS[3]["sha"]: {"packing::a": "fail", "packing::b": "pass"},
        COMMITS[2]["sha"]: {"packing::a": "pass"},
        COMMITS[4]["sha"]: {"packing::b": "untestable"},
        COMMITS[5]["sha"]: {"packing::b": "untestable"},
        COMMITS[6]["sha"]: {"packing::a": "fail", "packing::b": "fail"},
    }
    return {
        "range": {"good": GOOD, "bad": BAD, "n_commits": len(COMMITS)},
        "commits": COMMITS,
        "probes": probes,
        "cases": [
            {
                "case_id": "packing::a",
                "status": "found",
                "culprit": {
                    **COMMITS[3],
                    "subject": "packing: drop last token <b>fast</b>",
                    "files": ["src/megatron/bridge/data/packing.py"],
                    "diff": "--- a/packing.py\n+++ b/packing.py\n-    end = n\n+    end = n - 1\n",
                },
                "candidates": [COMMITS[3]["sha"]],
                "evaluations": 3,
                "golden_diff": "loss_mask differs at 7",
                "source": "golden",
            },
            {
                "case_id": "packing::b",
                "status": "ambiguous",
                "culprit": None,
                "candidates": [COMMITS[4]["sha"], COMMITS[5]["sha"], COMMITS[6]["sha"]],
                "evaluations": 4,
                "golden_diff": "",
                "source": "golden",
            },
            {
                "case_id": "packing::c",
                "status": "not_reproduced",
                "culprit": None,
                "candidates": [],
                "evaluations": 1,
                "golden_diff": "",
                "source": "upstream",
            },
        ],
        "duration_s": 412.0,
        "evaluations": 8,
    }


@pytest.fixture
def run_html(tmp_path: Path) -> Node:
    return parse_html(render_run_report(sample_run(), tmp_path / "run.html"))


def _mismatch_block(doc: Node, path: str) -> Node:
    return doc.find("div", cls="row-mismatch", data_path=path)


def _highlighted(block: Node, row_cls: str) -> list[int]:
    row = block.find("tr", cls=row_cls)
    return [int(td.attrs["data-index"]) for td in row.find_all("td", cls="diff-cell")]


# --------------------------------------------------------------------------------------------
# Run report
# --------------------------------------------------------------------------------------------


def test_run_report_highlights_exactly_the_differing_positions(run_html: Node) -> None:
    block = _mismatch_block(run_html, "rows[0].loss_mask")
    assert _highlighted(block, "row-expected") == [2, 5]
    assert _highlighted(block, "row-obtained") == [2, 5]
    expected_cells = [td.text() for td in block.find("tr", cls="row-expected").find_all("td")]
    assert expected_cells == ["1", "1", "1", "0", "1", "1"]


def test_long_rows_are_windowed_around_every_difference(run_html: Node) -> None:
    block = _mismatch_block(run_html, "rows[1].tokens")
    assert _highlighted(block, "row-obtained") == [10, 900]
    shown = [
        int(td.attrs["data-index"])
        for td in block.find("tr", cls="row-expected").find_all("td")
        if "data-index" in td.attrs
    ]
    assert len(shown) < 100 and 0 not in shown and 999 not in shown
    assert block.find_all("td", cls="gap"), "elided stretches must be marked"


def test_row_window_keeps_short_rows_whole_and_caps_long_ones() -> None:
    assert row_window(5, [1]) == [0, 1, 2, 3, 4]
    window = row_window(100_000, list(range(0, 100_000, 3)))
    assert len([p for p in window if p is not None]) <= 240 and window[-1] is None


def test_cu_seqlens_are_drawn_as_segments_with_moved_boundaries_marked(run_html: Node) -> None:
    block = _mismatch_block(run_html, "rows[0].cu_seqlens_padded")
    svg = block.find("svg", cls="segments")
    assert len(svg.find_all("rect")) == 6  # three sequences per side
    bad = sorted(line.find("title").text() for line in svg.find_all("line", cls="tick-bad"))
    assert bad == ["expected boundary 1 = 4", "obtained boundary 1 = 5"]
    assert _highlighted(block, "row-expected") == [1]
    assert not _mismatch_block(run_html, "rows[0].loss_mask").find_all("svg")


def test_float_and_config_mismatches_show_errors_and_expected_vs_actual(run_html: Node) -> None:
    logits = run_html.find(data_case_id="packing::logits", cls="case")
    cells = [td.text() for td in logits.find("tr", cls="mismatch").find_all("td")]
    assert cells == ["rows[0].logits", "tensor", "tensor(4, 8)", "tensor(4, 8)", "[0, 3]", "0.0015", "0.02", "3"]
    config = run_html.find(data_case_id="config::seq_len_too_small", cls="case")
    rows = {
        tr.find_all("td")[0].text(): (tr.find("td", cls="expected").text(), tr.find("td", cls="obtained").text())
        for tr in config.find_all("tr", cls="mismatch")
    }
    assert rows == {"outcome": ("error", "ok"), "error_class": ("ValueError", "null")}
    header = [th.text() for th in config.find("table", cls="mismatches").find_all("th")]
    assert header == ["path", "kind", "expected", "obtained"]  # no empty numeric-error columns


def test_matrix_counts_sections_and_untestable_reasons(run_html: Node) -> None:
    counts = {
        b.attrs["data-count"]: int(b.text().split()[0])
        for b in run_html.by_id("counts").find_all("span")
        if "data-count" in b.attrs
    }
    assert counts == {"pass": 3, "fail": 7, "untestable": 1, "error": 1}
    golden = {tr.attrs["data-case-id"] for tr in run_html.by_id("golden-cases").find_all("tr", cls="case-row")}
    upstream = {tr.attrs["data-case-id"] for tr in run_html.by_id("upstream-cases").find_all("tr", cls="case-row")}
    assert upstream == {
        "upstream::tests/unit/test_packing.py::test_pack",
        "upstream::tests/unit/test_packing.py::test_flaky",
    }
    assert golden.isdisjoint(upstream) and len(golden) == 10
    buttons = [b.attrs["data-filter"] for b in run_html.find_all("button")]
    assert buttons == ["all", "pass", "fail", "untestable", "error"]
    reason = run_html.by_id("untestable-table").find("td", cls="reason").text()
    assert reason == "needs CUDA: pack_sequences uses torch.cuda"
    target = run_html.by_id("target").text()
    assert "0.6.2" in target and "a" * 40 in target and "transformer_engine" in target


def test_case_text_is_escaped_not_executed(tmp_path: Path) -> None:
    out = render_run_report(sample_run(), tmp_path / "run.html")
    doc = parse_html(out)
    scripts = doc.find_all("script")
    assert len(scripts) == 1 and "pwned" not in scripts[0].text()  # only the filter script
    hostile = doc.find(data_case_id="packing::hostile", cls="case")
    assert XSS in hostile.find("p", cls="msg").text()  # shown as text to the reader
    assert XSS in hostile.find("pre", cls="diff-text").text()
    assert f"note with {XSS}" in doc.by_id("notes").text()


def test_reports_load_nothing_from_outside(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    history.append_run(store, sample_run(), "a" * 40)
    pages = [
        render_run_report(sample_run(), tmp_path / "run.html"),
        render_bisect_report(BisectDoc.from_json(sample_bisect()), tmp_path / "bisect.html"),
        write_trend_page(store, tmp_path / "trend.html", {"packing::loss_mask": "bisect.html"}),
    ]
    for page in pages:
        doc = parse_html(page)
        assert external_urls(doc) == [], page.name
        csp = doc.find("meta", http_equiv="Content-Security-Policy").attrs["content"]
        assert "default-src 'none'" in csp


def test_report_writes_are_atomic_and_versioned(tmp_path: Path) -> None:
    out = render_run_report(sample_run(), tmp_path / "sub" / "run.html")
    assert sorted(p.name for p in out.parent.iterdir()) == ["run.html"]  # no temp file left over
    doc = parse_html(out)
    assert doc.find("meta", name="harness-report-schema").attrs["content"] == "1"
    assert doc.find("meta", name="harness-report-kind").attrs["content"] == "run"


def machine_cells(doc: Node) -> dict[str, str]:
    return {tr.find("th").text(): tr.find("td").text() for tr in doc.by_id("machine").find_all("tr")}


def test_run_header_shows_the_machine_as_the_runner_recorded_it(tmp_path: Path, monkeypatch) -> None:
    """The runner writes the machine record and the header reads the same record: CPU and GPU
    are never blank or "none" by a key mismatch (they were on every real run)."""
    from harness.records import machine
    from harness.suiterun import runner

    monkeypatch.setattr(machine, "_gpu_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(machine, "_cpu_model", lambda: "Intel Xeon Platinum 8480C")
    run = sample_run()
    run.machine = runner.this_machine()  # what run_suites records
    run.save(tmp_path / "results.json")
    doc = parse_html(render_run_report(RunResult.load(tmp_path / "results.json"), tmp_path / "r.html"))
    cells = machine_cells(doc)
    assert cells["GPU"] == "NVIDIA H200"
    assert cells["CPU"].startswith("Intel Xeon Platinum 8480C (") and "CPUs)" in cells["CPU"]


def test_run_header_of_a_schema_1_results_file(tmp_path: Path) -> None:
    """results.json written before the machine record (``cpus``, ``accelerator``) still shows
    its CPU count and GPU (the bisect cache keeps such runs)."""
    doc = sample_run().to_json()
    doc["machine"] = {"hostname": "h", "platform": "Linux", "cpus": 16, "accelerator": "NVIDIA A100-SXM4-80GB"}
    from harness.records.atomicio import write_versioned_json

    write_versioned_json(tmp_path / "results.json", "harness-run", 1, doc)
    cells = machine_cells(parse_html(render_run_report(RunResult.load(tmp_path / "results.json"), tmp_path / "r.html")))
    assert cells["CPU"] == "16 CPUs" and cells["GPU"] == "NVIDIA A100-SXM4-80GB"
    doc["machine"] = {"cpus": 2, "accelerator": "CPU only"}
    write_versioned_json(tmp_path / "results.json", "harness-run", 1, doc)
    cells = machine_cells(parse_html(render_run_report(RunResult.load(tmp_path / "results.json"), tmp_path / "r.html")))
    assert cells["CPU"] == "2 CPUs" and cells["GPU"] == "none"


def test_run_report_of_an_empty_run(tmp_path: Path) -> None:
    empty = RunResult(run_id="empty", target={}, versions={}, machine=Machine(), import_mode="source")
    doc = parse_html(render_run_report(empty, tmp_path / "empty.html"))
    assert doc.by_id("failures").text() == "Failures (0)"
    assert not doc.find_all("tr", cls="case-row")


def test_run_report_folds_long_messages(tmp_path: Path) -> None:
    """Issue 24: every known-fail message printed in full made the page 16,000 px long."""
    long = "known MB bug pad-rows-train: " + "violation " * 60 + "\nsecond line\nthird line"
    run = RunResult(
        run_id="r",
        target={},
        versions={},
        machine=Machine(),
        import_mode="source",
        cases=[CaseResult("s::a", "s", Verdict.KNOWN_FAIL, message=long), CaseResult("s::b", "s", Verdict.PASS)],
    )
    doc = parse_html(render_run_report(run, tmp_path / "r.html"))
    row = doc.find("tr", cls="case-row", data_case_id="s::a")
    fold = row.find("details", cls="fold")
    assert fold is not None and fold.find("summary").text().startswith("known MB bug pad-rows-train:")
    assert len(fold.find("summary").text()) <= 240 and "third line" in fold.text()
    assert doc.find("tr", cls="case-row", data_case_id="s::b").find_all("details", cls="fold") == []


# --------------------------------------------------------------------------------------------
# Bisect report
# --------------------------------------------------------------------------------------------


def test_bisect_report_names_the_culprit(tmp_path: Path) -> None:
    doc = parse_html(render_bisect_report(BisectDoc.from_json(sample_bisect()), tmp_path / "bisect.html"))
    group = doc.find("section", cls="cgroup", data_sha=COMMITS[3]["sha"])
    assert group.find("div", cls="bcase", data_case_id="packing::a")
    assert group.find("td", cls="culprit-sha").text() == COMMITS[3]["sha"]
    assert group.find("td", cls="culprit-subject").text() == "packing: drop last token <b>fast</b>"
    assert "src/megatron/bridge/data/packing.py" in group.find("table", cls="culprit").text()
    assert "+    end = n - 1" in group.find("details", cls="culprit-diff").find("pre").text()
    culprit_cells = [r for r in doc.by_id("timeline").find_all("rect") if "culprit" in r.classes]
    assert len(culprit_cells) == 1 and "fail" in culprit_cells[0].classes


def test_bisect_report_lists_candidates_when_skips_leave_several(tmp_path: Path) -> None:
    doc = parse_html(render_bisect_report(BisectDoc.from_json(sample_bisect()), tmp_path / "bisect.html"))
    amb = doc.find("div", cls="bcase", data_case_id="packing::b")
    assert "3 candidates" in amb.find("p", cls="note").text()
    listed = [tr.find("td").text() for tr in amb.find("table", cls="candidates").find("tbody").find_all("tr")]
    assert listed == [COMMITS[4]["sha"], COMMITS[5]["sha"], COMMITS[6]["sha"]]
    assert not amb.find_all("table", cls="culprit")
    not_rep = doc.find("div", cls="bcase", data_case_id="packing::c")
    assert not_rep.attrs["data-status"] == "not_reproduced" and not_rep.find_all("p", cls="note")


def test_bisect_timeline_colours_probes_per_case(tmp_path: Path) -> None:
    doc = parse_html(render_bisect_report(BisectDoc.from_json(sample_bisect()), tmp_path / "bisect.html"))
    rects = [r for r in doc.by_id("timeline").find_all("rect") if "data-probed" in r.attrs]
    assert len(rects) == 3 * len(COMMITS)  # one lane per case, one cell per commit
    probed = [r for r in rects if r.attrs["data-probed"] == "true"]
    assert len(probed) == sum(len(v) for v in sample_bisect()["probes"].values())
    assert {c for r in probed for c in r.classes} - {"culprit"} == {"pass", "fail", "untestable"}


def test_bisect_report_of_a_partial_record(tmp_path: Path) -> None:
    """Fields missing from bisect.json (an interrupted run) do not stop the report."""
    partial = {"range": {"good": GOOD}, "cases": [{"case_id": "x::y", "status": "found", "culprit": {"sha": BAD}}]}
    doc = parse_html(render_bisect_report(BisectDoc.from_json(partial), tmp_path / "partial.html"))
    assert doc.find("td", cls="culprit-sha").text() == BAD
    assert doc.by_id("timeline").find_all("rect") == []


# --------------------------------------------------------------------------------------------
# JUnit
# --------------------------------------------------------------------------------------------


def test_junit_counts_match_verdicts(tmp_path: Path) -> None:
    run = sample_run()
    root = ET.parse(write_junit(run, tmp_path / "junit.xml")).getroot()
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"packing", "config", "adapters", "upstream"}
    cases = root.findall("testsuite/testcase")
    assert len(cases) == len(run.cases)
    assert len(root.findall("testsuite/testcase/failure")) == 7 == int(root.get("failures"))
    assert len(root.findall("testsuite/testcase/skipped")) == 1 == int(root.get("skipped"))
    assert len(root.findall("testsuite/testcase/error")) == 1 == int(root.get("errors"))
    assert sum(int(s.get("failures")) for s in suites.values()) == 7
    assert suites["packing"].get("tests") == "7" and suites["packing"].get("failures") == "5"
    skipped = root.find("testsuite/testcase/skipped")
    assert skipped.get("message") == "needs CUDA: pack_sequences uses torch.cuda"
    loss = root.find("testsuite/testcase[@name='loss_mask']/failure")
    assert loss.text == "rows[0].loss_mask differs at 2, 5"
    flaky = root.find("testsuite/testcase[@name='tests/unit/test_packing.py::test_flaky']")
    assert flaky.find("properties/property[@name='flaky']").get("value") == "true"
    version = suites["packing"].find("properties/property[@name='harness.schema_version']")
    assert version.get("value") == "1"


def test_junit_survives_control_characters(tmp_path: Path) -> None:
    run = sample_run()
    run.cases[1].diff = "bad\x00byte\x1b[31m red"
    root = ET.parse(write_junit(run, tmp_path / "junit.xml")).getroot()
    assert root.find("testsuite/testcase[@name='loss_mask']/failure").text == "badbyte[31m red"


# --------------------------------------------------------------------------------------------
# History
# --------------------------------------------------------------------------------------------


def _second_run() -> RunResult:
    """Next night: loss_mask fixed, basic and config::ok start failing."""
    run = sample_run("run-2", started="2025-05-02T02:00:00+00:00")
    run.duration_s = 120.0
    for c in run.cases:
        if c.case_id == "packing::loss_mask":
            c.verdict, c.message = Verdict.PASS, ""
        elif c.case_id in ("packing::basic", "config::ok"):
            c.verdict, c.message = Verdict.FAIL, f"broke {XSS}"
    return run


def test_history_append_reload_and_newly_failing(tmp_path: Path) -> None:
    store = tmp_path / "nightly" / "history.parquet"
    history.append_run(store, sample_run(), "a" * 40)
    history.append_run(store, _second_run(), "b" * 40)
    df = history.load(store)
    assert len(df) == 2 * len(sample_run().cases)
    assert sorted(df["run_id"].unique()) == ["run-1", "run-2"]
    tr = history.trend(df)
    assert [r["commit"] for r in tr["runs"]] == ["a" * 40, "b" * 40]
    assert sorted(c["case_id"] for c in tr["newly_failing"]) == ["config::ok", "packing::basic"]
    assert [c["case_id"] for c in tr["newly_fixed"]] == ["packing::loss_mask"]
    assert tr["cases"]["packing::loss_mask"]["series"] == ["fail", "pass"]
    assert [d["duration_s"] for d in tr["durations"]] == [93.4, 120.0]
    assert sorted(p.name for p in store.parent.iterdir()) == [".history.parquet.lock", "history.parquet"]


def test_history_orders_runs_by_time_not_append_order(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    history.append_run(store, _second_run(), "b" * 40)
    history.append_run(store, sample_run(), "a" * 40)  # older run uploaded late
    tr = history.trend(history.load(store))
    assert [r["run_id"] for r in tr["runs"]] == ["run-1", "run-2"]
    assert [c["case_id"] for c in tr["newly_fixed"]] == ["packing::loss_mask"]


def test_history_reappending_a_run_replaces_it(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    history.append_run(store, sample_run(), "a" * 40)
    history.append_run(store, sample_run(), "a" * 40)
    assert len(history.load(store)) == len(sample_run().cases)


def test_history_refuses_newer_schema(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    history.append_run(store, sample_run(), "a" * 40)
    table = pq.read_table(store)
    meta = {**table.schema.metadata, b"harness.schema_version": b"99"}
    pq.write_table(table.replace_schema_metadata(meta), store)
    with pytest.raises(CorruptFile, match="newer"):
        history.load(store)
    with pytest.raises(CorruptFile):
        history.append_run(store, _second_run(), "b" * 40)
    assert pq.read_table(store).schema.metadata[b"harness.schema_version"] == b"99"  # left untouched


@pytest.mark.parametrize(
    "writer",
    [
        lambda p: p.write_bytes(b"not a parquet file at all"),
        lambda p: pq.write_table(pa.table({"x": [1, 2]}), p),  # parquet, but not ours
    ],
    ids=["garbage", "foreign-parquet"],
)
def test_history_unreadable_files_raise_corrupt_file(tmp_path: Path, writer: Callable[[Path], None]) -> None:
    store = tmp_path / "history.parquet"
    writer(store)
    with pytest.raises(CorruptFile, match=str(store.name)):
        history.load(store)


def test_history_of_missing_store_is_empty(tmp_path: Path) -> None:
    df = history.load(tmp_path / "none.parquet")
    assert isinstance(df, pd.DataFrame) and df.empty and "verdict" in df.columns
    assert history.trend(df)["newly_failing"] == []


def test_trend_report_shows_newly_failing_rows_and_bisect_links(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    history.append_run(store, sample_run(), "a" * 40)
    history.append_run(store, _second_run(), "b" * 40)
    out = write_trend_page(store, tmp_path / "trend.html", {"packing::basic": "bisect-basic.html"})
    doc = parse_html(out)
    rows = doc.by_id("newly-failing").find("tbody").find_all("tr")
    assert sorted(r.attrs["data-case-id"] for r in rows) == ["config::ok", "packing::basic"]
    basic = next(r for r in rows if r.attrs["data-case-id"] == "packing::basic")
    assert basic.find("a", cls="bisect-link").attrs["href"] == "bisect-basic.html"
    assert XSS in basic.find("td", cls="msg").text()
    fixed = [r.attrs["data-case-id"] for r in doc.by_id("newly-fixed").find("tbody").find_all("tr")]
    assert fixed == ["packing::loss_mask"]
    grid_row = doc.by_id("trend-grid").find("tr", data_case_id="packing::loss_mask")
    assert [td.attrs["data-verdict"] for td in grid_row.find_all("td", cls="t")] == ["fail", "pass"]
    assert len(doc.by_id("durations").find_all("rect", cls="bar")) == 2


def test_trend_report_says_why_a_newly_failing_case_has_no_bisect(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    history.append_run(store, sample_run(), "a" * 40)
    history.append_run(store, _second_run(), "b" * 40)
    off = parse_html(write_trend_page(store, tmp_path / "off.html"))
    why = "no bisect: the previous nightly's commit aaaaaaaaaaaa is not an ancestor of bbbbbbbbbbbb"
    planned = parse_html(write_trend_page(store, tmp_path / "on.html", {}, bisect_note=why))
    for doc, said in ((off, "no automatic bisection this night"), (planned, why)):
        rows = doc.by_id("newly-failing").find("tbody").find_all("tr")
        cells = [r.find_all("td")[-1] for r in rows]
        assert cells and all(c.text().startswith("none: ") and said in c.find("span").attrs["title"] for c in cells)
        fixed = doc.by_id("newly-fixed").find("tbody").find_all("tr")
        assert fixed and all(r.find_all("td")[-1].text() == "-" for r in fixed), "a fixed case needs no bisect"


def test_trend_report_of_an_empty_store_and_unsafe_links(tmp_path: Path) -> None:
    doc = parse_html(write_trend_page(tmp_path / "none.parquet", tmp_path / "trend.html"))
    assert not doc.find_all("table", id="trend-grid") and not doc.find_all("svg")
    with pytest.raises(UsageError, match="unsafe"):
        write_trend_page(tmp_path / "none.parquet", tmp_path / "t.html", {"a::b": " JavaScript:alert(1)"})


def test_bisect_report_groups_cases_by_culprit_and_names_the_source(tmp_path: Path) -> None:
    bisect = sample_bisect()
    found = next(c for c in bisect["cases"] if c["culprit"])
    twin = dict(found, case_id="upstream::tests/test_x.py::test_pack", source="upstream")
    bisect["cases"].append(twin)
    doc = parse_html(render_bisect_report(BisectDoc.from_json(bisect), tmp_path / "bisect.html"))
    rows = doc.find_all("tr", cls="culprit-group")
    assert len(rows) == 1, "one row per culprit commit, however many cases it broke"
    assert rows[0].attrs["data-sha"] == found["culprit"]["sha"]
    assert rows[0].find("td", cls="blamed-by").text() == "harness suites and MB's upstream tests"
    assert "upstream::tests/test_x.py::test_pack" in rows[0].text()


def test_bisect_report_shows_late_starts_and_confirmations(tmp_path: Path) -> None:
    record = sample_bisect()
    record["late_starts"] = [
        {
            "case_id": "packing::a",
            "at_good": "untestable",
            "runs_from": COMMITS[1]["sha"],
            "verdict_there": "pass",
            "bisected": True,
            "reason": "untestable at good; the oldest commit where it runs is ... : bisected from there",
        },
        {"case_id": "packing::z", "at_good": "error", "runs_from": None, "reason": "could not be found"},
    ]
    record["confirmations"] = [
        {
            "culprit": COMMITS[3]["sha"],
            "status": "not_confirmed",
            "seen": {"packing::a": "same"},
            "detail": "packing::a still fail <b>x</b>",
        }
    ]
    doc = parse_html(render_bisect_report(BisectDoc.from_json(record), tmp_path / "bisect.html"))
    rows = doc.by_id("late-starts").find("tbody").find_all("tr")
    assert [r.attrs["data-case-id"] for r in rows] == ["packing::a", "packing::z"]
    assert rows[0].attrs["data-bisected"] == "true" and "not found" in rows[1].text()
    cell = doc.find("tr", cls="culprit-group").find("td", cls="confirmation")
    assert cell.attrs["data-status"] == "not_confirmed" and "still fail <b>x</b>" in cell.text()


# --------------------------------------------------------------------------------------------
# Failure messages of the suites name what differs
# --------------------------------------------------------------------------------------------


def _assertion_text(check: Callable[[], None]) -> str:
    with pytest.raises((AssertionError, pytest.fail.Exception)) as info:
        check()
    return str(info.value)


def test_explain_helpers_name_position_and_both_values() -> None:
    from suites import _explain

    assert _explain.first_difference([0, 5, 9], [0, 6, 9]) == "position 1: expected 5, got 6 (lengths 3 and 3)"
    assert _explain.first_difference([0, 5], [0, 5, 9], "boundary") == (
        "boundary 2: expected nothing, got 9 (lengths 2 and 3)"
    )
    assert _explain.first_difference([1, 2], [1, 2]) == ""
    assert _explain.multiset_difference([3, 3, 4], [3, 4, 7], "length") == "lengths: missing 1 x 3; extra 1 x 7"
    assert _explain.first_offender([2, 4, 5, 6], lambda x: x % 2 == 0, "boundary") == "boundary 2: 5"
    assert len(_explain.show(list(range(1000)))) == _explain.MAX_CHARS
    # whole packed rows (dicts): the field and the position in it, not the row cut at 240 characters
    row = {"tokens": list(range(300)), "cu_seqlens_q": [0, 20, 40, 64]}
    other = {"tokens": list(range(300)), "cu_seqlens_q": [0, 18, 64]}
    assert _explain.first_difference([row], [other], "packed row") == (
        "packed row 0, field 'cu_seqlens_q' position 1: expected 20, got 18 (lengths 4 and 3)"
    )
    assert "field 'max_seqlen': expected 40, got no such field" in _explain.first_difference(
        [{"max_seqlen": 40}], [{}], "row"
    )


def test_packing_suite_messages_name_bin_row_position_and_values() -> None:
    """Before: ``assert False + where False = all(<generator ...>)`` and no position."""
    from suites import test_packing_algorithms as suite

    over = _assertion_text(lambda: suite._check_bins([40, 30, 9], [[40, 30], [9]], 64))
    assert "bin (total, lengths) 0: (70, [40, 30])" in over and "64" in over
    lost = _assertion_text(lambda: suite._check_bins([40, 30, 9], [[40], [9, 9]], 64))
    assert "missing 1 x 30" in lost and "extra 1 x 9" in lost


def test_refusal_cases_say_what_was_packed_instead(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Before: ``DID NOT RAISE``; now the boundaries MB produced for the malformed batch."""
    from suites import test_in_batch_packing as suite

    monkeypatch.setattr(suite, "_pack", lambda batch, pad_id: {"cu_seqlens_padded": [0, 3, 7], "tokens": [1] * 7})
    text = _assertion_text(lambda: suite._assert_refused({}, 0, (ValueError,), "row 1 of only padding"))
    assert "row 1 of only padding was packed instead of refused" in text
    assert "cu_seqlens_padded [0, 3, 7]" in text and "7 packed tokens" in text and "ValueError" in text

    def refuses(batch: Any, pad_id: int) -> Any:
        raise ValueError("left padding")

    # raised outside MB's code (here: the test's own function): no refusal by a check of MB's
    monkeypatch.setattr(suite, "_pack", refuses)
    text = _assertion_text(lambda: suite._assert_refused({}, 0, (ValueError,), "row 1 left-padded"))
    assert "row 1 left-padded was not refused by a check of MB's" in text and "left padding" in text
    # refused by an explicit raise in Megatron-Bridge's code: no failure
    mb = tmp_path / "megatron" / "bridge" / "data" / "packing" / "in_batch.py"
    mb.parent.mkdir(parents=True)
    mb.write_text("def refuses(batch, pad_id):\n    raise ValueError('left padding')\n")
    space: dict[str, Any] = {}
    exec(compile(mb.read_text(), str(mb), "exec"), space)
    monkeypatch.setattr(suite, "_pack", space["refuses"])
    suite._assert_refused({}, 0, (ValueError,), "row 1 left-padded")


# --------------------------------------------------------------------------------------------
# Triage: grouped culprits, commit links, provenance, the nightly trend
# --------------------------------------------------------------------------------------------

REPO_URL = "https://github.com/NVIDIA-NeMo/Megatron-Bridge"


def test_bisect_report_shows_a_culprit_shared_by_cases_once(tmp_path: Path) -> None:
    """Before: one identical block (commit, files, diff) per case blamed on the same commit."""
    record = sample_bisect()
    found = next(c for c in record["cases"] if c["culprit"])
    record["cases"] += [dict(found, case_id=f"packing::a{i}", golden_diff=f"diff {i}") for i in range(3)]
    doc = parse_html(render_bisect_report(BisectDoc.from_json(record), tmp_path / "bisect.html"))
    groups = doc.find_all("section", cls="cgroup")
    assert len(groups) == 1
    assert len(doc.find_all("table", cls="culprit")) == 1 and len(doc.find_all("details", cls="culprit-diff")) == 1
    blamed = [b.attrs["data-case-id"] for b in groups[0].find_all("div", cls="bcase")]
    assert blamed == ["packing::a", "packing::a0", "packing::a1", "packing::a2"]
    assert [d.find("pre").text() for d in groups[0].find_all("details", cls="golden-diff")][1:] == [
        "diff 0",
        "diff 1",
        "diff 2",
    ]
    unblamed = [b.attrs["data-case-id"] for b in doc.find_all("div", cls="bcase") if b.parent.tag != "section"]
    assert unblamed == ["packing::b", "packing::c"]


def test_bisect_report_links_commits_to_the_web_repository_when_known(tmp_path: Path) -> None:
    record = sample_bisect()
    doc = parse_html(render_bisect_report(BisectDoc.from_json(record), tmp_path / "plain.html"))
    assert not doc.find_all("a", cls="commit-link"), "no repository known: no commit links"
    record["repo_url"] = REPO_URL
    doc = parse_html(render_bisect_report(BisectDoc.from_json(record), tmp_path / "linked.html"))
    hrefs = {a.attrs["href"] for a in doc.find_all("a") if a.attrs.get("href", "").startswith("https://")}
    culprit = COMMITS[3]["sha"]
    assert {f"{REPO_URL}/commit/{GOOD}", f"{REPO_URL}/commit/{BAD}", f"{REPO_URL}/commit/{culprit}"} <= hrefs
    assert f"{REPO_URL}/commit/{COMMITS[4]['sha']}" in hrefs  # ambiguous candidates
    timeline_links = [a.attrs["href"] for a in doc.by_id("timeline").find_all("a")]
    assert timeline_links and all(h.startswith(f"{REPO_URL}/commit/") for h in timeline_links)


def test_timeline_hash_labels_never_crowd_and_lane_labels_keep_the_parameters() -> None:
    from harness.report.pages import _label_columns, _lane_label

    for n in range(1, 200):
        for every in (1, 2, 3, 7):
            cols = sorted(_label_columns(n, every))
            assert cols[0] == 0 and (cols[-1] == n - 1 or n - 1 < every), (n, every, cols)  # both ends when they fit
            assert all(b - a >= every for a, b in itertools.pairwise(cols)), (n, every, cols)
    label = _lane_label("packed_seq_params::test_offline_padded_and_unpadded_long_name[1token-seqs-mult4]")
    assert label.startswith("packed_seq_params::") and label.endswith("[1token-seqs-mult4]") and "…" in label


def test_timeline_lane_labels_end_left_of_the_cells(tmp_path: Path) -> None:
    """Before: labels drawn from x=4 ran under the first column for 30-character case ids."""
    from harness.report.pages import LABEL_CHAR_W, timeline_view

    record = sample_bisect()
    ids = ["in_batch_packing::test_pack_right_padded[chat-5rows-mult6-cp2-tp3-sp]", "s::a"]
    t = timeline_view(BisectDoc.from_json(record), ids, {})
    assert all(len(lane["label"]) * LABEL_CHAR_W + 6 <= t["left"] for lane in t["lanes"])
    assert min(c["x"] for lane in t["lanes"] for c in lane["cells"]) >= t["left"]
    svg = parse_html(render_bisect_report(BisectDoc.from_json(record), tmp_path / "b.html")).by_id("timeline")
    lanes = [x for x in svg.find_all("text") if "lane" in x.classes]
    assert lanes and all(x.attrs.get("text-anchor") == "end" for x in lanes), "right-aligned against the cells"


def test_bisect_report_lists_cases_not_bisected_by_reason(tmp_path: Path) -> None:
    """Before: the terminal listed them, the page left them out."""
    record = sample_bisect()
    record["not_bisected"] = [
        {"case_id": "s::x", "reason": "fails at good too"},
        {"case_id": "s::w", "reason": "fails at good too"},
        {"case_id": "s::y", "reason": "untestable at bad"},
    ]
    doc = parse_html(render_bisect_report(BisectDoc.from_json(record), tmp_path / "bisect.html"))
    rows = doc.by_id("not-bisected").find("tbody").find_all("tr")
    assert [r.attrs["data-reason"] for r in rows] == ["fails at good too", "untestable at bad"]
    assert rows[0].find_all("td")[1].text() == "s::ws::x"


def test_bisect_timeline_colours_known_fail_changed_and_fixed_probes(tmp_path: Path) -> None:
    record = sample_bisect()
    record["probes"][COMMITS[4]["sha"]] = {"packing::a": "known-fail", "packing::b": "changed"}
    record["probes"][COMMITS[5]["sha"]] = {"packing::b": "fixed"}
    out = render_bisect_report(BisectDoc.from_json(record), tmp_path / "bisect.html")
    classes = {c for r in parse_html(out).by_id("timeline").find_all("rect") for c in r.classes}
    assert {"known-fail", "changed", "fixed"} <= classes
    css = parse_html(out).find("style").text()
    for cls in ("known-fail", "changed", "fixed"):
        assert f"svg .{cls} {{ fill:" in css, f"{cls} cells would be drawn black"


def _with_provenance(run: RunResult, **fields: Any) -> RunResult:
    from harness.records.provenance import Provenance

    run.provenance = Provenance(**fields)
    return run


def test_run_report_links_the_mb_commit_and_records_the_harness(tmp_path: Path) -> None:
    sha, own = "1" * 40, "2" * 40
    run = _with_provenance(
        sample_run(), mb_commit=sha, mb_source="the --mb-src checkout", mb_repo_url=REPO_URL, harness_commit=own
    )
    doc = parse_html(render_run_report(run, tmp_path / "run.html"))
    link = doc.by_id("mb-commit").find("a")
    assert link.attrs["href"] == f"{REPO_URL}/commit/{sha}" and link.text() == sha
    assert doc.by_id("harness-commit").text() == own
    release = _with_provenance(sample_run(), mb_ref="v0.6.2", mb_repo_url=REPO_URL, harness_version="0.1.0")
    release.target = {"kind": "installed"}
    doc = parse_html(render_run_report(release, tmp_path / "release.html"))
    assert doc.by_id("mb-commit").find("a").attrs["href"] == f"{REPO_URL}/tree/v0.6.2"
    assert doc.by_id("harness-commit").text() == "0.1.0"


def test_results_json_records_provenance_and_reads_files_without_it(tmp_path: Path) -> None:
    from harness.records.provenance import Provenance

    run = _with_provenance(sample_run(), mb_ref="v0.6.2", harness_commit="3" * 40, harness_version="0.1.0")
    run.save(tmp_path / "results.json")
    again = RunResult.load(tmp_path / "results.json")
    assert again.provenance == run.provenance
    old = run.to_json()
    del old["provenance"]  # a results.json written before provenance was recorded
    assert RunResult.from_json(old).provenance == Provenance()


def test_provenance_of_an_installed_release_and_web_addresses_of_remotes(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.records import provenance

    assert provenance.web_url("git@github.com:NVIDIA-NeMo/Megatron-Bridge.git") == REPO_URL
    assert provenance.web_url("ssh://git@gitlab.example.com:2222/g/mb.git") == "https://gitlab.example.com/g/mb"
    for not_web in ("/home/me/Megatron-Bridge", "file:///srv/mb.git", "javascript:alert(1)", "https://h/a/../b"):
        assert provenance.web_url(not_web) == "", not_web
    assert provenance.commit_url(REPO_URL, "abc1234-dirty") == f"{REPO_URL}/commit/abc1234"
    assert provenance.commit_url(REPO_URL, "v0.6.2") == "" and provenance.commit_url("", "a" * 40) == ""
    with pytest.raises(UsageError, match="--repo-url"):
        provenance.checked_repo_url("/home/me/mb")
    from harness.paths import mb_location
    from harness.suiterun.origin import of_run
    from harness.target import Target

    if mb_location() is None:
        pytest.skip("megatron.bridge is not installed here")
    got = of_run(Target(), "")
    assert got.mb_commit or got.mb_ref, "the installed MB is recorded by commit or release tag"
    assert got.mb_repo_url.startswith("https://") and got.harness_version
    assert got.harness_commit is None or len(got.harness_commit.removesuffix("-dirty")) == 40


def _night(run_id: str, started: str, verdicts: dict[str, tuple[Verdict, float]], url: str = "") -> RunResult:
    cases = [CaseResult(cid, cid.split("::")[0], v, d) for cid, (v, d) in verdicts.items()]
    run = RunResult(run_id, {"kind": "source"}, {}, Machine(), "full", started=started, duration_s=10.0, cases=cases)
    return _with_provenance(run, mb_repo_url=url)


def test_trend_links_nights_to_their_reports_and_commits_and_shows_case_durations(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    nights = [
        ("n1", {"s::a": (Verdict.PASS, 1.0), "s::b": (Verdict.PASS, 2.0), "s::c": (Verdict.PASS, 0.5)}),
        ("n2", {"s::a": (Verdict.PASS, 3.0), "s::b": (Verdict.KNOWN_FAIL, 2.0), "s::c": (Verdict.PASS, 0.5)}),
        ("n3", {"s::a": (Verdict.CHANGED, 6.0), "s::b": (Verdict.KNOWN_FAIL, 2.0), "s::c": (Verdict.UNTESTABLE, 0.1)}),
    ]
    for i, (rid, verdicts) in enumerate(nights):
        run = _night(rid, f"2026-11-0{i + 1}T02:00:00Z", verdicts, REPO_URL)
        history.append_run(store, run, f"{i + 1}" * 40, f"runs/{rid}/report.html")
    doc = parse_html(write_trend_page(store, tmp_path / "trend.html"))
    rows = doc.by_id("nights").find("tbody").find_all("tr")
    assert [r.attrs["data-run-id"] for r in rows] == ["n3", "n2", "n1"], "newest night first"
    assert rows[0].find("a", cls="night-report").attrs["href"] == "runs/n3/report.html"
    assert rows[0].find("a", cls="commit-link").attrs["href"] == f"{REPO_URL}/commit/{'3' * 40}"
    header_links = [a.attrs["href"] for a in doc.by_id("trend-grid").find("thead").find_all("a")]
    assert header_links == ["runs/n1/report.html", "runs/n2/report.html", "runs/n3/report.html"]
    grid_a = doc.by_id("trend-grid").find("tr", data_case_id="s::a")
    cells = grid_a.find_all("td", cls="t")
    assert [c.attrs["data-verdict"] for c in cells] == ["pass", "pass", "changed"]
    assert ["moved" in c.classes for c in cells] == [False, False, True]
    spark = grid_a.find("td", cls="spark")
    points = spark.find("polyline").attrs["points"].split()
    assert len(points) == 3 and float(points[0].split(",")[1]) > float(points[2].split(",")[1]), "6 s is drawn higher"
    assert "6.00 s" in spark.text()
    assert [
        c.attrs["data-verdict"] for c in doc.by_id("trend-grid").find("tr", data_case_id="s::b").find_all("td", cls="t")
    ] == [
        "pass",
        "known-fail",
        "known-fail",
    ]
    assert [r.attrs["data-case-id"] for r in doc.by_id("newly-changed").find("tbody").find_all("tr")] == ["s::a"]
    assert [r.attrs["data-case-id"] for r in doc.by_id("newly-untestable").find("tbody").find_all("tr")] == ["s::c"]
    css = doc.find("style").text()
    assert ".t.changed {" in css and ".t.known-fail {" in css


def test_history_of_schema_1_is_read_with_empty_report_and_repo_url(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    history.append_run(store, sample_run(), "a" * 40, "runs/r/report.html")
    table = pq.read_table(store).drop_columns(["report", "repo_url"])
    meta = {**table.schema.metadata, b"harness.schema_version": b"1"}
    pq.write_table(table.replace_schema_metadata(meta), store)
    df = history.load(store)
    assert set(df["report"]) == {""} and set(df["repo_url"]) == {""}
    history.append_run(store, _second_run(), "b" * 40, "runs/r2/report.html")
    assert pq.read_table(store).schema.metadata[b"harness.schema_version"] == b"2"
    assert history.trend(history.load(store))["runs"][-1]["report"] == "runs/r2/report.html"


def test_trend_refuses_an_unsafe_night_report_address(tmp_path: Path) -> None:
    store = tmp_path / "history.parquet"
    history.append_run(store, sample_run(), "a" * 40, "javascript:alert(1)")
    with pytest.raises(UsageError, match="unsafe"):
        write_trend_page(store, tmp_path / "trend.html")


def test_duration_sparkline_draws_sub_second_noise_flat_and_names_the_largest_only_when_it_differs() -> None:
    """Before: each case scaled to its own largest night, so 0.00/0.01/0.00 s drew full-height
    swings, and an all-zero case claimed "max 1.00 s"."""
    from harness.report.trend import SPARK_H, _sparkline

    def ys(spark: dict[str, Any]) -> list[float]:
        return [float(p.split(",")[1]) for seg in spark["segments"] for p in seg.split()]

    noise = _sparkline([0.0, 0.01, 0.0])
    assert max(ys(noise)) - min(ys(noise)) < 0.5 and noise["max"] == "0.01 s"
    zero = _sparkline([0.0, 0.0])
    assert zero["latest"] == "0.00 s" and zero["max"] == ""
    slow = _sparkline([2.0, 8.0, None, 4.0])
    assert len(slow["segments"]) == 2 and slow["single"] == [slow["segments"][1]], "a gap where the case did not run"
    assert min(ys(slow)) < 2 and max(ys(slow)) > SPARK_H / 2 and slow["max"] == "8.00 s"


def test_timeline_header_says_whether_the_first_column_is_the_good_commit(tmp_path: Path) -> None:
    """Before: "oldest (after good X)" above a first column that was X itself (the driver's range)."""

    def header(record: dict[str, Any], name: str) -> str:
        svg = parse_html(render_bisect_report(BisectDoc.from_json(record), tmp_path / name)).by_id("timeline")
        return next(t.text() for t in svg.find_all("text") if t.text().startswith("oldest"))

    record = sample_bisect()  # its commits start after GOOD
    assert header(record, "after.html").startswith(f"oldest (after good {GOOD[:10]})")
    record["commits"] = [{"sha": GOOD, "subject": "good"}, *COMMITS]
    assert header(record, "at.html").startswith(f"oldest (good {GOOD[:10]})")


def test_packed_seq_params_boundary_messages_name_the_boundary_and_both_lists() -> None:
    """Before: ``assert [0, 8, 12, 16, -1] == [0, 8, 12, 16]`` plus pytest's "Use -v to get more diff"."""
    from suites import test_packed_seq_params as suite

    text = _assertion_text(lambda: suite._same_boundaries([0, 8, 12, 16], [0, 8, 12, 16, -1], "physical"))
    assert text == (
        "physical: boundary 4: expected nothing, got -1 (lengths 4 and 5); "
        "expected [0, 8, 12, 16], got [0, 8, 12, 16, -1]"
    )
    suite._same_boundaries([0, 3], [0, 3], "equal lists pass")


def test_known_bugs_are_grouped_by_bug_with_impact_reason_and_mb_code(tmp_path: Path) -> None:
    """Issue 24: "Known MB bugs (49)" was 49 rows of entry ids; now one row per bug with its
    impact, reason and MB file:line, its cases folded under it; no empty Upstream section."""
    import io

    from harness.report.terminal import print_run_summary

    eos = "packed-collate-masks-eos-inputs@0.6.2"
    cases = [
        CaseResult(f"s::c{i}", "s", Verdict.KNOWN_FAIL, known=[eos], impacts=["drops-trained-token"]) for i in range(3)
    ]
    run = RunResult("r", {"kind": "installed"}, {}, Machine(), "full", cases=cases)
    doc = parse_html(render_run_report(run, tmp_path / "report.html"))
    rows = doc.find("table", id="known-table").find("tbody").find_all("tr")
    assert len(rows) == 1 and rows[0].attrs["data-entry"] == eos
    cells = [td.text() for td in rows[0].find_all("td")]
    assert cells[1] == "drops-trained-token" and "eos_id" in cells[2] and "gpt_sft.py" in cells[3]
    assert "3 cases" in cells[4]
    assert not doc.find_all("h2", id="upstream")
    out = io.StringIO()
    print_run_summary(run, out)
    assert f"  {eos} [drops-trained-token] x3 (data/packing/gpt_sft.py:269" in out.getvalue()
