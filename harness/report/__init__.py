"""Reports of runs, bisections and nightly histories: one self-contained HTML file each, plus JUnit XML.

``formatting`` (value filters, the template environment), ``diffview`` (golden mismatches),
``pages`` (run and bisect pages), ``trend`` (the nightly trend page), ``junit`` (JUnit XML).
The names below are loaded on first use: ``harness.report.terminal`` (and ``harness --help``)
must not pay for jinja2, and the trend page's pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.report.junit import write_junit
    from harness.report.pages import render_bisect_report
    from harness.report.runpage import render_run_report
    from harness.report.trend import render_trend_report

_WHERE = {
    "write_junit": "harness.report.junit",
    "render_bisect_report": "harness.report.pages",
    "render_run_report": "harness.report.runpage",
    "render_trend_report": "harness.report.trend",
}

__all__ = ["render_bisect_report", "render_run_report", "render_trend_report", "write_junit"]


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
