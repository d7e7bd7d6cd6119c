"""The run page: everything ``run.html.j2`` shows, computed once from a
:class:`~harness.records.results.RunResult` (header facts, per-suite counts, known MB bugs by
bug, failures with their golden diffs).

Why apart from the bisect page (:mod:`.pages`): the two read different records and share only
the formatting helpers (:mod:`.formatting`).
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import harness.report.defects as defect_groups
from harness.golden import training as training_terms
from harness.records.provenance import commit_url, ref_url
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report.diffview import diff_view
from harness.report.formatting import VERDICT_ORDER, anchor, case_name, format_value, render_template
from harness.report.knowngroups import groups as known_groups

FOLD_CHARS = 240


def _headline(message: str) -> str:
    first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return first if len(first) <= FOLD_CHARS else first[: FOLD_CHARS - 1] + "…"


def _case_view(case: CaseResult) -> dict[str, object]:
    return {
        "id": case.case_id,
        "name": case_name(case),
        "suite": case.suite,
        "verdict": case.verdict.value,
        "duration_s": case.duration_s,
        "message": case.message,
        # a long message is folded: its first line shows, the rest opens on a click (a page of 49
        # known bugs printed in full ran past 16,000 px)
        "headline": _headline(case.message),
        "folded": len(case.message) > FOLD_CHARS or case.message.count("\n") > 1,
        "anchor": anchor(case.case_id),
        "source": case.source,
        "impacts": list(case.impacts),
        "hypothetical": case.hypothetical,
    }


def _suites(cases: list[CaseResult]) -> list[dict[str, object]]:
    """Cases grouped by suite, suites in first-seen order (the order the run executed)."""
    groups: OrderedDict[str, list[CaseResult]] = OrderedDict()
    for c in cases:
        groups.setdefault(c.suite, []).append(c)
    out: list[dict[str, object]] = []
    for suite, members in groups.items():
        counts = dict.fromkeys(VERDICT_ORDER, 0)
        for c in members:
            counts[c.verdict.value] += 1
        out.append({"name": suite, "cases": [_case_view(c) for c in members], "counts": counts})
    return out


def _header_view(run: RunResult) -> dict[str, object]:
    """The facts a reader needs to trust or distrust the run, with the usual keys first."""
    target, versions, machine = run.target or {}, run.versions or {}, run.machine
    mb_version = target.get("version") or versions.get("megatron-bridge") or versions.get("megatron_bridge") or ""
    prov = run.provenance
    mb_commit = prov.mb_commit or target.get("commit") or target.get("sha") or ""
    return {
        "mb_version": mb_version,
        "mb_commit": mb_commit,
        "mb_ref": "" if mb_commit else prov.mb_ref,
        "mb_href": commit_url(prov.mb_repo_url, mb_commit)
        or ("" if mb_commit else ref_url(prov.mb_repo_url, prov.mb_ref)),
        "mb_source": prov.mb_source,
        "harness": prov.harness_commit or prov.harness_version or versions.get("harness", ""),
        "harness_href": commit_url(prov.harness_repo_url, prov.harness_commit),
        "mcore": versions.get("megatron-core") or versions.get("megatron_core") or versions.get("mcore") or "",
        "torch": versions.get("torch", ""),
        "cpu": machine.cpu_label,
        "gpu": machine.gpu_label,
        "target_items": sorted((str(k), format_value(v)) for k, v in target.items()),
        "version_items": sorted((str(k), format_value(v)) for k, v in versions.items()),
        "machine_items": sorted((str(k), format_value(v)) for k, v in machine.to_json().items()),
    }


def _untestable_groups(cases: list[CaseResult]) -> list[dict[str, object]]:
    """Untestable cases grouped by reason, most common reason first."""
    groups: dict[str, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault(c.message or "no reason recorded", []).append(c)
    return [
        {"reason": reason, "cases": [_case_view(c) for c in members]}
        for reason, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]


def run_context(run: RunResult, base: RunResult | None = None) -> dict[str, object]:
    """Everything the run template shows, computed once; what needs a person comes first."""
    from harness.report.terminal import accept_command, reproduce_command

    golden = [c for c in run.cases if c.source != "upstream"]
    upstream = [c for c in run.cases if c.source == "upstream"]
    failures = [
        {**_case_view(c), "diff": diff_view(c), "reproduce": reproduce_command(run, c.case_id)}
        for c in run.documented
        if c.verdict == Verdict.FAIL
    ]
    hypothetical = [_case_view(c) for c in run.cases if c.hypothetical]
    found = defect_groups.defects(run, base)

    def training(c: CaseResult) -> list[str]:
        """What the change does to what trains, and the open defects it goes the way of."""
        terms = training_terms.from_mismatches(c.diff_data)
        return terms + [f"the way of open defect {d}" for d in defect_groups.matching(terms, found)]

    changed = [
        {**_case_view(c), "diff": diff_view(c), "accept": accept_command(run, c.case_id), "training": training(c)}
        for c in run.documented
        if c.verdict == Verdict.CHANGED
    ]
    by_id = {c.case_id: c for c in run.cases}
    defect_rows = [
        {
            "defect": d,
            "line": d.line(),
            "cases": [_case_view(by_id[cid]) for cid in d.cases],
            "reproduce": reproduce_command(run, d.smallest),
        }
        for d in found
    ]
    known = known_groups(run.documented)
    untestable = [c for c in run.cases if c.verdict == Verdict.UNTESTABLE]
    return {
        "run": run,
        "header": _header_view(run),
        "counts": run.counts(),
        "verdicts": VERDICT_ORDER,
        # the classic four always show (a reassuring "0 fail"); the others only when present
        "always_shown": ("pass", "fail", "untestable", "error"),
        "golden_suites": _suites(golden),
        "upstream_suites": _suites(upstream),
        "failures": failures,
        "errors": [
            {**_case_view(c), "reproduce": reproduce_command(run, c.case_id)}
            for c in run.documented
            if c.verdict == Verdict.ERROR
        ],
        "fixed": [_case_view(c) for c in run.documented if c.verdict == Verdict.FIXED],
        "defects": defect_rows,
        "changed": changed,
        "known": known,
        "known_cases": sum(1 for c in run.documented if c.verdict == Verdict.KNOWN_FAIL),
        "hypothetical": hypothetical,
        "untestable": [_case_view(c) for c in untestable],
        "untestable_groups": _untestable_groups(untestable),
    }


def render_run_report(run: RunResult, out_path: Path, base: RunResult | None = None) -> Path:
    """Write the HTML report of one run to ``out_path`` (atomically) and return the path; with
    ``base`` (the previous night), each defect says whether it is new."""
    return render_template("run.html.j2", run_context(run, base), out_path)
