"""The readable view of a golden mismatch: aligned rows, windows around differences, cu_seqlens bars.

Everything that needs a decision (which cells differ, where a cu_seqlens boundary lies, which
window of a long row to show) is computed here into plain dicts for ``_diff.html.j2``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from typing import Any

from harness.records.results import CaseResult
from harness.report.formatting import format_number, format_value

#: Rows no longer than this are shown whole; longer ones as windows around the differences.
FULL_ROW_LIMIT = 96
#: Positions kept on each side of a difference when a row is windowed.
ROW_CONTEXT = 6
#: Most cells shown for one row, so a row that differs everywhere cannot blow up the page.
MAX_ROW_CELLS = 240
#: Mismatches shown per case; the plain-text diff below still has them all.
MAX_MISMATCHES = 20


def _cell_text(value: object) -> str:
    """One element of an aligned row: ints as is, floats short, anything else as JSON."""
    if isinstance(value, float):
        return format_number(value)
    if isinstance(value, (int, str)):
        return str(value)
    return format_value(value)


def _values_differ(a: object, b: object) -> bool:
    """Element comparison for display; NaN equals NaN so a NaN row is not all red."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return False
    return a != b


def differing_positions(expected: list[object], obtained: list[object]) -> list[int]:
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


def aligned_row_view(expected: list[object], obtained: list[object]) -> dict[str, object]:
    """Cells for the two-row expected/obtained table, each flagged when it differs."""
    diffs = differing_positions(expected, obtained)
    diff_set = set(diffs)
    cells: list[dict[str, object]] = []
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


def segments_view(expected: list[object], obtained: list[object], width: float = 760.0) -> dict[str, object] | None:
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
        blocks = []
        for i, (start, end) in enumerate(itertools.pairwise(row)):
            span_text = f"[{format_number(start)}, {format_number(end)}) length {format_number(end - start)}"
            blocks.append(
                {
                    "x": x(start),
                    "w": max(round(x(end) - x(start), 2), 0.5),
                    "cls": "seg-a" if i % 2 == 0 else "seg-b",
                    "title": f"{label} sequence {i}: {span_text}",
                }
            )
        ticks = [
            {"x": x(v), "bad": v not in other_set, "title": f"{label} boundary {i} = {format_number(v)}"}
            for i, v in enumerate(row)
        ]
        bars.append(
            {"label": label, "y": y, "h": bar_h, "blocks": blocks, "ticks": ticks, "label_y": round(y + bar_h * 0.7, 2)}
        )
    height = top + 2 * (bar_h + gap) + 10
    return {
        "bars": bars,
        "width": round(left + width + 20, 2),
        "height": round(height, 2),
        "axis": [
            {"x": x(lo), "text": format_number(int(lo) if lo.is_integer() else lo)},
            {"x": x(hi), "text": format_number(int(hi) if hi.is_integer() else hi)},
        ],
    }


def mismatch_view(m: dict[str, object]) -> dict[str, object]:
    """One mismatch ready for the template: scalars formatted, rows aligned, segments drawn."""
    path = str(m.get("path", ""))
    exp_row, obt_row = m.get("expected_row"), m.get("obtained_row")
    rows = segments = None
    if isinstance(exp_row, list) and isinstance(obt_row, list):
        rows = aligned_row_view(exp_row, obt_row)
        segments = segments_view(exp_row, obt_row) if is_cu_seqlens(path) else None
    view: dict[str, object] = {
        "path": path,
        "kind": str(m.get("kind", "")),
        "expected": format_value(m.get("expected")),
        "obtained": format_value(m.get("obtained")),
        "first_index": format_value(m.get("first_index")) if m.get("first_index") is not None else "",
        "max_abs": format_number(m.get("max_abs")),
        "max_rel": format_number(m.get("max_rel")),
        "n_mismatch": format_number(m.get("n_mismatch")),
        "rows": rows,
        "segments": segments,
    }
    view["has_errors"] = bool(view["max_abs"] or view["max_rel"] or view["n_mismatch"] or view["first_index"])
    return view


def diff_view(case: CaseResult) -> dict[str, object]:
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
