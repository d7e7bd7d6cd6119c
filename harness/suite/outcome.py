"""The verdict of one pytest outcome: which exception means FAIL, CHANGED, UNTESTABLE or ERROR.

Split from :mod:`harness.suite.plugin` (the hooks, options and golden fixture) because this is a pure
decision on an exception already caught: it needs no pytest session, and the plugin's hooks only
call it and record what it returns.

Classification of a failing case (suites check invariants first, the golden last):
* :class:`GoldenMismatch` (every invariant held, the output differs from the golden, or there
  is no golden yet): CHANGED, a change to review, never a regression;
* an ``AssertionError`` (an oracle :class:`~harness.suite.oracle.differential.InvariantFailure`, a
  documented rule): FAIL;
* :class:`harness.errors.Untestable` or a pytest skip: UNTESTABLE (with the reason);
* :class:`Broken` (an MB module that exists and cannot be imported, an operation that no longer
  produces its output): FAIL with a reason starting ``broken:``, bisectable like any failure;
* MB refusing up front, by an explicit check before any batch (:mod:`harness.suite.adapters.refusal`):
  FAIL ``refuses-valid-config`` with the check named, unless a known-bug entry makes it FIXED;
* any other exception whose innermost project frame is the commit under test's code (see
  :mod:`harness.suite.ownership`; torch or Python raising inside a call from MB counts): FAIL;
* :class:`harness.errors.EnvironmentProblem` (the machine cannot run the case and should: a
  Transformer Engine that does not import on a CUDA machine): ERROR with an ``environment:``
  reason, never blamed on MB;
* anything else: ERROR, a bug in the harness or a suite, never blamed on MB.
A case may leave a note (``record_property("harness_note", text)``: the numbers behind a
tolerance, say); it is kept as the message of a passing case and appended to any other.
"""

from __future__ import annotations

import pytest

from harness.errors import Broken, EnvironmentProblem, Untestable
from harness.records.impact import Impact
from harness.records.verdict import Verdict
from harness.suite.adapters.refusal import PREFIX as REFUSED
from harness.suite.adapters.refusal import describe as describe_refusal
from harness.suite.adapters.refusal import up_front_check
from harness.suite.ownership import Owner, blame, mb_frame


class GoldenMismatch(AssertionError):
    """The obtained value differs from the golden (or no golden exists)."""

    def __init__(self, text: str, diff_data: dict[str, object] | None) -> None:
        super().__init__(text)
        self.diff_data = diff_data


def verdict_of(
    excinfo: pytest.ExceptionInfo | None, skipped: bool, longrepr: object
) -> tuple[Verdict, str, dict[str, object] | None]:
    """Map an outcome to (verdict, message, structured diff)."""
    if excinfo is None:
        if skipped:
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            return Verdict.UNTESTABLE, reason.removeprefix("Skipped: "), None
        return Verdict.PASS, "", None
    exc = excinfo.value
    if isinstance(exc, Untestable):
        return Verdict.UNTESTABLE, f"untestable: {exc}", None
    if isinstance(exc, Broken):  # a rank that crashed or hung in a world of a drawn case: its replay too
        return Verdict.FAIL, f"broken: {exc}" + _kept_notes(exc), None
    if isinstance(exc, EnvironmentProblem):
        return Verdict.ERROR, f"environment: {exc}", None
    if isinstance(exc, GoldenMismatch):
        return Verdict.CHANGED, f"changed: {exc}", exc.diff_data
    mb_raised = not isinstance(exc, (ImportError, SyntaxError)) and blame(excinfo.tb) is Owner.MEGATRON
    if mb_raised and (check := up_front_check(exc)) is not None:  # MB said no before any batch: a decision
        return Verdict.FAIL, describe_refusal(exc, check) + _kept_notes(exc), None
    if isinstance(exc, (AssertionError, pytest.fail.Exception)):
        return Verdict.FAIL, f"assertion failed: {exc}", None
    if isinstance(exc, pytest.skip.Exception):
        return Verdict.UNTESTABLE, str(exc), None
    if _harness_object_lacks(exc):  # MB asked a harness test double for something it does not model
        return Verdict.ERROR, f"harness error {type(exc).__name__}: {exc} (a harness test double)", None
    if blame(excinfo.tb) is Owner.MEGATRON:
        if isinstance(exc, (ImportError, SyntaxError)):  # MB's own import of a module failed
            from harness.suite.adapters.failures import import_failure

            what = getattr(exc, "name", None) or getattr(exc, "filename", None) or "an MB module"
            decided = import_failure(str(what), exc)
            if isinstance(decided, EnvironmentProblem):  # a build artifact the environment lacks
                return Verdict.ERROR, f"environment: {decided}", None
            if isinstance(decided, Untestable):  # a missing third-party dependency, not a break
                return Verdict.UNTESTABLE, f"untestable: {decided}", None
            return Verdict.FAIL, f"broken: {decided}", None
        where = mb_frame(excinfo.tb)
        text = f"Megatron raised {type(exc).__name__}: {exc}" + (f" [at {where}]" if where else "")
        return Verdict.FAIL, text + _kept_notes(exc), None
    return Verdict.ERROR, f"harness error {type(exc).__name__}: {exc}", None


def _kept_notes(exc: BaseException) -> str:
    """A suite's replay command (harness explore) or the cause an adapter saw, added to the
    exception as a note: kept in the verdict's message (other notes are not the verdict's)."""
    return "".join(f"\n  {n}" for n in getattr(exc, "__notes__", ()) if str(n).startswith(("replay: ", "cause: ")))


def _harness_object_lacks(exc: BaseException) -> bool:
    """An AttributeError on an object of a harness class: MB code raised it, but the gap is the
    harness's (a double such as the recording model not exposing what MB reads), never MB's."""
    if not isinstance(exc, AttributeError):
        return False
    obj = getattr(exc, "obj", None)
    return obj is not None and type(obj).__module__.split(".")[0] == "harness"


MAX_VIOLATIONS = 200  # per case: enough to match known failures and show patterns, bounded on disk


def structured_violations(excinfo: pytest.ExceptionInfo | None) -> list[dict[str, object]]:
    """Structured violations of an :class:`~harness.suite.oracle.differential.InvariantFailure` (else [])."""
    found = getattr(excinfo.value, "violations", None) if excinfo is not None else None
    out = []
    for v in (found or [])[:MAX_VIOLATIONS]:
        out.append(
            {
                "invariant": v.invariant.value,
                "row": v.row,
                "position": v.position,
                "expected": repr(v.expected)[:200],
                "got": repr(v.got)[:200],
                "detail": v.detail,
                "tags": list(v.tags),
                "impact": v.training_impact.value,
            }
        )
    return out


def case_impacts(
    verdict: Verdict, message: str, excinfo: pytest.ExceptionInfo | None, violations: list[dict[str, object]]
) -> list[str]:
    """The training impacts of a failing case (sorted, distinct; [] for every other verdict).

    From its violations when the oracle found some; else from the suite's typed assertion
    (:class:`~harness.records.impact.ImpactFailure`); else MB raising, a break (an existing module
    that does not import, a lost output, a hang) is a crash. A plain assertion a suite left
    untyped says nothing about its cost: it stays without impact, and reports say so.
    """
    if verdict is not Verdict.FAIL:
        return []
    if violations:
        return sorted({str(v.get("impact")) for v in violations if v.get("impact")})
    impact = getattr(excinfo.value, "impact", None) if excinfo is not None else None
    if impact is not None:
        return [str(getattr(impact, "value", impact))]
    if message.startswith(REFUSED):  # a valid configuration refused (a listed known bug made it FIXED)
        return [Impact.REFUSES_VALID_CONFIG.value]
    if message.startswith(("Megatron raised", "broken:")):
        return [Impact.CRASH.value]
    return []
