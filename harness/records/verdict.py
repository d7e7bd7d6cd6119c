"""Verdicts are explicit states, never strings or ints scattered through the code.

One ranking serves every place that folds several verdicts into one: :attr:`Verdict.severity`
(how bad a verdict is) with :func:`worst` (a case's setup, call and teardown; an upstream
test's phases), and :func:`settle` (repeated attempts of one case at one commit, where a
retry is meant to turn a skip into a decisive verdict).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Verdict(enum.Enum):
    """Outcome of one case on one target.

    PASS/FAIL are statements about Megatron-Bridge's behaviour: FAIL means an invariant broke
    (packed != MB's own unpacked path, padding trained, a documented rule broken, MB raised), a
    regression; a FAIL whose message starts with ``broken:`` says MB's code at this commit does
    not import, lost an output, or hung. CHANGED means every invariant holds but the output
    differs from the golden: a change to review and accept, never a regression (a fix in MB
    comes out as CHANGED or PASS). KNOWN_FAIL is a FAIL fully explained by a reviewed known MB
    bug (harness/suite/known.py); FIXED is a case a known-bug entry lists that passes now (the entry
    must go, like a strict xfail). UNTESTABLE means the case could not be evaluated on this
    target (the operation does not exist in this era, a missing non-packing dependency,
    CUDA-only code): it maps to git-bisect's "skip". ERROR means the harness itself broke (an
    adapter or suite bug); it is never blamed on a commit.
    """

    PASS = "pass"
    FAIL = "fail"
    CHANGED = "changed"
    KNOWN_FAIL = "known-fail"
    FIXED = "fixed"
    UNTESTABLE = "untestable"
    ERROR = "error"

    @property
    def severity(self) -> int:
        """How bad the verdict is (higher is worse); see :data:`SEVERITY`."""
        return SEVERITY[self]

    @property
    def is_decisive(self) -> bool:
        """True when the verdict says something about MB (good or bad)."""
        return self in _DECISIVE


_DECISIVE = frozenset({Verdict.PASS, Verdict.FAIL, Verdict.CHANGED, Verdict.KNOWN_FAIL, Verdict.FIXED})

#: Least to most severe. A FAIL (MB misbehaves) outranks an ERROR (the harness broke), which
#: outranks FIXED (a known-bug entry to remove), KNOWN_FAIL (a reviewed MB bug), CHANGED (a
#: golden to review) and UNTESTABLE (nothing could be said). A new verdict gets its place here;
#: the test suite checks that every member has one.
SEVERITY: dict[Verdict, int] = {
    Verdict.PASS: 0,
    Verdict.UNTESTABLE: 1,
    Verdict.CHANGED: 2,
    Verdict.KNOWN_FAIL: 3,
    Verdict.FIXED: 4,
    Verdict.ERROR: 5,
    Verdict.FAIL: 6,
}

#: Verdicts that make ``harness run`` exit 1 (CHANGED only without ``--allow-changed``).
FAILING = frozenset({Verdict.FAIL, Verdict.ERROR, Verdict.FIXED})


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The most severe of ``verdicts`` (PASS when there are none)."""
    return max(verdicts, key=lambda v: v.severity, default=Verdict.PASS)


def is_flaky(attempts: Iterable[Verdict | None]) -> bool:
    """Both PASS and FAIL among attempts of one case at one commit."""
    seen = set(attempts)
    return Verdict.PASS in seen and Verdict.FAIL in seen


def settle(attempts: Iterable[Verdict | None]) -> Verdict | None:
    """One verdict for repeated attempts of one case at one commit (None: no attempt ran it).

    A decisive verdict wins over skips (that is what a retry of an ERROR or UNTESTABLE attempt
    is for); otherwise the worst. Callers check :func:`is_flaky` first: PASS together with FAIL
    settles to FAIL here.
    """
    seen = [v for v in attempts if v is not None]
    decisive = [v for v in seen if v.is_decisive]
    return worst(decisive or seen) if seen else None
