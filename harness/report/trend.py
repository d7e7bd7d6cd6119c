"""The trend page of a nightly history: verdicts over nights, what changed, durations.

The data comes from :func:`harness.nightly.history.trend`; this module only lays it out: the nights
(each linked to its own report page and its commit), what newly fails, became untestable,
changed or was fixed, a verdict grid per suite (a cell whose verdict differs from the night
before is outlined) with each case's duration over the nights, a bar chart of run durations,
and links to the bisect reports that hunted newly failing cases.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from harness.errors import UsageError
from harness.records.provenance import commit_url
from harness.records.trend import Trend, TrendDuration
from harness.report.formatting import format_seconds, render_template


def _durations_chart(durations: list[TrendDuration]) -> dict[str, object]:
    """Bar geometry of run durations (seconds) for an inline SVG."""
    values = [float(d["duration_s"] or 0.0) for d in durations]
    top = max(values, default=0.0) or 1.0
    left, plot_h, base_y = 60.0, 160.0, 180.0
    bar_w = max(3.0, min(64.0, 900.0 / max(len(values), 1)))
    label_every = max(1, math.ceil(56.0 / bar_w))  # a 7-character hash needs about 50 px
    bars = []
    for i, (d, v) in enumerate(zip(durations, values)):
        h = round(v / top * plot_h, 2)
        bars.append(
            {
                "x": round(left + i * bar_w + 1, 2),
                "w": round(bar_w - 2, 2),
                "y": round(base_y - h, 2),
                "h": h,
                "title": f"{d['run_id']} @ {str(d['commit'])[:10]}: {v:.1f} s",
                "href": d.get("report", ""),
                "cx": round(left + i * bar_w + bar_w / 2, 2),
                "label": str(d["commit"])[:7],
                "show_label": i % label_every == 0,
            }
        )
    return {
        "bars": bars,
        "width": round(left + len(values) * bar_w + 20, 2),
        "height": 210.0,
        "base_y": base_y,
        "top_y": base_y - plot_h,
        "left": left,
        "max_s": top,
    }


SPARK_W, SPARK_H = 90.0, 18.0
#: The sparkline's scale never goes below this: a case taking 0.00 to 0.01 s draws flat, not as
#: wild swings of noise (each case is otherwise scaled to its own largest night).
SPARK_FLOOR_S = 1.0


def _sparkline(durations: list[float | None]) -> dict[str, object]:
    """A case's duration over the nights as an inline polyline (each night one point; a night
    without the case leaves a gap), with the latest value, and the largest when it differs."""
    values = [d for d in durations if d is not None]
    largest = max(values, default=0.0)
    scale = max(largest, SPARK_FLOOR_S)
    step = SPARK_W / max(len(durations) - 1, 1)
    points: list[str] = []
    segments: list[str] = []
    for i, d in enumerate(durations):
        if d is None:
            if points:
                segments.append(" ".join(points))
            points = []
            continue
        points.append(f"{round(i * step, 1)},{round(SPARK_H - 1 - (d / scale) * (SPARK_H - 2), 1)}")
    if points:
        segments.append(" ".join(points))
    latest = format_seconds(durations[-1]) if durations and durations[-1] is not None else ""
    top = format_seconds(largest) if values else ""
    return {
        "segments": segments,
        "single": [s for s in segments if " " not in s],  # a lone night: a dot, not a line
        "w": SPARK_W,
        "h": SPARK_H,
        "latest": latest,
        "max": top if top != latest else "",
    }


def _grid(tr: Trend) -> list[dict[str, object]]:
    """Cases grouped by suite for the verdict grid, each with one cell per run (outlined where
    the verdict differs from the night before) and its durations."""
    suites: dict[str, list[dict[str, object]]] = {}
    for cid, entry in tr["cases"].items():
        cells = []
        previous = None
        for v, m, r in zip(entry["series"], entry["messages"], tr["runs"]):
            moved = previous is not None and v is not None and v != previous
            cells.append(
                {
                    "verdict": v or "absent",
                    "moved": moved,
                    "title": f"{cid} @ {r['commit'][:10]} ({r['run_id']}): {v or 'not run'}"
                    + (f" (was {previous})" if moved else "")
                    + (f" - {m}" if m else ""),
                }
            )
            previous = v if v is not None else previous
        suites.setdefault(entry["suite"], []).append(
            {
                "case_id": cid,
                "cells": cells,
                "latest": entry["series"][-1],
                "spark": _sparkline(entry.get("durations") or []),
            }
        )
    return [{"name": name, "cases": members} for name, members in sorted(suites.items())]


def _nights(tr: Trend) -> list[dict[str, object]]:
    """The nights, newest first, with their report page and commit page."""
    out = []
    for r in reversed(tr["runs"]):
        out.append({**r, "commit_href": commit_url(r.get("repo_url", ""), r["commit"])})
    return out


_UNSAFE_SCHEMES = ("javascript:", "data:", "vbscript:")


def _checked_links(links: dict[str, str] | None) -> dict[str, str]:
    """Bisect and report links are caller data put into href attributes: escaping stops markup,
    but a ``javascript:`` address would still run when clicked, so such schemes are refused."""
    out = {}
    for case_id, href in (links or {}).items():
        if str(href).strip().lower().startswith(_UNSAFE_SCHEMES):
            raise UsageError(f"link for {case_id} has an unsafe scheme: {href!r}")
        out[str(case_id)] = str(href)
    return out


def _from_page(link: str, store: Path, page: Path) -> str:
    """A night's report address as seen from ``page``: a URL as is; a path is stored relative to
    the history file (so nights written under different ``--out`` directories keep working links)
    and rebased onto the page's directory."""
    if "://" in link or link.startswith("/"):
        return link
    return os.path.relpath(store.resolve().parent / link, page.resolve().parent)


def render_trend_report(
    tr: Trend,
    store: Path,
    out_path: Path,
    bisect_links: dict[str, str] | None = None,
    bisect_note: str = "",
    defect_culprits: list[dict[str, object]] | None = None,
) -> Path:
    """Write the trend page of ``tr`` (:func:`harness.nightly.history.trend` of the history in ``store``,
    which the nightly computes: the page only lays it out); ``bisect_links`` maps a case id to
    the (relative) address of the bisect report that hunted it, shown next to the case;
    ``bisect_note`` says why a newly failing case has none (auto-bisect off, or its plan's reason);
    ``defect_culprits`` (``defects.json``'s rows) lead the page: defect -> bisection -> culprit."""
    reports = _checked_links({r["run_id"]: r.get("report", "") for r in tr["runs"] if r.get("report")})
    reports = {k: _from_page(v, Path(store), Path(out_path)) for k, v in reports.items()}
    for r in tr["runs"]:
        r["report"] = reports.get(r["run_id"], "")
    for d in tr["durations"]:
        d["report"] = reports.get(d["run_id"], "")
    context: dict[str, object] = {
        "trend": tr,
        "grid": _grid(tr),
        "nights": _nights(tr),
        "chart": _durations_chart(tr["durations"]),
        "links": _checked_links(bisect_links),
        "bisect_note": bisect_note or "no automatic bisection this night (nightly --auto-bisect)",
        "store_name": Path(store).name,
        "defect_culprits": defect_culprits or [],
        "bisect_page": next(iter(_checked_links(bisect_links).values()), ""),
    }
    return render_template("trend.html.j2", context, Path(out_path))
