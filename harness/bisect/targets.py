"""The targets of a bisection: cases that the probes cannot tell apart, one defect as far as they know.

Why apart from :mod:`.algorithm`: the state machine bisects per case; a target is a reading of
its evidence (cases whose marks agree at every commit both saw), for the record and the terminal.
Probes are already shared inside a target (a pick inside their common interval splits them
all); a target splits when a probe separates its cases.
"""

from __future__ import annotations

from harness.bisect.algorithm import Bisection


def targets(bisection: Bisection) -> list[tuple[str, ...]]:
    """The cases grouped by agreeing evidence, largest first."""
    groups: list[list[str]] = []
    marks = {case: bisection.marks(case) for case in bisection.cases}
    for case, mine in marks.items():
        for group in groups:
            theirs = marks[group[0]]
            if all(mine[i] == theirs[i] for i in mine.keys() & theirs.keys()):
                group.append(case)
                break
        else:
            groups.append([case])
    return sorted((tuple(g) for g in groups), key=lambda g: (-len(g), g))
