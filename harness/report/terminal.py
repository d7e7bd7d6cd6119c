"""What a person reads in the terminal after ``harness run`` and ``harness bisect``.

The same records the HTML reports are built from (:class:`~harness.records.results.RunResult`,
:class:`~harness.bisect.document.BisectDoc`), as a few lines: counts per suite and every
failure with its diff; one line per bisected case and one block per culprit commit, then, for
each culprit that moved the pinned Megatron-LM, the bisection of Megatron-LM behind it (indented).
"""

from __future__ import annotations

import re
import shlex
from typing import TextIO

import harness.report.defects as defect_groups
from harness.bisect.algorithm import CaseStatus
from harness.bisect.document import BisectDoc, Descent
from harness.golden import training as training_terms
from harness.records.results import RunResult
from harness.records.verdict import Verdict
from harness.report.bisectanswer import culprit_lines
from harness.report.formatting import case_selector
from harness.repository.pins import SUBMODULE

COLUMNS = (
    Verdict.PASS,
    Verdict.FAIL,
    Verdict.CHANGED,
    Verdict.KNOWN_FAIL,
    Verdict.FIXED,
    Verdict.UNTESTABLE,
    Verdict.ERROR,
)


def _target_flags(result: RunResult) -> str:
    """The flags that decide the verdict, for a hint to repeat (the whole set when the run kept it)."""
    if result.hint_flags:
        return "".join(f" {shlex.quote(f)}" for f in result.hint_flags)
    path = result.target.get("path") if result.target.get("kind") == "source" else None
    return f" --mb-src {shlex.quote(str(path))}" if path else ""


_REPLAY = re.compile(r"replay: harness explore (--replay '[^']*')")


def reproduce_command(result: RunResult, case_id: str) -> str:
    """The command that runs the case again: ``harness run`` selecting it, or for an explored case
    that failed (drawn with a budget and seed ``harness run`` does not repeat) its replay."""
    message = next((c.message for c in result.cases if c.case_id == case_id), "")
    replay = _REPLAY.search(message)
    if replay:
        return f"harness explore{_target_flags(result)} {replay.group(1)}"
    suite, name = case_selector(case_id)
    return f"harness run{_target_flags(result)} --suite {suite} -k '{name}'"


def accept_command(result: RunResult, case_id: str) -> str:
    suite, name = case_selector(case_id)
    return f"harness fixtures record{_target_flags(result)} --suite {suite} -k '{name}' --yes"


def print_run_summary(result: RunResult, out: TextIO) -> None:
    """Per-suite counts; then what needs a person, most urgent first: regressions and harness
    errors (with the command that reproduces each), fixed known bugs, changes to review (with
    the command that accepts each), known MB bugs, and untestable cases grouped by reason."""
    v = result.versions
    print(
        f"\nMegatron-Bridge {v.get('megatron-bridge')} ({result.target.get('kind')}"
        f"{', ' + str(result.target['commit']) if result.target.get('commit') else ''}), "
        f"megatron-core {v.get('megatron-core')}, torch {v.get('torch')}, GPU {result.machine.gpu_label}",
        file=out,
    )
    prov = result.provenance
    mb = prov.mb_commit or (f"release tag {prov.mb_ref}" if prov.mb_ref else "commit unknown")
    print(f"tested: MB {mb}; harness {prov.harness_commit or prov.harness_version or '?'}", file=out)
    if result.partial:
        print("PARTIAL: the run was interrupted; cases that did not finish are listed as not run", file=out)
    header = f"{'suite':<26}" + "".join(f"{c.value:>{max(6, len(c.value) + 2)}}" for c in COLUMNS)
    print(header + "\n" + "-" * len(header), file=out)

    def row(label: str, cases: list) -> str:
        return f"{label:<26}" + "".join(
            f"{sum(c.verdict is col for c in cases):>{max(6, len(col.value) + 2)}}" for col in COLUMNS
        )

    documented = result.documented
    for suite in sorted({c.suite for c in documented}):
        print(row(suite, [c for c in documented if c.suite == suite]), file=out)
    print(row("total", documented) + f"   ({result.duration_s:.1f} s)", file=out)
    hypothetical = [c for c in result.cases if c.hypothetical]
    if hypothetical:
        print(
            row("hypothetical tier", hypothetical) + "   (inputs no MB producer emits: reported, never failing)",
            file=out,
        )
    found = defect_groups.defects(result)
    defect_of = defect_groups.of_case(found)
    for c in documented:
        if c.verdict in (Verdict.FAIL, Verdict.ERROR):
            impact = f" [impact: {', '.join(c.impacts) or 'unclassified'}]" if c.verdict is Verdict.FAIL else ""
            tag = f" ({defect_of[c.case_id]})" if c.case_id in defect_of else ""
            print(f"\n{c.verdict.value.upper()} {c.case_id}{impact}{tag}\n  " + _capped(c.message), file=out)
            print(f"  reproduce: {reproduce_command(result, c.case_id)}", file=out)
    for c in documented:
        if c.verdict is Verdict.FIXED:
            print(f"\nFIXED {c.case_id}\n  {c.message.splitlines()[0]}", file=out)
    for c in documented:
        if c.verdict is Verdict.CHANGED:
            means = training_terms.from_mismatches(c.diff_data)
            why = f"every invariant holds, but it {'; '.join(means)}" if means else "every invariant holds"
            if like := defect_groups.matching(means, found):
                why += f", the way of open defect {', '.join(like)}"
            print(
                f"\nCHANGED {c.case_id} ({why}; the output differs from its golden)\n  "
                + _capped(c.message.removeprefix("changed: ")),
                file=out,
            )
            if means:  # what trains changed: never offered as a plain accept
                print(
                    "  not offered for accept (a change in what trains); once known right: "
                    f"{accept_command(result, c.case_id)} --accept-training-change",
                    file=out,
                )
            else:
                print(f"  accept:    {accept_command(result, c.case_id)}", file=out)
    known = [c for c in documented if c.verdict is Verdict.KNOWN_FAIL]
    if known:
        from harness.report.knowngroups import groups as known_groups

        print(f"\nknown MB bugs ({len(known)} case(s), fixtures/known_failures.json), by bug:", file=out)
        for g in known_groups(known):
            first = g["upstream"].split(" (")[0].split(" and ")[0]
            where = f" ({first if len(first) <= 100 else first[:99] + '…'})" if first else ""
            print(f"  {g['id']} [{g['impact']}] x{len(g['cases'])}{where}", file=out)
    untestable = [c for c in result.cases if c.verdict is Verdict.UNTESTABLE]
    if untestable:
        by_reason: dict[str, list[str]] = {}
        for c in untestable:
            by_reason.setdefault(c.message, []).append(c.case_id)
        print("\nuntestable here:", file=out)
        for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(ids)} case(s): {reason}" + (f" ({ids[0]})" if len(ids) == 1 else ""), file=out)
    for note in result.notes:
        print(f"note: {note}", file=out)
    if result.standins:
        print("stand-ins used: " + "; ".join(result.standins), file=out)
    if found or any(c.verdict in (Verdict.CHANGED, Verdict.FIXED) for c in documented):
        # the answer last, where a CI log's tail shows it (pytest's -r block does the same)
        print("\n" + "=" * 30 + " defects " + "=" * 30, file=out)
        print("\n".join(defect_groups.summary_lines(found, result, reproduce_command)), file=out)


MESSAGE_LINES = 6  # a case's message in the terminal: its first lines, then how many more


def _capped(message: str) -> str:
    """A case's message, its first :data:`MESSAGE_LINES` lines, then "... and N more lines"."""
    lines = message.splitlines()
    if len(lines) > MESSAGE_LINES + 1:
        lines = [*lines[:MESSAGE_LINES], f"... and {len(lines) - MESSAGE_LINES} more lines (results.json, report.html)"]
    return "\n  ".join(lines)


def print_nothing_ran(result: RunResult, err: TextIO) -> None:
    """The one line that says why a run checked nothing (it exits 1, see RunResult.exit_code)."""
    why = result.nothing_ran()
    if why:
        print(f"harness: no case ran: {' '.join(why.split())}", file=err)


def bisect_summary_lines(doc: BisectDoc) -> list[str]:
    """The terminal summary: one line per case, then one block per culprit commit."""
    rng = doc.range
    what = f"Megatron-LM {rng.given}" if doc.held else rng.given
    lines = [
        f"bisected {what} ({rng.n_commits} commits, {rng.good[:12]}..{rng.bad[:12]}): "
        f"{doc.evaluations} evaluations ({doc.new_evaluations} new, {doc.cached_evaluations} cached), "
        f"{len(doc.probes)} commits probed, {doc.rounds} rounds, {doc.duration_s:.1f} s"
        + (f", {sum(map(len, doc.infrastructure.values()))} skipped for infrastructure" if doc.infrastructure else "")
        + (f", {len(doc.cancelled)} cancelled as moot" if doc.cancelled else "")
    ]
    if doc.partial:
        lines.append("  PARTIAL: interrupted before the search finished; open cases show the range left")
    if doc.held:
        lines.append(f"  Megatron-Bridge held at {doc.held.label}")
    if doc.pin_change:
        lines.append(
            f"  the Megatron-LM change {rng.good[:12]}..{rng.bad[:12]} is {doc.pin_change.label}: "
            f"{doc.pin_change.detail}"
        )
    first = doc.first_label
    width = min(max((len(c.case_id) for c in doc.cases), default=10), 90)
    for case in doc.cases:
        status = case.status
        if status is CaseStatus.FOUND and case.culprit is not None:
            what = f"{first} {case.culprit.sha[:12]}"
        elif status is CaseStatus.AMBIGUOUS:
            what = f"{first} is one of " + ", ".join(s[:12] for s in case.candidates)
        elif status is CaseStatus.FLAKY:
            what = "flaky at " + ", ".join(s[:12] for s in case.flaky_commits)
        elif status is CaseStatus.OPEN and case.candidates:
            after = f"after {case.last_good[:12]}" if case.last_good else "(endpoints unverified)"
            what = f"{first} among {len(case.candidates)} commit(s) {after} .. {case.candidates[-1][:12]}"
        else:
            what = "; ".join(case.notes) or status.value
        lines.append(f"  {case.case_id:<{width}}  {status.value:<14} {what}  [{case.evaluations} evaluations]")
    for nb in doc.not_bisected:
        lines.append(f"  {nb.case_id:<{width}}  {'not bisected':<14} {nb.reason}")
    if doc.late_starts:
        lines += ["", f"good {rng.good[:12]} cannot run {len(doc.late_starts)} case(s) failing at bad:"]
        lines += [f"  {start.case_id}: {start.reason}" for start in doc.late_starts]
    for group in doc.culprit_groups():
        cul, ids = group.culprit, [c.case_id for c in group.cases]
        more = f" and {len(ids) - 6} more" if len(ids) > 6 else ""
        lines += [
            "",
            f"{first} commit {cul.sha[:12]}  {cul.subject}",
            f"  author: {cul.author} <{cul.email}>   date: {cul.date}",
            *culprit_lines(doc, group),
            f"  files under {'megatron' if doc.held else 'src'}/: " + (", ".join(cul.files) or "(none)"),
            f"  cases ({len(ids)}): " + ", ".join(ids[:6]) + more,
        ]
        checked = doc.confirmation(cul.sha)
        if checked is not None:
            lines.append(f"  {checked.status.value.replace('_', ' ')}: {checked.detail}")
    for case in doc.cases:
        if case.status is CaseStatus.AMBIGUOUS:
            lines += ["", f"{case.case_id}: the {first} commit is one of (all but the last were skipped):"]
            lines += [f"  {s[:12]}  {doc.commit(s).subject}" for s in case.candidates]
    for descent in doc.descents:
        lines += ["", *_descent_lines(descent, doc.first_label)]
    return lines


def _descent_lines(descent: Descent, first: str) -> list[str]:
    """The second level behind one culprit that moved the pin, its own summary indented."""
    pins = f"{(descent.old_pin or 'none')[:12]}..{(descent.new_pin or 'none')[:12]}"
    head = f"Megatron-LM behind {first} commit {descent.mb_culprit[:12]} ({SUBMODULE} {pins}):"
    if not descent.descended or descent.doc is None:
        return [head, f"  not bisected: {descent.reason}"]
    return [head, *(f"  {line}" if line else "" for line in bisect_summary_lines(descent.doc))]
