"""JUnit XML of a run, for CI systems that display test results.

One ``<testsuite>`` per suite inside one ``<testsuites>`` for the run; FAIL is a ``<failure>``,
ERROR an ``<error>``, UNTESTABLE ``<skipped>``, a pass after a failed attempt a Surefire
``<flakyFailure>``. Written atomically.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path

import harness.report.defects as defect_groups
from harness.records.atomicio import atomic_write_text
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report.formatting import REPORT_SCHEMA, case_name

_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: object) -> str:
    """Text safe for XML 1.0: control characters from captured output would make the file
    unparseable for every CI system, so they are dropped rather than escaped."""
    return _XML_INVALID.sub("", str(text or ""))


def _is_flaky(case: CaseResult) -> bool:
    return "flaky" in (case.message or "").lower()


def _testcase(case: CaseResult, defect: str | None = None) -> ET.Element:
    el = ET.Element(
        "testcase",
        {
            "classname": _xml_text(case.suite),
            "name": _xml_text(case_name(case)),
            "time": f"{max(case.duration_s, 0.0):.3f}",
        },
    )
    props = ET.SubElement(el, "properties")
    ET.SubElement(props, "property", {"name": "case_id", "value": _xml_text(case.case_id)})
    ET.SubElement(props, "property", {"name": "source", "value": _xml_text(case.source)})
    if _is_flaky(case):
        ET.SubElement(props, "property", {"name": "flaky", "value": "true"})
    if case.impacts:
        ET.SubElement(props, "property", {"name": "impacts", "value": _xml_text(",".join(case.impacts))})
    if defect:  # the defect the case belongs to (harness.report.defects): one row per defect elsewhere
        ET.SubElement(props, "property", {"name": "defect", "value": defect})
    message = _xml_text(case.message)
    if case.hypothetical:
        ET.SubElement(props, "property", {"name": "tier", "value": "hypothetical"})
        ET.SubElement(
            el, "skipped", {"message": f"hypothetical tier ({case.verdict.value}): {message}", "type": "hypothetical"}
        )
        return el
    if case.verdict == Verdict.FAIL:
        # the failure type is the training impact (what a red costs), never how it was found
        kind = case.impacts[0] if case.impacts else "unclassified"
        failure = ET.SubElement(el, "failure", {"message": message, "type": kind})
        failure.text = _xml_text(case.diff or case.message)
    elif case.verdict == Verdict.CHANGED:
        failure = ET.SubElement(el, "failure", {"message": message, "type": "changed"})
        failure.text = _xml_text(case.diff or case.message)
    elif case.verdict == Verdict.FIXED:
        failure = ET.SubElement(el, "failure", {"message": message, "type": "known-bug-fixed"})
        failure.text = message
    elif case.verdict == Verdict.KNOWN_FAIL:
        ET.SubElement(el, "skipped", {"message": message, "type": "known-mb-bug"})
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
    # the same counts as the terminal and the page: a hypothetical-tier case is reported apart (a
    # <skipped> element here), whatever its verdict, and never counts as a failure or an error
    count = lambda v: sum(1 for c in cases if c.verdict == v and not c.hypothetical)  # noqa: E731
    apart = sum(1 for c in cases if c.hypothetical)
    return {
        "name": _xml_text(name),
        "tests": str(len(cases)),
        "failures": str(count(Verdict.FAIL) + count(Verdict.CHANGED) + count(Verdict.FIXED)),
        "errors": str(count(Verdict.ERROR)),
        "skipped": str(count(Verdict.UNTESTABLE) + count(Verdict.KNOWN_FAIL) + apart),
        "time": f"{sum(max(c.duration_s, 0.0) for c in cases):.3f}",
    }


def _junit_root(run: RunResult) -> ET.Element:
    """The JUnit document: one <testsuite> per suite inside one <testsuites> for the run."""
    root = ET.Element("testsuites", _suite_attrs(f"harness {run.run_id}", run.cases))
    root.set("time", f"{max(run.duration_s, 0.0):.3f}")
    groups: OrderedDict[str, list[CaseResult]] = OrderedDict()
    for c in run.cases:
        groups.setdefault(c.suite, []).append(c)
    defect_of = defect_groups.of_case(defect_groups.defects(run))
    for suite, members in groups.items():
        suite_el = ET.SubElement(root, "testsuite", _suite_attrs(suite, members))
        if run.started:
            suite_el.set("timestamp", _xml_text(run.started))
        props = ET.SubElement(suite_el, "properties")
        ET.SubElement(props, "property", {"name": "harness.kind", "value": "harness-junit"})
        ET.SubElement(props, "property", {"name": "harness.schema_version", "value": str(REPORT_SCHEMA)})
        ET.SubElement(props, "property", {"name": "harness.run_id", "value": _xml_text(run.run_id)})
        for c in members:
            suite_el.append(_testcase(c, defect_of.get(c.case_id)))
    ET.indent(root)
    return root


def write_junit(run: RunResult, out_path: Path) -> Path:
    """Write the run as JUnit XML, atomically, for CI systems that display test results."""
    root = _junit_root(run)
    text = '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
    out_path = Path(out_path)
    atomic_write_text(out_path, text)
    return out_path
