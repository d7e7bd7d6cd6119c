"""Short Markdown for a CI job summary or a PR comment: a run's answer, and what changed between two runs.

The terminal and the HTML report say everything; a job summary has room for the answer only:
verdict counts, new failures with their training impact and the command that reproduces each,
known MB bugs grouped by bug, fixed ones. :func:`compare` is the pure diff of two runs that
``harness compare`` prints and renders here too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.records.results import CaseResult, RunResult
from harness.records.trend import Trend
from harness.records.verdict import Verdict
from harness.report.defects import Defect, defects

RED = (Verdict.FAIL, Verdict.ERROR)


def _cell(text: str, limit: int = 160) -> str:
    one = " ".join(str(text).split()).replace("|", "\\|")
    return one if len(one) <= limit else one[: limit - 1] + "…"


def run_summary(result: RunResult, report_url: str | None = None, base: RunResult | None = None) -> str:
    """The run's answer for a CI job page, under ~2 KB: a headline, one row per defect (new ones
    marked against ``base``), one line for what else needs a look, a link to the report
    (``report_url``), and the case-level detail collapsed."""
    from harness.golden.training import from_mismatches
    from harness.report.defects import defects
    from harness.report.terminal import reproduce_command

    counts = result.counts()
    mb = result.versions.get("megatron-bridge", "?")
    where = (result.provenance.mb_commit or result.provenance.mb_ref or result.target.get("kind", ""))[:12]
    found = defects(result, base)
    act = [d for d in found if d.kind != "known"]
    knowns = [d for d in found if d.kind == "known"]
    new = sum(bool(d.new) for d in act)
    head = "✅ nothing to act on" if result.exit_code() == 0 else f"❌ {len(act)} defect(s) to act on"
    head += f" ({new} new)" if base is not None and act else ""
    lines = [
        f"### harness run: {head}",
        "",
        f"Megatron-Bridge {mb} `{where}`{' · **partial: interrupted**' if result.partial else ''} · "
        + " · ".join(f"{counts[v.value]} {v.value}" for v in Verdict if counts[v.value])
        + (f" · [report]({report_url})" if report_url else ""),
    ]
    if act:
        lines += ["", "| defect | impact | where / what | cases |", "|---|---|---|---|"]
        for d in act[:10]:
            mark = " **new**" if d.new else ""
            impact = ", ".join(d.impacts) or "unclassified"
            lines.append(
                f"| `{d.id}`{mark} | {_cell(impact, 60)} | `{_cell(d.where or d.what, 60)}` | {len(d.cases)} |"
            )
        if len(act) > 10:
            lines.append(f"| … | | {len(act) - 10} more defect(s) in the report | |")
    changed = [c for c in result.documented if c.verdict is Verdict.CHANGED]
    trains = sum(bool(from_mismatches(c.diff_data)) for c in changed)
    extra = [
        f"{len(knowns)} known MB bug(s) ({sum(len(d.cases) for d in knowns)} cases)" if knowns else "",
        f"{len(changed)} changed ({trains} change what trains)" if changed else "",
        f"{counts['fixed']} fixed" if counts["fixed"] else "",
        f"{counts['untestable']} untestable" if counts["untestable"] else "",
    ]
    if any(extra):
        lines += ["", "Also: " + "; ".join(e for e in extra if e) + "."]
    if act:
        lines += ["", "<details><summary>reproduce each defect (its quickest case)</summary>", "", "```"]
        lines += [reproduce_command(result, d.smallest) for d in act[:10]] + ["```", "", "</details>"]
    hypothetical = [c for c in result.cases if c.hypothetical]
    if hypothetical:
        lines += ["", f"Hypothetical tier (never failing): {len(hypothetical)} case(s)."]
    return "\n".join(lines) + "\n"


def nightly_section(tr: Trend) -> str:
    """What changed since the previous nightly (from the history's trend), for its summary."""
    if len(tr["runs"]) < 2:
        return "\nFirst run in this history: nothing to compare with.\n"
    lines = ["", "**Since the previous nightly**", ""]
    for items, title in (
        (tr["newly_failing"], "newly failing"),
        (tr["newly_untestable"], "newly untestable"),
        (tr["newly_fixed"], "newly fixed"),
        (tr["newly_changed"], "newly changed"),
    ):
        shown = ", ".join(f"`{c['case_id']}` ({c['previous'] or 'not run'} → {c['current']})" for c in items[:20])
        lines.append(f"- {title}: {shown or 'none'}")
    return "\n".join(lines) + "\n"


def write_summary(text: str, path: Path | None) -> None:
    """``--summary-md FILE`` and ``$GITHUB_STEP_SUMMARY`` (appended, as GitHub expects)."""
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(text)


@dataclass
class RunDiff:
    """What changed from run A to run B, per case id."""

    new_failures: list[tuple[CaseResult | None, CaseResult]] = field(default_factory=list)
    fixed: list[tuple[CaseResult, CaseResult]] = field(default_factory=list)
    changed: list[tuple[CaseResult | None, CaseResult]] = field(default_factory=list)
    untestable: list[tuple[CaseResult, CaseResult]] = field(default_factory=list)
    gone: list[CaseResult] = field(default_factory=list)
    added: list[CaseResult] = field(default_factory=list)
    # the defects (harness.report.defects) of run B against run A's: new, gone, still there
    defects_new: list[Defect] = field(default_factory=list)
    defects_gone: list[Defect] = field(default_factory=list)
    defects_still: list[Defect] = field(default_factory=list)
    environment: list[str] = field(default_factory=list)  # "what: A -> B" for each difference

    @property
    def worse(self) -> bool:
        return bool(self.new_failures or self.untestable or self.gone)


def compare(a: RunResult, b: RunResult) -> RunDiff:
    """The documented tier of two runs, case by case (hypothetical cases never count)."""
    before = {c.case_id: c for c in a.documented}
    after = {c.case_id: c for c in b.documented}
    diff = RunDiff()
    bad = (Verdict.FAIL, Verdict.ERROR)
    for cid, now in after.items():
        was = before.get(cid)
        if was is None:
            diff.added.append(now)
            if now.verdict in bad:
                diff.new_failures.append((None, now))
            continue
        if now.verdict in bad and was.verdict not in bad:
            diff.new_failures.append((was, now))
        elif was.verdict in (Verdict.FAIL, Verdict.KNOWN_FAIL) and now.verdict in (
            Verdict.PASS,
            Verdict.CHANGED,
            Verdict.FIXED,
        ):
            diff.fixed.append((was, now))
        elif now.verdict is Verdict.CHANGED and was.verdict is not Verdict.CHANGED:
            diff.changed.append((was, now))
        elif now.verdict is Verdict.UNTESTABLE and was.verdict.is_decisive:
            diff.untestable.append((was, now))
    diff.gone = [c for cid, c in before.items() if cid not in after]
    earlier, later = defects(a), defects(b)
    old_ids = {d.id for d in earlier}
    new_ids = {d.id for d in later}
    diff.defects_new = [d for d in later if d.id not in old_ids and d.kind != "known"]
    diff.defects_still = [d for d in later if d.id in old_ids and d.kind != "known"]
    diff.defects_gone = [d for d in earlier if d.id not in new_ids and d.kind != "known"]
    diff.environment = environment_changes(a, b)
    return diff


def environment_changes(a: RunResult, b: RunResult) -> list[str]:
    """Every difference between the two runs' environments that can change a verdict: MB and its
    commit, the megatron-core build, torch and the other versions, the stand-ins, the GPU."""
    out = []
    for key in sorted(set(a.versions) | set(b.versions)):
        if a.versions.get(key) != b.versions.get(key):
            out.append(f"{key}: {a.versions.get(key, '-')} -> {b.versions.get(key, '-')}")
    mb_a, mb_b = a.provenance.mb_commit or a.provenance.mb_ref, b.provenance.mb_commit or b.provenance.mb_ref
    if mb_a != mb_b:
        out.append(f"MB commit: {mb_a or '-'} -> {mb_b or '-'}")
    if set(a.standins) != set(b.standins):
        added, dropped = sorted(set(b.standins) - set(a.standins)), sorted(set(a.standins) - set(b.standins))
        out.append(
            f"stand-ins: {'+ ' + '; '.join(added) if added else ''}{' - ' + '; '.join(dropped) if dropped else ''}"
        )
    if a.machine.gpu_label != b.machine.gpu_label:
        out.append(f"GPU: {a.machine.gpu_label} -> {b.machine.gpu_label}")
    return out


def compare_lines(diff: RunDiff) -> list[str]:
    """The terminal form: defects new / gone / still there, then one line per case under each
    heading that has any (from -> to), then what differs between the two environments."""
    out: list[str] = []
    for title, found in (
        ("new defects", diff.defects_new),
        ("defects gone", diff.defects_gone),
        ("defects still there", diff.defects_still),
    ):
        out.append(f"{title} ({len(found)}):" if found else f"{title}: none")
        out += [f"  {d.line()}" for d in found]
    for title, pairs in (
        ("new failures", diff.new_failures),
        ("fixed", diff.fixed),
        ("changed", diff.changed),
        ("newly untestable", diff.untestable),
    ):
        out.append(f"{title} ({len(pairs)}):" if pairs else f"{title}: none")
        for was, now in pairs:
            impact = f" [{', '.join(now.impacts)}]" if now.impacts else ""
            out.append(f"  {now.case_id}  {was.verdict.value if was else 'new'} -> {now.verdict.value}{impact}")
    out.append(f"gone ({len(diff.gone)}):" if diff.gone else "gone: none")
    out += [f"  {c.case_id}  {c.verdict.value} -> not run" for c in diff.gone]
    out.append("environment: the same" if not diff.environment else "environment differs:")
    out += [f"  {line}" for line in diff.environment]
    return out


def compare_markdown(diff: RunDiff, a_label: str, b_label: str) -> str:
    """The job-page form: defects first (a table), then the cases from -> to collapsed, and every
    environment difference (verdicts of two environments are not one MB's change alone)."""
    lines = [f"### harness compare: {a_label} → {b_label}", ""]
    lines.append(
        f"{len(diff.defects_new)} new defect(s), {len(diff.defects_gone)} gone, {len(diff.defects_still)} still there."
    )
    rows = [("new", d) for d in diff.defects_new] + [("gone", d) for d in diff.defects_gone]
    rows += [("still", d) for d in diff.defects_still]
    if rows:
        lines += ["", "| | defect | impact | where / what | cases |", "|---|---|---|---|---|"]
        for state, d in rows:
            impact = _cell(", ".join(d.impacts) or "unclassified", 60)
            lines.append(f"| {state} | `{d.id}` | {impact} | `{_cell(d.where or d.what, 60)}` | {len(d.cases)} |")
    if diff.environment:
        lines += ["", "**The environments differ** (a verdict may change with them):", ""]
        lines += [f"- {_cell(e, 200)}" for e in diff.environment]
    pairs = [*diff.new_failures, *diff.fixed, *diff.changed, *diff.untestable]
    if pairs or diff.gone:
        lines += ["", "<details><summary>cases (from → to)</summary>", ""]
        for was, now in pairs:
            lines.append(f"- `{now.case_id}`: {was.verdict.value if was else 'new'} → {now.verdict.value}")
        lines += [f"- `{c.case_id}`: {c.verdict.value} → not run" for c in diff.gone]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


__all__ = ["RunDiff", "compare", "compare_lines", "compare_markdown", "nightly_section", "run_summary", "write_summary"]
