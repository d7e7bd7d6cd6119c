"""What a person reads in the terminal after ``harness run`` and ``harness bisect``.

The same records the HTML reports are built from (:class:`~harness.results.RunResult`,
:class:`~harness.bisect.document.BisectDoc`), as a few lines: counts per suite and every
failure with its diff; one line per bisected case and one block per culprit commit.
"""

from __future__ import annotations

from typing import TextIO

from harness.bisect.algorithm import CaseStatus
from harness.bisect.document import BisectDoc
from harness.results import RunResult
from harness.verdict import Verdict


def print_run_summary(result: RunResult, out: TextIO) -> None:
    """Per-suite counts, then every failure with its diff and every untestable reason."""
    versions = result.versions
    commit = result.target.get("commit")
    print(
        f"\nMegatron-Bridge {versions.get('megatron-bridge')} ({result.target.get('kind')}"
        f"{', ' + str(commit) if commit else ''}), megatron-core {versions.get('megatron-core')}, "
        f"torch {versions.get('torch')}, {result.machine.get('accelerator')}",
        file=out,
    )
    header = f"{'suite':<28}{'pass':>6}{'fail':>6}{'untestable':>12}{'error':>7}"
    print(header + "\n" + "-" * len(header), file=out)
    for suite in sorted({c.suite for c in result.cases}):
        print(_counts_row(suite, result.counts(suite)), file=out)
    print(_counts_row("total", result.counts()) + f"   ({result.duration_s:.1f} s)", file=out)
    for c in result.cases:
        if c.verdict in (Verdict.FAIL, Verdict.ERROR):
            print(f"\n{c.verdict.value.upper()} {c.case_id}\n  " + c.message.replace("\n", "\n  "), file=out)
    untestable = [c for c in result.cases if c.verdict is Verdict.UNTESTABLE]
    if untestable:
        print("\nuntestable here:", file=out)
        for c in untestable:
            print(f"  {c.case_id}: {c.message}", file=out)
    for note in result.notes:
        print(f"note: {note}", file=out)
    if result.standins:
        print("stand-ins used: " + "; ".join(result.standins), file=out)


def _counts_row(label: str, counts: dict[str, int]) -> str:
    return f"{label:<28}{counts['pass']:>6}{counts['fail']:>6}{counts['untestable']:>12}{counts['error']:>7}"


def bisect_summary_lines(doc: BisectDoc) -> list[str]:
    """The terminal summary: one line per case, then one block per culprit commit."""
    rng = doc.range
    lines = [
        f"bisected {rng.given} ({rng.n_commits} commits, {rng.good[:12]}..{rng.bad[:12]}): "
        f"{doc.evaluations} evaluations ({doc.new_evaluations} new, {doc.cached_evaluations} cached), "
        f"{len(doc.probes)} commits probed, {doc.rounds} rounds, {doc.duration_s:.1f} s"
    ]
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
            "  files under src/: " + (", ".join(cul.files) or "(none)"),
            f"  cases ({len(ids)}): " + ", ".join(ids[:6]) + more,
        ]
        checked = doc.confirmation(cul.sha)
        if checked is not None:
            lines.append(f"  {checked.status.value.replace('_', ' ')}: {checked.detail}")
    for case in doc.cases:
        if case.status is CaseStatus.AMBIGUOUS:
            lines += ["", f"{case.case_id}: the {first} commit is one of (all but the last were skipped):"]
            lines += [f"  {s[:12]}  {doc.commit(s).subject}" for s in case.candidates]
    return lines
