"""Reports of runs and bisections: one self-contained HTML file each, plus JUnit XML for CI."""

from harness.report.render import render_bisect_report, render_run_report, write_junit

__all__ = ["render_bisect_report", "render_run_report", "write_junit"]
