"""Verdicts are explicit states, never strings or ints scattered through the code."""

from __future__ import annotations

import enum


class Verdict(enum.Enum):
    """Outcome of one case on one target.

    PASS/FAIL are statements about Megatron-Bridge's behaviour. UNTESTABLE means the case
    could not be evaluated on this target (operation missing in this era, import failure,
    timeout, CUDA-only code): it maps to git-bisect's "skip". ERROR means the harness itself
    broke (an adapter or suite bug); it is never blamed on a commit.
    """

    PASS = "pass"
    FAIL = "fail"
    UNTESTABLE = "untestable"
    ERROR = "error"

    @property
    def is_decisive(self) -> bool:
        """True when the verdict says something about MB (good or bad)."""
        return self in (Verdict.PASS, Verdict.FAIL)


def worst(verdicts: "list[Verdict]") -> Verdict:
    """Combine verdicts of a group: any FAIL wins, then ERROR, then UNTESTABLE, else PASS."""
    for v in (Verdict.FAIL, Verdict.ERROR, Verdict.UNTESTABLE):
        if v in verdicts:
            return v
    return Verdict.PASS
