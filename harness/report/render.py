"""Self-contained HTML reports (run, bisect) and JUnit XML for a run.

Why one HTML file with everything inline: reports are attached to CI jobs, mailed and opened
from artefact stores that serve no neighbouring files and may sit behind no network, so a
report must never load a stylesheet, font, script or image from anywhere. The templates carry
a Content-Security-Policy that forbids every external load, so a regression here is caught
by the browser test rather than by a user on a broken page.

Templates stay dumb: everything that needs a decision (which cells differ, where a
cu_seqlens boundary lies, which window of a long row to show) is computed here into plain
dicts, so it can be tested without parsing HTML and the templates only lay it out.
Autoescaping is always on: case messages and diffs come from a library under test and can
contain anything, including markup.
"""

from __future__ import annotations

import functools
import json
import math
import re
import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable

import jinja2

import harness
from harness.atomicio import atomic_write_text
from harness.bisect.document import BisectDoc, CaseDoc
from harness.results import CaseResult, RunResult
from harness.verdict import Verdict

TEMPLATE_DIR = Path(__file__).parent / "templates"

#: Rows no longer than this are shown whole; longer ones as windows around the differences.
FULL_ROW_LIMIT = 96
#: Positions kept on each side of a difference when a row is windowed.
ROW_CONTEXT = 6
#: Most cells shown for one row, so a row that differs everywhere cannot blow up the page.
MAX_ROW_CELLS = 240
#: Longest text shown for an expected/obtained scalar before it is cut.
MAX_VALUE_CHARS = 300
#: Mismatches shown per case; the plain-text diff below still has them all.
MAX_MISMATCHES = 20

#: Version of the report formats (HTML meta tag, JUnit property); bump on a breaking change.
REPORT_SCHEMA = 1

VERDICT_ORDER = [v.value for v in Verdict]
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


# --------------------------------------------------------------------------------------------
# Jinja environment
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """One shared environment (templates compile once), autoescape forced on for every
    template rather than chosen by file extension."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["short"] = short_sha
    env.filters["secs"] = format_seconds
    env.filters["num"] = format_number
    return env


def render_template(name: str, context: dict[str, Any], out_path: Path) -> Path:
    """Render ``name`` with ``context`` and write it atomically to ``out_path``."""
    html = _environment().get_template(name).render(
        harness_version=harness.__version__, report_schema=REPORT_SCHEMA, **context
    )
    out_path = Path(out_path)
    atomic_write_text(out_path, html)
    return out_path


# --------------------------------------------------------------------------------------------
# Small formatting helpers (also used as template filters)
# --------------------------------------------------------------------------------------------


def short_sha(sha: Any) -> str:
    """First 10 characters of a commit hash: unique in practice, readable in a table."""
    return str(sha or "")[:10]


def format_seconds(value: Any) -> str:
    """Durations as a person reads them: 0.42 s, 12.3 s, 4 min 05 s."""
    try:
        secs = float(value)
    except (TypeError, ValueError):
        return ""
    if math.isnan(secs):
        return ""
    if secs < 10:
        return f"{secs:.2f} s"
    if secs < 120:
        return f"{secs:.1f} s"
    minutes, rest = divmod(int(round(secs)), 60)
    if minutes < 120:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def format_number(value: Any) -> str:
    """Errors in a compact, exact-enough form (``3.2e-07``) and ints unchanged."""
    if value is None:
        return ""
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def format_value(value: Any) -> str:
    """Short display text of an expected/obtained value (JSON for structures, cut if long)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + "…"
    return text


def _cell_text(value: Any) -> str:
    """One element of an aligned row: ints as is, floats short, anything else as JSON."""
    if isinstance(value, float):
        return format_number(value)
    if isinstance(value, (int, str)):
        return str(value)
    return format_value(value)


# --------------------------------------------------------------------------------------------
# Golden diff view model
# --------------------------------------------------------------------------------------------


def _values_differ(a: Any, b: Any) -> bool:
    """Element comparison for display; NaN equals NaN so a NaN row is not all red."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return False
    return a != b


def differing_positions(expected: list[Any], obtained: list[Any]) -> list[int]:
    """Indices where two 1-D rows differ, including positions only one of them has."""
    n = max(len(expected), len(obtained))
    out = []
    for i in range(n):
        if i >= len(expected) or i >= len(obtained) or _values_differ(expected[i], obtained[i]):
            out.append(i)
    return out


def row_window(length: int, diffs: list[int]) -> list[int | None]:
    """Positions to display for a row of ``length``; ``None`` marks an elided gap.

    Short rows are shown whole. Long rows (packed sequences run to thousands of tokens)
    show every difference with a little context, because the reader needs to see where the
    rows part, not scroll through identical tokens.
    """
    if length <= FULL_ROW_LIMIT:
        return list(range(length))
    keep: set[int] = set()
    for d in diffs:
        keep.update(range(max(0, d - ROW_CONTEXT), min(length, d + ROW_CONTEXT + 1)))
    if not keep:
        keep.update(range(min(length, FULL_ROW_LIMIT)))
    out: list[int | None] = []
    prev = -1
    for i in sorted(keep):
        if len(out) >= MAX_ROW_CELLS:
            out.append(None)
            return out
        if i != prev + 1:
            out.append(None)
        out.append(i)
        prev = i
    if prev != length - 1:
        out.append(None)
    return out


def aligned_row_view(expected: list[Any], obtained: list[Any]) -> dict[str, Any]:
    """Cells for the two-row expected/obtained table, each flagged when it differs."""
    diffs = differing_positions(expected, obtained)
    diff_set = set(diffs)
    cells = []
    for pos in row_window(max(len(expected), len(obtained)), diffs):
        if pos is None:
            cells.append({"gap": True})
            continue
        cells.append(
            {
                "gap": False,
                "index": pos,
                "expected": _cell_text(expected[pos]) if pos < len(expected) else "",
                "obtained": _cell_text(obtained[pos]) if pos < len(obtained) else "",
                "diff": pos in diff_set,
            }
        )
    return {
        "cells": cells,
        "diffs": diffs,
        "n_diff": len(diffs),
        "len_expected": len(expected),
        "len_obtained": len(obtained),
        "shown_diffs": sum(1 for c in cells if not c["gap"] and c["diff"]),
    }


def is_cu_seqlens(path: str) -> bool:
    """True when the mismatch path names a cu_seqlens tensor (``rows[0].cu_seqlens_padded``)."""
    leaf = re.split(r"[.\[\]/]+", path.strip(".[]/"))[-1] if path else ""
    return leaf.startswith("cu_seqlens")


def _as_numbers(row: Iterable[Any]) -> list[float] | None:
    """The row as floats, or None when it holds something that is not a boundary."""
    out = []
    for v in row:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out


def segments_view(expected: list[Any], obtained: list[Any], width: float = 760.0) -> dict[str, Any] | None:
    """Geometry of the cu_seqlens picture: one bar per side, one block per packed sequence.

    A block is a sequence ``[b[i], b[i+1])``; a boundary present on one side only is drawn
    red, so an off-by-one in packing shows as a red tick where the bars stop agreeing.
    """
    exp, obt = _as_numbers(expected), _as_numbers(obtained)
    if exp is None or obt is None or not exp or not obt:
        return None
    lo = min(exp[0], obt[0], 0.0)
    hi = max(max(exp), max(obt))
    span = (hi - lo) or 1.0
    left, bar_h, gap, top = 80.0, 22.0, 14.0, 18.0

    def x(v: float) -> float:
        return round(left + (v - lo) / span * width, 2)

    bars = []
    for k, (label, row, other) in enumerate((("expected", exp, obt), ("obtained", obt, exp))):
        y = top + k * (bar_h + gap)
        other_set = set(other)
        blocks = [
            {"x": x(a), "w": max(round(x(b) - x(a), 2), 0.5), "cls": "seg-a" if i % 2 == 0 else "seg-b",
             "title": f"{label} sequence {i}: [{format_number(a)}, {format_number(b)}) length {format_number(b - a)}"}
            for i, (a, b) in enumerate(zip(row, row[1:]))
        ]
        ticks = [{"x": x(v), "bad": v not in other_set, "title": f"{label} boundary {i} = {format_number(v)}"}
                 for i, v in enumerate(row)]
        bars.append({"label": label, "y": y, "h": bar_h, "blocks": blocks, "ticks": ticks,
                     "label_y": round(y + bar_h * 0.7, 2)})
    height = top + 2 * (bar_h + gap) + 10
    return {"bars": bars, "width": round(left + width + 20, 2), "height": round(height, 2),
            "axis": [{"x": x(lo), "text": format_number(int(lo) if lo.is_integer() else lo)},
                     {"x": x(hi), "text": format_number(int(hi) if hi.is_integer() else hi)}]}


def mismatch_view(m: dict[str, Any]) -> dict[str, Any]:
    """One mismatch ready for the template: scalars formatted, rows aligned, segments drawn."""
    path = str(m.get("path", ""))
    exp_row, obt_row = m.get("expected_row"), m.get("obtained_row")
    has_rows = isinstance(exp_row, list) and isinstance(obt_row, list)
    view = {
        "path": path,
        "kind": str(m.get("kind", "")),
        "expected": format_value(m.get("expected")),
        "obtained": format_value(m.get("obtained")),
        "first_index": format_value(m.get("first_index")) if m.get("first_index") is not None else "",
        "max_abs": format_number(m.get("max_abs")),
        "max_rel": format_number(m.get("max_rel")),
        "n_mismatch": format_number(m.get("n_mismatch")),
        "rows": aligned_row_view(exp_row, obt_row) if has_rows else None,
        "segments": segments_view(exp_row, obt_row) if has_rows and is_cu_seqlens(path) else None,
    }
    view["has_errors"] = bool(view["max_abs"] or view["max_rel"] or view["n_mismatch"] or view["first_index"])
    return view


def diff_view(case: CaseResult) -> dict[str, Any]:
    """The readable diff of one case: structured mismatches when present, else the text."""
    data = case.diff_data if isinstance(case.diff_data, dict) else {}
    raw = data.get("mismatches") or []
    mismatches = [mismatch_view(m) for m in raw[:MAX_MISMATCHES] if isinstance(m, dict)]
    scalars = [m for m in mismatches if m["rows"] is None]
    return {
        # Config cases have no numeric errors: their table drops those empty columns.
        "scalar_has_errors": any(m["has_errors"] for m in scalars),
        "row_mismatches": [m for m in mismatches if m["rows"] is not None],
        "scalar_mismatches": [m for m in mismatches if m["rows"] is None],
        "n_total": len(raw),
        "n_hidden": max(0, len(raw) - MAX_MISMATCHES),
        "text": case.diff,
    }


# --------------------------------------------------------------------------------------------
# Run report
# --------------------------------------------------------------------------------------------


def case_name(case: CaseResult) -> str:
    """The case part of ``<suite>::<case>`` (the whole id when it has no suite prefix)."""
    prefix = f"{case.suite}::"
    return case.case_id[len(prefix):] if case.case_id.startswith(prefix) else case.case_id


def anchor(case_id: str) -> str:
    """A stable HTML id for a case (ids in reports must not contain spaces or quotes)."""
    return "case-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", case_id).strip("-")


def _case_view(case: CaseResult) -> dict[str, Any]:
    return {
        "id": case.case_id,
        "name": case_name(case),
        "suite": case.suite,
        "verdict": case.verdict.value,
        "duration_s": case.duration_s,
        "message": case.message,
        "anchor": anchor(case.case_id),
        "source": case.source,
    }


def _suites(cases: list[CaseResult]) -> list[dict[str, Any]]:
    """Cases grouped by suite, suites in first-seen order (the order the run executed)."""
    groups: "OrderedDict[str, list[CaseResult]]" = OrderedDict()
    for c in cases:
        groups.setdefault(c.suite, []).append(c)
    out = []
    for suite, members in groups.items():
        counts = {v: 0 for v in VERDICT_ORDER}
        for c in members:
            counts[c.verdict.value] += 1
        out.append({"name": suite, "cases": [_case_view(c) for c in members], "counts": counts})
    return out


def _header_view(run: RunResult) -> dict[str, Any]:
    """The facts a reader needs to trust or distrust the run, with the usual keys first."""
    target, versions, machine = run.target or {}, run.versions or {}, run.machine or {}
    mb_version = target.get("version") or versions.get("megatron-bridge") or versions.get("megatron_bridge") or ""
    return {
        "mb_version": mb_version,
        "mb_commit": target.get("commit") or target.get("sha") or "",
        "mcore": versions.get("megatron-core") or versions.get("megatron_core") or versions.get("mcore") or "",
        "torch": versions.get("torch", ""),
        "cpu": machine.get("cpu", ""),
        "gpu": machine.get("gpu", "") or "none",
        "target_items": sorted((str(k), format_value(v)) for k, v in target.items()),
        "version_items": sorted((str(k), format_value(v)) for k, v in versions.items()),
        "machine_items": sorted((str(k), format_value(v)) for k, v in machine.items()),
    }


def run_context(run: RunResult) -> dict[str, Any]:
    """Everything the run template shows, computed once."""
    golden = [c for c in run.cases if c.source != "upstream"]
    upstream = [c for c in run.cases if c.source == "upstream"]
    failures = [
        {**_case_view(c), "diff": diff_view(c)} for c in run.cases if c.verdict == Verdict.FAIL
    ]
    return {
        "run": run,
        "header": _header_view(run),
        "counts": run.counts(),
        "verdicts": VERDICT_ORDER,
        "golden_suites": _suites(golden),
        "upstream_suites": _suites(upstream),
        "failures": failures,
        "errors": [_case_view(c) for c in run.cases if c.verdict == Verdict.ERROR],
        "untestable": [_case_view(c) for c in run.cases if c.verdict == Verdict.UNTESTABLE],
    }


def render_run_report(run: RunResult, out_path: Path) -> Path:
    """Write the HTML report of one run to ``out_path`` (atomically) and return the path."""
    return render_template("run.html.j2", run_context(run), out_path)


# --------------------------------------------------------------------------------------------
# Bisect report
# --------------------------------------------------------------------------------------------


def _verdict_class(value: Any) -> str:
    value = str(value or "")
    return value if value in VERDICT_ORDER else ("untestable" if value == "skip" else "unknown")


def timeline_view(bisect: BisectDoc, case_ids: list[str], culprits: dict[str, str]) -> dict[str, Any]:
    """SVG geometry of the range: one column per commit, one lane per case.

    Probed commits are coloured by their verdict for that lane's case; a culprit gets a
    dark outline. Geometry is scaled so a 2,000-commit range still fits the page width.
    """
    commits = bisect.commits
    probes = bisect.probes
    n = max(len(commits), 1)
    left, top, lane_h, gap = 200.0, 26.0, 20.0, 6.0
    cell_w = max(2.0, min(72.0, 1000.0 / n))
    label_every = max(1, math.ceil(64.0 / cell_w))  # a 7-character hash needs about 60 px
    columns = []
    for i, commit in enumerate(commits):
        sha = commit.sha
        columns.append({"x": round(left + i * cell_w, 2), "sha": sha, "short": short_sha(sha)[:7],
                        "subject": commit.subject, "probed": sha in probes,
                        "label": i % label_every == 0 or i == n - 1})
    lanes = []
    for k, cid in enumerate(case_ids):
        y = round(top + k * (lane_h + gap), 2)
        cells = []
        for col in columns:
            verdict = (probes.get(col["sha"]) or {}).get(cid)
            cells.append({"x": col["x"], "w": cell_w, "probed": verdict is not None,
                          "cls": _verdict_class(verdict) if verdict is not None else "unprobed",
                          "culprit": culprits.get(cid) == col["sha"],
                          "title": f"{cid} @ {col['short']} {col['subject']}: {verdict or 'not probed'}"})
        lanes.append({"case_id": cid, "y": y, "h": lane_h, "cells": cells, "label_y": round(y + lane_h * 0.7, 2)})
    height = top + max(len(case_ids), 1) * (lane_h + gap) + 24
    return {"columns": columns, "lanes": lanes, "cell_w": cell_w, "left": left,
            "width": round(left + n * cell_w + 20, 2), "height": round(height, 2),
            "axis_y": round(height - 14, 2)}


def _bisect_case_view(case: CaseDoc, bisect: BisectDoc) -> dict[str, Any]:
    candidates = []
    for sha in case.candidates:
        meta = bisect.commit(sha)
        candidates.append({"sha": sha, "subject": meta.subject, "author": meta.author, "date": meta.date})
    return {
        "case_id": case.case_id,
        "anchor": anchor(case.case_id),
        "status": case.status.value,
        "source": case.source,
        "evaluations": "?" if case.evaluations is None else case.evaluations,
        "culprit": case.culprit,
        "candidates": candidates,
        "golden_diff": case.golden_diff,
    }


def bisect_context(bisect: BisectDoc) -> dict[str, Any]:
    """Everything the bisect template shows, from a bisection record."""
    views = {id(c): _bisect_case_view(c, bisect) for c in bisect.cases}
    culprits = {c.case_id: c.culprit.sha for c in bisect.cases if c.culprit}
    rng = bisect.range
    return {
        "labels": {"good": "old", "bad": "new", "first": "first fixed commit"} if bisect.find_fix
        else {"good": "good", "bad": "bad", "first": "first bad commit"},
        "range": {"good": rng.good, "bad": rng.bad,
                  "n_commits": len(bisect.commits) if rng.n_commits is None else rng.n_commits},
        "duration_s": bisect.duration_s,
        "evaluations": "?" if bisect.evaluations is None else bisect.evaluations,
        "n_probed": len(bisect.probes),
        "cases": list(views.values()),
        "culprit_groups": [{"culprit": g.culprit, "cases": [views[id(c)] for c in g.cases],
                            "sources": g.sources, "blamed_by": g.blamed_by} for g in bisect.culprit_groups()],
        "timeline": timeline_view(bisect, [c.case_id for c in bisect.cases], culprits),
        "verdicts": VERDICT_ORDER,
    }


def render_bisect_report(bisect: BisectDoc, out_path: Path) -> Path:
    """Write the HTML report of one bisection to ``out_path`` (atomically)."""
    return render_template("bisect.html.j2", bisect_context(bisect), out_path)


# --------------------------------------------------------------------------------------------
# JUnit XML
# --------------------------------------------------------------------------------------------


def _xml_text(text: Any) -> str:
    """Text safe for XML 1.0: control characters from captured output would make the file
    unparseable for every CI system, so they are dropped rather than escaped."""
    return _XML_INVALID.sub("", str(text or ""))


def _is_flaky(case: CaseResult) -> bool:
    return "flaky" in (case.message or "").lower()


def _testcase(case: CaseResult) -> ET.Element:
    el = ET.Element("testcase", {"classname": _xml_text(case.suite), "name": _xml_text(case_name(case)),
                                 "time": f"{max(case.duration_s, 0.0):.3f}"})
    props = ET.SubElement(el, "properties")
    ET.SubElement(props, "property", {"name": "case_id", "value": _xml_text(case.case_id)})
    ET.SubElement(props, "property", {"name": "source", "value": _xml_text(case.source)})
    if _is_flaky(case):
        ET.SubElement(props, "property", {"name": "flaky", "value": "true"})
    message = _xml_text(case.message)
    if case.verdict == Verdict.FAIL:
        failure = ET.SubElement(el, "failure", {"message": message, "type": f"{case.source}-mismatch"})
        failure.text = _xml_text(case.diff or case.message)
    elif case.verdict == Verdict.ERROR:
        error = ET.SubElement(el, "error", {"message": message, "type": "harness-error"})
        error.text = message
    elif case.verdict == Verdict.UNTESTABLE:
        ET.SubElement(el, "skipped", {"message": message})
    elif _is_flaky(case):
        # Passed in the end but failed on some attempt: Surefire's convention.
        flaky = ET.SubElement(el, "flakyFailure", {"message": message, "type": "flaky"})
        flaky.text = _xml_text(case.diff or case.message)
    return el


def _suite_attrs(name: str, cases: list[CaseResult]) -> dict[str, str]:
    count = lambda v: sum(1 for c in cases if c.verdict == v)  # noqa: E731
    return {"name": _xml_text(name), "tests": str(len(cases)), "failures": str(count(Verdict.FAIL)),
            "errors": str(count(Verdict.ERROR)), "skipped": str(count(Verdict.UNTESTABLE)),
            "time": f"{sum(max(c.duration_s, 0.0) for c in cases):.3f}"}


def junit_tree(run: RunResult) -> ET.ElementTree:
    """The JUnit document: one <testsuite> per suite inside one <testsuites> for the run."""
    root = ET.Element("testsuites", _suite_attrs(f"harness {run.run_id}", run.cases))
    root.set("time", f"{max(run.duration_s, 0.0):.3f}")
    groups: "OrderedDict[str, list[CaseResult]]" = OrderedDict()
    for c in run.cases:
        groups.setdefault(c.suite, []).append(c)
    for suite, members in groups.items():
        suite_el = ET.SubElement(root, "testsuite", _suite_attrs(suite, members))
        if run.started:
            suite_el.set("timestamp", _xml_text(run.started))
        props = ET.SubElement(suite_el, "properties")
        ET.SubElement(props, "property", {"name": "harness.kind", "value": "harness-junit"})
        ET.SubElement(props, "property", {"name": "harness.schema_version", "value": str(REPORT_SCHEMA)})
        ET.SubElement(props, "property", {"name": "harness.run_id", "value": _xml_text(run.run_id)})
        for c in members:
            suite_el.append(_testcase(c))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(run: RunResult, out_path: Path) -> Path:
    """Write the run as JUnit XML, atomically, for CI systems that display test results."""
    root = junit_tree(run).getroot()
    text = '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
    out_path = Path(out_path)
    atomic_write_text(out_path, text)
    return out_path
