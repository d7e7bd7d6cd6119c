"""Where one case's bisection stands: its status and the outcome snapshot the reports read.

Why apart from :mod:`.algorithm`: the documents, the reports and the terminal read these
without the state machine that produces them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Mark(enum.Enum):
    """What a commit says about one case, as the bisection sees it.

    An evaluation gives GOOD, BAD or SKIP (git bisect's exit code 125): the case's verdict read
    for the question being bisected (:func:`harness.bisect.view.mark_of`). FLAKY is only ever the
    combination of several evaluations of one commit (GOOD in one, BAD in another). The
    bisection reads marks, never verdicts: what a verdict means for it is decided in one place.
    """

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"
    FLAKY = "flaky"


class CaseStatus(enum.Enum):
    """Where one case's bisection stands."""

    OPEN = "open"  # still narrowing; the only non-terminal state
    FOUND = "found"  # exactly one first-bad commit, its parent in the list is good
    AMBIGUOUS = "ambiguous"  # culprit among several commits, all but the last skipped
    FLAKY = "flaky"  # PASS and FAIL both observed at one commit: blame nothing
    NOT_REPRODUCED = "not_reproduced"  # endpoints do not show good -> bad


@dataclass(frozen=True)
class CaseOutcome:
    """The result of bisecting one case (a snapshot; recomputed from the records)."""

    case_id: str
    status: CaseStatus
    culprit: str | None = None  # FOUND: the first bad commit
    last_good: str | None = None  # FOUND/AMBIGUOUS/OPEN: the last good commit before it
    # AMBIGUOUS: oldest first, the first bad is one of them; OPEN: the range still to search
    candidates: tuple[str, ...] = ()
    flaky_commits: tuple[str, ...] = ()  # FLAKY: commits with disagreeing verdicts
    evaluations: int = 0  # record() calls made while this case was still OPEN
    notes: tuple[str, ...] = ()

    def describe(self, short: int = 12) -> str:
        """One human line, used by :meth:`Bisection.summary`."""

        def abbrev(sha: str | None) -> str:
            return (sha or "?")[:short]

        head = f"{self.case_id}: {self.status.value}"
        if self.status is CaseStatus.FOUND:
            head += f" first bad {abbrev(self.culprit)} (last good {abbrev(self.last_good)})"
        elif self.status is CaseStatus.AMBIGUOUS:
            head += f" first bad is one of {', '.join(abbrev(c) for c in self.candidates)}"
        elif self.status is CaseStatus.FLAKY:
            head += f" at {', '.join(abbrev(c) for c in self.flaky_commits)}"
        elif self.status is CaseStatus.OPEN and self.candidates:
            head += f" first bad among {len(self.candidates)} commit(s) after {abbrev(self.last_good)}"
        head += f" [{self.evaluations} evaluations]"
        return "; ".join([head, *self.notes])
