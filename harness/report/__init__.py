"""Reports of runs, bisections and nightly histories: one self-contained HTML file each, plus JUnit XML.

``formatting`` (value filters, the template environment), ``diffview`` (golden mismatches),
``pages`` (run and bisect pages), ``trend`` (the nightly trend page), ``junit`` (JUnit XML).
"""

from harness.report.junit import write_junit
from harness.report.pages import render_bisect_report, render_run_report
from harness.report.trend import render_trend_report

__all__ = ["render_bisect_report", "render_run_report", "render_trend_report", "write_junit"]
