"""Verdicts of the ``upstream`` suite, from the events MB's pytest run left behind.

Every test a selection entry selected becomes one case (the worst verdict of its phases, by
:attr:`Verdict.severity`); a test that never finished is UNTESTABLE with the reason (timeout,
crash). An entry that selects nothing is one UNTESTABLE case saying why (file absent, not
collectable here, ``-k`` matches nothing): never a pass. Where MB's guidance states how many
tests pass, an extra ``upstream::count::<entry>`` case checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.contract import MESSAGE_LIMIT, crash_line
from harness.records.results import CaseResult
from harness.records.verdict import Verdict
from harness.suiterun.upstream.selection import NO_MATCH, Resolved

SUITE = "upstream"


@dataclass
class PytestRun:
    """What MB's pytest run left behind: its events (one per line of the events file) and how it ended."""

    events: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False
    rc: int | None = None
    tail: str = ""  # the last lines of its output
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def case_results(resolved: list[Resolved], run: PytestRun, count_rule: str) -> list[CaseResult]:
    started = any(event.get("ev") == "session_start" for event in run.events)
    collected = any(event.get("ev") == "collected" for event in run.events)
    selected: dict[str, list[str]] = {}
    collect_errors: dict[str, str] = {}
    phases: dict[str, list[dict[str, object]]] = {}
    for event in run.events:
        if event.get("ev") == "selected":
            selected.setdefault(event["entry"], []).append(event["nodeid"])
        elif event.get("ev") == "collect_error":
            collect_errors[event["nodeid"].split("::")[0]] = event.get("message", "")
        elif event.get("ev") == "phase":
            phases.setdefault(event["nodeid"], []).append(event)
    broken_verdict = Verdict.UNTESTABLE
    if run.timed_out:
        broken = "timeout: MB's pytest ran past the time limit and was killed"
    elif run.rc == 3:  # pytest INTERNALERROR: this plugin or pytest broke, not MB
        broken_verdict = Verdict.ERROR
        broken = f"harness error: MB's pytest stopped with an internal error (code 3): {run.tail}"
    elif not started or not collected:
        broken = (
            f"MB's pytest exited with code {run.rc} before running tests (conftest or import failure "
            f"in this environment): {run.tail}"
        )
    else:
        broken = ""

    cases: list[CaseResult] = []
    for resolution in resolved:
        name = resolution.entry.name
        if resolution.variant is None:
            cases.append(make_case(f"{SUITE}::{name}", Verdict.UNTESTABLE, resolution.reason))
            continue
        nodeids = selected.get(name, [])
        entry_cases = [_test_case(n, phases.get(n, []), broken) for n in nodeids]
        cases += entry_cases
        problem = ""
        if not nodeids:
            err = collect_errors.get(resolution.variant.file)
            if err is not None:
                problem = (
                    f"cannot collect {resolution.variant.file} at this commit in this environment: {crash_line(err)}"
                )
                cases.append(make_case(f"{SUITE}::{resolution.variant.file}", Verdict.UNTESTABLE, problem))
            elif broken and not collected:
                problem = broken
                cases.append(make_case(f"{SUITE}::{name}", broken_verdict, broken))
            else:
                cases.append(
                    make_case(
                        f"{SUITE}::{name}",
                        Verdict.UNTESTABLE,
                        f"{NO_MATCH}: {resolution.variant.command} selects no test at this commit",
                    )
                )
        if resolution.expected_passed is not None:
            cases.append(count_case(resolution, entry_cases, problem or (broken if nodeids else ""), count_rule))
    return cases


def make_case(case_id: str, verdict: Verdict, message: str, duration: float = 0.0) -> CaseResult:
    return CaseResult(
        case_id=case_id,
        suite=SUITE,
        verdict=verdict,
        duration_s=round(duration, 4),
        message=message[-MESSAGE_LIMIT:] if len(message) > MESSAGE_LIMIT else message,
        source=SUITE,
    )


def _test_case(nodeid: str, phases: list[dict[str, Any]], broken: str) -> CaseResult:
    duration = sum(float(phase.get("duration", 0.0)) for phase in phases)
    worst: tuple[Verdict, str] | None = None
    for phase in phases:
        verdict = Verdict(phase["verdict"])
        if verdict is Verdict.PASS:
            continue
        if worst is None or verdict.severity > worst[0].severity:
            worst = (verdict, phase.get("message", ""))
    if worst is not None:
        return make_case(f"{SUITE}::{nodeid}", worst[0], worst[1], duration)
    if any(phase.get("when") == "call" for phase in phases):
        return make_case(f"{SUITE}::{nodeid}", Verdict.PASS, "", duration)
    reason = broken or "MB's pytest stopped before this test finished"
    return make_case(f"{SUITE}::{nodeid}", Verdict.UNTESTABLE, f"not run to the end: {reason}", duration)


def count_case(resolution: Resolved, entry_cases: list[CaseResult], problem: str, rule: str) -> CaseResult:
    assert resolution.variant is not None and resolution.expected_passed is not None
    expected = resolution.expected_passed
    got = sum(c.verdict is Verdict.PASS for c in entry_cases)
    skipped = sum(c.verdict is Verdict.UNTESTABLE for c in entry_cases)
    where = f"{resolution.variant.command}, MB guidance era {resolution.variant.era}"
    cid = f"{SUITE}::count::{resolution.entry.name}"
    if problem:
        return make_case(cid, Verdict.UNTESTABLE, f"expected {expected} passed, not countable here: {problem}")
    ok = got == expected if rule == "exact" else got >= expected
    if ok:
        more = f" (more than the {expected} MB's guidance states: tests added since)" if got > expected else ""
        return make_case(cid, Verdict.PASS, f"expected {expected} passed, got {got}{more} ({where})")
    if got < expected <= got + skipped:
        return make_case(
            cid,
            Verdict.UNTESTABLE,
            f"expected {expected} passed, got {got}: {skipped} of the selected tests untestable here ({where})",
        )
    return make_case(
        cid,
        Verdict.FAIL,
        f"expected {expected} passed, got {got} ({where}); {len(entry_cases)} selected, {skipped} untestable",
    )
