"""Knob coverage: per knob of MB's inventory, the values the cases exercised and whether the goal holds.

The goal (issue 25): every knob exercised with at least its default and one other value. A
required knob (no default) needs two distinct values. A knob whose class or function no case
called is *not exercised*; one that was reached but that no caller ever passed (MB's default
applied each time) is *never set*: a field MB adds to a class the cases use shows up so in the
next nightly, one of a class they never use as not exercised. A parameter MB takes and never
reads (:mod:`harness.suite.knobs.unread`), or a field it inherits that only code MB never calls reads
(:mod:`harness.suite.knobs.reach`, the line says which), short of the goal is *never read by MB*: no
value a case passes can change what MB does, so it is no gap a case could close, and still not
counted as met.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from harness.records.knobs import FACTORY, Exercised, Knob


class Status(enum.StrEnum):
    MET = "default and other"  # the goal
    OTHER_ONLY = "non-default only"
    DEFAULT_ONLY = "default only"
    NEVER_SET = "never set"  # reached, but every call left it at MB's default
    NOT_EXERCISED = "not exercised"  # its class or function was never called
    NEVER_READ = "never read by MB"  # a parameter MB stores and never reads: nothing to observe


@dataclass(frozen=True)
class Row:
    knob: Knob
    values: tuple[str, ...]  # sorted, distinct
    suites: tuple[str, ...]
    status: Status

    def to_json(self) -> dict[str, object]:
        return {
            **self.knob.to_json(),
            "values": list(self.values),
            "suites": list(self.suites),
            "status": self.status.value,
        }


def _status(knob: Knob, values: set[str], passed: set[str], defaulted: set[str]) -> Status:
    status = _exercised(knob, values, passed, defaulted)
    return Status.NEVER_READ if status is not Status.MET and not knob.read else status


def _exercised(knob: Knob, values: set[str], passed: set[str], defaulted: set[str]) -> Status:
    if not values:
        return Status.NOT_EXERCISED
    if not passed:
        return Status.NEVER_SET
    if knob.default is None:
        return Status.MET if len(values) >= 2 else Status.OTHER_ONLY
    if knob.default == FACTORY:  # a fresh default per call: whatever MB's factory gave is the default
        has_default, others = bool(defaulted), passed - defaulted
    else:
        has_default, others = knob.default in values, values - {knob.default}
    if has_default and others:
        return Status.MET
    return Status.DEFAULT_ONLY if has_default else Status.OTHER_ONLY


def rows(ex: Exercised) -> list[Row]:
    out = []
    for key in sorted(ex.knobs):
        knob = ex.knobs[key]
        by_value = ex.values.get(key, {})
        suites = sorted({s for ss in by_value.values() for s in ss if s})
        status = _status(knob, set(by_value), ex.passed.get(key, set()), ex.defaulted.get(key, set()))
        out.append(Row(knob, tuple(sorted(by_value)), tuple(suites), status))
    return out


def counts(table: list[Row]) -> dict[Status, int]:
    return {s: sum(r.status is s for r in table) for s in Status}


def summary_line(table: list[Row]) -> str:
    c = counts(table)
    return (
        f"knobs: {c[Status.MET]} of {len(table)} exercised with their default and another value, "
        f"{c[Status.DEFAULT_ONLY]} default only, {c[Status.OTHER_ONLY]} non-default only, "
        f"{c[Status.NEVER_SET]} never set (MB's default each time), {c[Status.NOT_EXERCISED]} not exercised, "
        f"{c[Status.NEVER_READ]} never read by MB (nothing a case sets there can change what MB does)"
    )


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def lines(table: list[Row], *, only_gaps: bool = False, width: int = 120) -> list[str]:
    """The table as terminal lines, grouped by owner (module:owner heading, one line per knob)."""
    out = []
    owner = None
    for r in table:
        if only_gaps and r.status is Status.MET:
            continue
        here = f"{r.knob.module}:{r.knob.owner}"
        if here != owner:
            owner = here
            out.append(here)
        default = r.knob.default if r.knob.default is not None else "(required)"
        head = f"  {r.knob.name:<36} {r.status.value:<18} default {_cut(default, 14):<14} "
        tail = ", ".join(r.values) if r.values else "-"
        if r.suites:
            tail += "  [" + ", ".join(r.suites) + "]"
        out.append(head + _cut(tail, max(20, width - len(head))))
        if r.status is Status.NEVER_READ and r.knob.why:
            out.append(f"      {r.knob.why}")  # the proof's finding, whole: it names the code that reads it
    return out


def step_lines(called: dict[str, set[str]], off_path: dict[str, str] | None = None) -> list[str]:
    """The training paths' step and loss functions (:mod:`harness.suite.knobs.steps`): each with the suites
    whose cases called it, or why no packed batch reaches it (read from MB's source), or *not
    exercised* (that path is checked at the batch at most)."""
    if not called:
        return []
    off = {k: why for k, why in (off_path or {}).items() if k in called and not called[k]}
    out = ["", "step and loss functions (every path to the loss):"]
    width = max(len(k) for k in called)
    for key in sorted(called):
        suites = called[key]
        state = ", ".join(sorted(suites)) if suites else "not exercised"
        if not suites and key in off:
            state = f"no packed path: {off[key]}"
        out.append(f"  {key:<{width}}  {state}")
    n = sum(bool(v) for v in called.values())
    out.append(
        f"  {n} of {len(called)} exercised; {len(off)} on no packed path; {len(called) - n - len(off)} not exercised"
    )
    return out
