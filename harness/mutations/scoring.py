"""Scoring a mutant against the unmutated baseline: did the *oracle* notice, or only a golden?

A golden recorded on one MB release pins that release's bugs; MB 0.6.2 itself already breaks
some invariants. So "a case FAILs on the mutant" says nothing about the oracle: the case may
fail on unmutated MB too, or fail only because a golden changed. Instead each case of a mutant
run is compared with the same case of a baseline run (unmutated MB, same suites, same session):

* **invariant-level** difference: a violation signature ``(invariant, tags)`` the baseline
  case did not have, or a FAIL kind it did not have (an oracle violation, an assertion of a
  documented rule with another message, "Megatron raised <type>"); a case that fails by
  invariant where the baseline passed is the simplest instance;
* **golden-level** difference: only a golden mismatch (or a CHANGED verdict) that the baseline
  did not have, or one whose obtained value differs from the baseline's;
* anything else (same failures, a harness ERROR, a case that now passes) is no catch.

A fault is *caught by invariants* when some case has an invariant-level difference, *golden
only* when only golden-level ones exist, *error only* when the harness merely broke, else
*escaped*. A fix must have no invariant-level difference at all. Verdicts added later are
understood by name: CHANGED is golden-level, KNOWN_FAIL is read by its violations like FAIL (a
known MB bug present in the baseline is then the baseline's), FIXED is like PASS.

Pure functions over case records (no MB, no subprocess): unit-tested on synthetic results.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

SUMMARY_KIND = "harness-mutate"
SUMMARY_SCHEMA = 1

GOLDEN = "golden"
ERROR = "error"
_GOLDEN_PREFIXES = ("golden mismatch", "no golden", "changed:")  # FAIL-era golden messages too
_KNOWN_FAIL = {"known_fail", "knownfail", "xfail"}

Signature = tuple[str, tuple[str, ...]]


class Level(enum.IntEnum):
    """How a mutant's case differs from the baseline's (higher wins)."""

    NONE = 0
    ERROR = 1
    GOLDEN = 2
    INVARIANT = 3


class Status(enum.StrEnum):
    """What a catalogue entry's run came to."""

    CAUGHT = "caught"  # by invariants
    GOLDEN_ONLY = "golden-only"
    ERROR_ONLY = "error only"
    ESCAPED = "escaped"
    NOT_APPLICABLE = "not applicable"
    CLEAN = "clean"  # a fix with no invariant-level difference
    BREAKS = "breaks invariants"  # a fix the oracle rejects: either the fix or the oracle is wrong


@dataclass(frozen=True)
class Evidence:
    """One case's result reduced to what scoring compares."""

    verdict: str
    kinds: frozenset[str] = frozenset()  # "oracle", "assertion: <text>", "raised: <type>", GOLDEN, ERROR
    signatures: frozenset[Signature] = frozenset()
    golden_digest: str | None = None  # what the case would record as golden, when a mismatch wrote it


def _normalise(text: str) -> str:
    """One comparable line: numbers and paths left out, so values in a message do not make a new kind."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = re.sub(r"(/[\w.\-]+)+", "<path>", line)
    line = re.sub(r"-?\d+(\.\d+)?", "#", line)
    line = re.sub(r"#(, #)+", "#...", line)
    return line[:160]


def fail_kind(message: str, violations: list[object]) -> str:
    """The kind of a FAIL: the oracle, a golden, an assertion (by its own message), or MB raising."""
    if violations:
        return "oracle"
    if message.startswith(_GOLDEN_PREFIXES):
        return GOLDEN
    if message.startswith("Megatron raised "):
        return "raised: " + message[len("Megatron raised ") :].split(":", 1)[0].strip()
    if message.startswith("assertion failed:"):
        return "assertion: " + (_normalise(message[len("assertion failed:") :]) or "(no message: a bare assert)")
    return "fail: " + _normalise(message)


def evidence(case: object, golden_digest: str | None = None) -> Evidence:
    """Evidence from a :class:`~harness.records.results.CaseResult` or its JSON form."""
    get = case.get if isinstance(case, Mapping) else lambda k, d=None: getattr(case, k, d)
    raw = get("verdict")
    verdict = str(getattr(raw, "value", raw)).lower().replace("-", "_")
    message = get("message", "") or ""
    violations = list(get("violations", None) or [])
    sigs = frozenset((str(v["invariant"]), tuple(str(t) for t in v.get("tags", ()))) for v in violations)
    if verdict == "fail" or verdict in _KNOWN_FAIL:
        kinds = frozenset({fail_kind(message, violations)})
    elif verdict == "changed":
        kinds = frozenset({GOLDEN})
    elif verdict == "error":
        kinds = frozenset({ERROR})
    else:  # pass, fixed, untestable
        kinds, sigs = frozenset(), frozenset()
    return Evidence(verdict, kinds, sigs, golden_digest if GOLDEN in kinds else None)


def _sig_text(sig: Signature) -> str:
    inv, tags = sig
    return f"{inv} [{', '.join(tags)}]" if tags else inv


def compare_case(base: Evidence | None, mut: Evidence) -> tuple[Level, list[str]]:
    """How ``mut`` differs from ``base`` (None: the case did not run in the baseline), with reasons."""
    base = base or Evidence("absent")
    reasons = [f"new violation {_sig_text(s)}" for s in sorted(mut.signatures - base.signatures)]
    new_kinds = sorted(mut.kinds - base.kinds - {GOLDEN, ERROR, "oracle"})  # "oracle": by signature
    reasons += [f"new failure {k}" + (f" (baseline: {base.verdict})" if not base.kinds else "") for k in new_kinds]
    if reasons:
        return Level.INVARIANT, reasons
    if GOLDEN in mut.kinds:
        if GOLDEN not in base.kinds:
            return Level.GOLDEN, [f"golden mismatch (baseline: {base.verdict})"]
        if mut.golden_digest is not None and base.golden_digest is not None and mut.golden_digest != base.golden_digest:
            return Level.GOLDEN, ["obtained value differs from the baseline's"]
    if ERROR in mut.kinds and ERROR not in base.kinds:
        return Level.ERROR, [f"harness error (baseline: {base.verdict})"]
    return Level.NONE, []


@dataclass
class Outcome:
    """One catalogue entry's result against the baseline."""

    status: Status
    invariant_cases: dict[str, list[str]] = field(default_factory=dict)  # case -> reasons
    golden_cases: dict[str, list[str]] = field(default_factory=dict)
    error_cases: list[str] = field(default_factory=list)
    fixed_cases: dict[str, list[str]] = field(default_factory=dict)  # baseline failures this mutant removed

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status.value,
            "invariant_cases": self.invariant_cases,
            "golden_cases": self.golden_cases,
            "error_cases": self.error_cases,
            "fixed_cases": self.fixed_cases,
        }


def _removed(base: Evidence, mut: Evidence) -> list[str]:
    """What a baseline failure lost in the mutant (what a fix fixed)."""
    if mut.verdict in ("error", "untestable"):
        return []
    gone = [f"violation gone {_sig_text(s)}" for s in sorted(base.signatures - mut.signatures)]
    gone += [f"failure gone {k}" for k in sorted(base.kinds - mut.kinds - {GOLDEN, ERROR, "oracle"})]
    if base.kinds - {GOLDEN, ERROR} and not (mut.kinds - {GOLDEN, ERROR}):
        gone.append(f"now {mut.verdict}" + (" (golden aside)" if GOLDEN in mut.kinds else ""))
    return gone


def score(baseline: Mapping[str, Evidence], mutant: Mapping[str, Evidence], *, fix: bool = False) -> Outcome:
    """Compare every case of ``mutant`` with ``baseline`` (both keyed by case id)."""
    out = Outcome(Status.ESCAPED)
    for case_id in sorted(mutant):
        mut, base = mutant[case_id], baseline.get(case_id)
        level, reasons = compare_case(base, mut)
        if level is Level.INVARIANT:
            out.invariant_cases[case_id] = reasons
        elif level is Level.GOLDEN:
            out.golden_cases[case_id] = reasons
        elif level is Level.ERROR:
            out.error_cases.append(case_id)
        if base is not None and (gone := _removed(base, mut)):
            out.fixed_cases[case_id] = gone
    if fix:
        out.status = Status.BREAKS if out.invariant_cases else (Status.ERROR_ONLY if out.error_cases else Status.CLEAN)
    elif out.invariant_cases:
        out.status = Status.CAUGHT
    elif out.golden_cases:
        out.status = Status.GOLDEN_ONLY
    elif out.error_cases:
        out.status = Status.ERROR_ONLY
    return out


@dataclass(frozen=True)
class Score:
    """Invariant-only score over the catchable, applicable faults; golden-only catches apart."""

    caught: int
    golden_only: int
    scored: int  # applicable, catchable faults

    @property
    def value(self) -> float:
        return self.caught / self.scored if self.scored else 0.0

    @property
    def with_goldens(self) -> float:
        return (self.caught + self.golden_only) / self.scored if self.scored else 0.0


def overall(rows: Iterable[Mapping[str, object]]) -> Score:
    """The score of summary rows (``kind``, ``catchable``, ``status``)."""
    scored = [
        r
        for r in rows
        if r.get("kind", "fault") == "fault" and r.get("catchable", True) and r["status"] != Status.NOT_APPLICABLE.value
    ]
    return Score(
        sum(r["status"] == Status.CAUGHT.value for r in scored),
        sum(r["status"] == Status.GOLDEN_ONLY.value for r in scored),
        len(scored),
    )
