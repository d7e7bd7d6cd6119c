"""The nightly trend, as :func:`harness.nightly.history.trend` computes it from the history store
and the trend page, the nightly's summary and its bisection plan read it.

Plain dicts (the template walks them, and the page embeds them as JSON), typed here so that the
three readers and the one writer agree on the keys.
"""

from __future__ import annotations

from typing import TypedDict


class TrendRun(TypedDict):
    """One nightly run of the history, oldest first."""

    run_id: str
    commit: str
    started: str
    duration_s: float | None
    report: str  # the run's report page ("" without one; made relative to the trend page)
    repo_url: str
    counts: dict[str, int]  # verdict value -> cases


class TrendCase(TypedDict):
    """One case across the runs: its verdict, message and duration in each (None: not in that run)."""

    suite: str
    source: str
    series: list[str | None]
    messages: list[str]
    durations: list[float | None]


class TrendChange(TypedDict):
    """A case whose verdict changed between the two latest runs."""

    case_id: str
    suite: str
    previous: str | None
    current: str | None  # GONE: the latest run no longer has it
    commit: str
    run_id: str
    message: str


class TrendDuration(TypedDict, total=False):
    """A run's wall time, for the chart (``report`` added by the page)."""

    run_id: str
    commit: str
    duration_s: float | None
    report: str


class Trend(TypedDict):
    runs: list[TrendRun]
    cases: dict[str, TrendCase]
    newly_failing: list[TrendChange]
    newly_untestable: list[TrendChange]
    newly_fixed: list[TrendChange]
    newly_changed: list[TrendChange]
    durations: list[TrendDuration]
