"""``matrix.html``: the era sweep as one self-contained page (refs x suites, untestable reasons)."""

from __future__ import annotations

from pathlib import Path

from harness.eras.matrix import UNTESTABLE_GOAL_PCT, MatrixRow, reason_summary
from harness.report.formatting import VERDICT_ORDER, render_template


def render_matrix_report(rows: list[MatrixRow], out_path: Path, *, repo: str, megatron_lm: str | None) -> Path:
    suites = sorted({s for r in rows for s in r.suites})
    return render_template(
        "matrix.html.j2",
        {
            "rows": rows,
            "suites": suites,
            "verdicts": VERDICT_ORDER,
            "reasons": reason_summary(rows),
            "meeting": sum(r.meets_goal for r in rows),
            # MB's health first: per ref, cases per verdict over every suite
            "health": [{v: r.total(v) for v in VERDICT_ORDER} for r in rows],
            "failing_refs": sum(bool(r.total("fail") or r.total("error")) for r in rows),
            "gap_count": sum(len(r.gaps) for r in rows),
            "goal": UNTESTABLE_GOAL_PCT,
            "repo": repo,
            "megatron_lm": megatron_lm,
        },
        out_path,
    )
