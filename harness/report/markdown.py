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
from harness.records.verdict import Verdict

RED = (Verdict.FAIL, Verdict.ERROR)


def _cell(text: str, limit: int = 160) -> str:
    one = " ".join(str(text).split()).replace("|", "\\|")
    return one if len(one) <= limit else one[: limit - 1] + "…"


def run_summary(result: RunResult) -> str:
    """The run's answer in a few lines of Markdown (documented tier; the hypothetical tier apart)."""
    from harness.report.terminal import reproduce_command

    counts = result.counts()
    mb = result.versions.get("megatron-bridge", "?")
    where = result.provenance.mb_commit or result.provenance.mb_ref or result.target.get("kind", "")
    head = "✅ nothing to act on" if result.exit_code() == 0 else "❌ needs a look"
    lines = [
        f"### harness run: {head}",
        "",
        f"Megatron-Bridge {mb} ({where}){' · **partial: interrupted**' if result.partial else ''}",
        "",
        "| " + " | ".join(v.value for v in Verdict) + " |",
        "|" + "---|" * len(Verdict),
        "| " + " | ".join(str(counts[v.value]) for v in Verdict) + " |",
    ]
    red = [c for c in result.documented if c.verdict in RED]
    if red:
        lines += ["", "**Failures**", "", "| case | impact | message |", "|---|---|---|"]
        for c in red:
            impact = ", ".join(c.impacts) or ("harness error" if c.verdict is Verdict.ERROR else "unclassified")
            lines.append(f"| `{c.case_id}` | {impact} | {_cell(c.message)} |")
        lines += ["", "Reproduce:", "", "```"] + [reproduce_command(result, c.case_id) for c in red[:10]] + ["```"]
    fixed = [c for c in result.documented if c.verdict is Verdict.FIXED]
    if fixed:
        lines += [
            "",
            f"**Known bugs fixed** (remove their entries): {', '.join(sorted({k for c in fixed for k in c.known}))}",
        ]
    known: dict[str, list[CaseResult]] = {}
    for c in result.documented:
        if c.verdict is Verdict.KNOWN_FAIL:
            for k in c.known or ["?"]:
                known.setdefault(k, []).append(c)
    if known:
        lines += ["", "<details><summary>Known MB bugs</summary>", "", "| bug | impact | cases |", "|---|---|---|"]
        for k, cases in sorted(known.items()):
            impacts = sorted({i for c in cases for i in c.impacts})
            lines.append(f"| `{k}` | {', '.join(impacts)} | {len(cases)} |")
        lines += ["", "</details>"]
    hypothetical = [c for c in result.cases if c.hypothetical]
    if hypothetical:
        lines += ["", f"Hypothetical tier (never failing): {len(hypothetical)} case(s)."]
    return "\n".join(lines) + "\n"


def nightly_section(tr: dict) -> str:
    """What changed since the previous nightly (from the history's trend), for its summary."""
    if len(tr.get("runs", [])) < 2:
        return "\nFirst run in this history: nothing to compare with.\n"
    lines = ["", "**Since the previous nightly**", ""]
    for key, title in (
        ("newly_failing", "newly failing"),
        ("newly_untestable", "newly untestable"),
        ("newly_fixed", "newly fixed"),
        ("newly_changed", "newly changed"),
    ):
        items = tr.get(key) or []
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
    return diff


def compare_lines(diff: RunDiff) -> list[str]:
    """The terminal form: one line per case under each heading that has any."""
    out: list[str] = []
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
    return out


def compare_markdown(diff: RunDiff, a_label: str, b_label: str) -> str:
    lines = [f"### harness compare: {a_label} → {b_label}", ""]
    lines += ["| what | cases |", "|---|---|"]
    for title, items in (
        ("new failures", [n.case_id for _, n in diff.new_failures]),
        ("fixed", [n.case_id for _, n in diff.fixed]),
        ("changed", [n.case_id for _, n in diff.changed]),
        ("newly untestable", [n.case_id for _, n in diff.untestable]),
        ("gone", [c.case_id for c in diff.gone]),
    ):
        lines.append(f"| {title} | {_cell(', '.join(f'`{i}`' for i in items) or '-', 600)} |")
    for _, now in diff.new_failures:
        lines += ["", f"- `{now.case_id}` ({', '.join(now.impacts) or 'unclassified'}): {_cell(now.message)}"]
    return "\n".join(lines) + "\n"


__all__ = ["RunDiff", "compare", "compare_lines", "compare_markdown", "nightly_section", "run_summary", "write_summary"]
