"""The bisect page: everything ``bisect.html.j2`` shows, computed once from a
:class:`~harness.bisect.document.BisectDoc` (range, culprits grouped by commit, per-case
results, the commit timeline, the descent into Megatron-LM, cluster jobs).

The run page is :mod:`.runpage`; both follow one pattern (a typed record in, the context its
template reads out, rendered by :func:`~harness.report.formatting.render_template`).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from harness.bisect.document import BisectDoc, Confirmation, Descent, PinCheck
from harness.records.provenance import commit_url
from harness.report.bisectanswer import KIND_LABEL, answer
from harness.report.formatting import VERDICT_ORDER, anchor, render_template, short_sha
from harness.repository.pins import SUBMODULE


def _verdict_class(value: object) -> str:
    value = str(value or "")
    return value if value in VERDICT_ORDER else ("untestable" if value == "skip" else "unknown")


#: Width the timeline's one-line header needs (about 60 characters of 11 px text).
TIMELINE_HEADER_W = 380.0
#: Longest lane label; the cells start right of the longest label actually drawn.
LANE_LABEL_CHARS = 48
#: Width of one character of the lanes' 11 px monospace labels (0.6 em, rounded up).
LABEL_CHAR_W = 6.8


def _label_columns(n: int, every: int) -> set[int]:
    """Columns whose hash is written under the timeline: every ``every``-th and the newest,
    never two closer than ``every`` columns (the newest replaces a label too close to it)."""
    if n <= 0:
        return set()
    chosen = list(range(0, n, every))
    if chosen[-1] != n - 1:
        if n - 1 - chosen[-1] < every and len(chosen) > 1:
            chosen[-1] = n - 1
        elif n - 1 - chosen[-1] >= every:
            chosen.append(n - 1)
    return set(chosen)


def _lane_label(case_id: str) -> str:
    """A case id that fits the lane label: its start (the suite) and its end (the parameters),
    cut in the middle, where test names of one suite repeat."""
    if len(case_id) <= LANE_LABEL_CHARS:
        return case_id
    suite_end = case_id.find("::")
    head = suite_end + 2 if 0 < suite_end <= 20 else 16  # the whole suite name when it is short
    return case_id[:head] + "…" + case_id[-(LANE_LABEL_CHARS - head - 1) :]


def timeline_view(bisect: BisectDoc, case_ids: list[str], culprits: dict[str, str]) -> dict[str, object]:
    """SVG geometry of the range: one column per commit, one lane per case.

    Probed commits are coloured by their verdict for that lane's case; a culprit gets a
    dark outline. Geometry is scaled so a 2,000-commit range still fits the page width.
    """
    commits = bisect.commits
    probes = bisect.probes
    n = max(len(commits), 1)
    labels = [_lane_label(cid) for cid in case_ids]
    # the cells start right of the longest label (drawn right-aligned, never under a cell)
    left = round(max(120.0, max((len(x) for x in labels), default=0) * LABEL_CHAR_W + 12), 2)
    top, lane_h, gap = 26.0, 20.0, 6.0
    cell_w = max(2.0, min(72.0, 1000.0 / n))
    label_every = max(1, math.ceil(64.0 / cell_w))  # a 7-character hash needs about 60 px
    labelled = _label_columns(len(commits), label_every)
    columns: list[dict[str, Any]] = []
    for i, commit in enumerate(commits):
        sha = commit.sha
        columns.append(
            {
                "x": round(left + i * cell_w, 2),
                "sha": sha,
                "short": short_sha(sha)[:7],
                "subject": commit.subject,
                "probed": sha in probes,
                "label": i in labelled,
                "href": commit_url(bisect.repo_url, sha),
            }
        )
    lanes = []
    for k, cid in enumerate(case_ids):
        y = round(top + k * (lane_h + gap), 2)
        cells = []
        for col in columns:
            verdict = (probes.get(col["sha"]) or {}).get(cid)
            cells.append(
                {
                    "x": col["x"],
                    "w": cell_w,
                    "probed": verdict is not None,
                    "cls": _verdict_class(verdict) if verdict is not None else "unprobed",
                    "culprit": culprits.get(cid) == col["sha"],
                    "title": f"{cid} @ {col['short']} {col['subject']}: {verdict or 'not probed'}",
                }
            )
        lanes.append(
            {
                "case_id": cid,
                "label": labels[k],
                "y": y,
                "h": lane_h,
                "cells": cells,
                "label_y": round(y + lane_h * 0.7, 2),
            }
        )
    height = top + max(len(case_ids), 1) * (lane_h + gap) + 24
    return {
        "columns": columns,
        "lanes": lanes,
        # the first column is the good commit itself (the driver's range), else the one after it
        "starts_at_good": bool(commits) and commits[0].sha == bisect.range.good,
        "cell_w": cell_w,
        "left": left,
        # room for the one-line header ("oldest ... newest") however few commits there are
        "width": round(left + max(n * cell_w, TIMELINE_HEADER_W) + 20, 2),
        "height": round(height, 2),
        "axis_y": round(height - 14, 2),
    }


def _commit_views(bisect: BisectDoc) -> dict[str, dict[str, str]]:
    """Subject, author, date and link of every commit a case lists as a candidate."""
    shas = {sha for case in bisect.cases for sha in case.candidates}
    out = {}
    for sha in sorted(shas):
        meta = bisect.commit(sha)
        out[sha] = {"subject": meta.subject, "author": meta.author, "date": meta.date}
        out[sha]["href"] = commit_url(bisect.repo_url, sha)
    return out


def _confirmation_view(found: Confirmation | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {
        "status": found.status.value,
        "label": found.status.value.replace("_", " "),
        "detail": found.detail,
        "seen": sorted(found.seen.items()),
    }


def _not_bisected_groups(bisect: BisectDoc) -> list[dict[str, object]]:
    """Cases failing at the bad end that were not bisected, grouped by why, largest group first
    (before, the page left them out: a reader could not tell a case was looked at)."""
    groups: dict[str, list[str]] = {}
    for n in bisect.not_bisected:
        groups.setdefault(n.reason or "no reason recorded", []).append(n.case_id)
    largest_first = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [{"reason": r, "cases": sorted(ids)} for r, ids in largest_first]


def _pin_view(check: PinCheck | None) -> dict[str, object] | None:
    return {"status": check.status.value, "label": check.label, "detail": check.detail} if check else None


def _level_context(bisect: BisectDoc, prefix: str = "") -> dict[str, object]:
    """What one level of a bisection shows: range, timeline, culprits, late starts, cases.

    ``prefix`` keeps the element ids of a second level (nested in the first's page) unique.
    """
    # the page shows each case's CaseDoc itself (the bisect document's record), with its anchor
    culprits = {c.case_id: c.culprit.sha for c in bisect.cases if c.culprit}
    rng = bisect.range
    href = {sha: commit_url(bisect.repo_url, sha) for sha in [rng.good, rng.bad, *culprits.values()]}
    return {
        "labels": {"good": "old", "bad": "new", "first": "first fixed commit"}
        if bisect.find_fix
        else {"good": "good", "bad": "bad", "first": "first bad commit"},
        "range": {
            "good": rng.good,
            "bad": rng.bad,
            "good_href": href.get(rng.good, ""),
            "bad_href": href.get(rng.bad, ""),
            "n_commits": len(bisect.commits) if rng.n_commits is None else rng.n_commits,
        },
        "repo_url": bisect.repo_url,
        "partial": bisect.partial,
        "duration_s": bisect.duration_s,
        "evaluations": "?" if bisect.evaluations is None else bisect.evaluations,
        "n_probed": len(bisect.probes),
        "probe_log": [
            {
                "sha": sha,
                "href": href.get(sha, ""),
                "scope": c.scope,
                "cases": c.cases,
                "seconds": c.seconds,
                "endpoint": c.endpoint,
                "core_pin": c.core_pin,
            }
            for sha, costs in bisect.probe_costs.items()
            for c in costs
        ],
        "cases": bisect.cases,
        "anchors": {c.case_id: prefix + anchor(c.case_id) for c in bisect.cases},
        "commits": _commit_views(bisect),
        # what the text is: an invariant failure is never called a golden diff
        "kind_labels": {**KIND_LABEL, "golden": "golden diff"},
        "case_counts": sorted(Counter(c.status.value for c in bisect.cases).items(), key=lambda kv: -kv[1]),
        "culprit_groups": [
            {
                "culprit": g.culprit,
                "href": href.get(g.culprit.sha, ""),
                "anchor": prefix + anchor("culprit-" + g.culprit.sha),
                "cases": g.cases,
                "sources": g.sources,
                "suites": sorted({c.case_id.split("::")[0] for c in g.cases}),
                "blamed_by": g.blamed_by,
                "confirmation": _confirmation_view(bisect.confirmation(g.culprit.sha)),
                "answer": answer(bisect, g),
            }
            for g in bisect.culprit_groups()
        ],
        "unblamed": [c for c in bisect.cases if c.culprit is None],
        "not_bisected": _not_bisected_groups(bisect),
        "n_not_bisected": len(bisect.not_bisected),
        "confirmed_any": bool(bisect.confirmations),
        "timeline": timeline_view(bisect, [c.case_id for c in bisect.cases], culprits),
        "late_starts": [
            {
                "case_id": s.case_id,
                "at_good": s.at_good,
                "runs_from": s.runs_from,
                "runs_from_href": commit_url(bisect.repo_url, s.runs_from),
                "subject": bisect.commit(s.runs_from).subject if s.runs_from else "",
                "verdict_there": s.verdict_there,
                "bisected": s.bisected,
                "reason": s.reason,
            }
            for s in bisect.late_starts
        ],
    }


def _descent_view(descent: Descent, bisect: BisectDoc, n: int) -> dict[str, object]:
    nested = descent.doc
    return {
        "mb_culprit": descent.mb_culprit,
        "mb_culprit_href": commit_url(bisect.repo_url, descent.mb_culprit),
        "subject": bisect.commit(descent.mb_culprit).subject,
        "old_pin": descent.old_pin,
        "new_pin": descent.new_pin,
        "cases": descent.cases,
        "descended": descent.descended,
        "reason": descent.reason,
        "pin_change": _pin_view(nested.pin_change) if nested else None,
        "ctx": _level_context(nested, f"descent-{n}-") if nested else None,
    }


def bisect_context(bisect: BisectDoc) -> dict[str, object]:
    """Everything the bisect template shows, from a bisection record: its own level, then the
    Megatron-LM bisection behind each culprit that moved the pin."""
    level = _level_context(bisect)
    return {
        **level,
        "ctx": level,
        "held": {"label": bisect.held.label, "sha": bisect.held.sha} if bisect.held else None,
        "pin_change": _pin_view(bisect.pin_change),
        "descents": [_descent_view(d, bisect, n) for n, d in enumerate(bisect.descents, 1)],
        "submodule": SUBMODULE,
        "verdicts": VERDICT_ORDER,
        # the classic four always show (a reassuring "0 fail"); the others only when present
        "always_shown": ("pass", "fail", "untestable", "error"),
        **cluster_view(bisect),
    }


def cluster_view(bisect: BisectDoc) -> dict[str, object]:
    """The cluster jobs of a bisection (``--executor slurm``): every job with links to its logs,
    the commits skipped because the cluster lost their jobs, the evaluations cancelled as moot."""

    def commit(sha: str) -> dict[str, str]:
        return {"sha": sha, "short": short_sha(sha), "subject": bisect.commit(sha).subject}

    jobs = [
        {
            **commit(sha),
            "job_id": j.job_id,
            "cluster": j.cluster,
            "attempt": j.attempt,
            "state": j.state,
            "stdout_url": _file_url(j.stdout),
            "stderr_url": _file_url(j.stderr),
            "completed": j.state == "COMPLETED",
        }
        for sha, js in bisect.cluster_jobs.items()
        for j in js
    ]
    return {
        "cluster_jobs": jobs,
        "cancelled": [commit(sha) for sha in bisect.cancelled],
        "infrastructure": [{**commit(sha), "reasons": reasons} for sha, reasons in bisect.infrastructure.items()],
    }


def _file_url(path: str) -> str:
    return Path(path).as_uri() if path and Path(path).is_absolute() else path


def render_bisect_report(bisect: BisectDoc, out_path: Path) -> Path:
    """Write the HTML report of one bisection to ``out_path`` (atomically)."""
    return render_template("bisect.html.j2", bisect_context(bisect), out_path)
