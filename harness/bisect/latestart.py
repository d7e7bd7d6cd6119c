"""When GOOD cannot run a case: find the oldest commit of the range where it runs, and start there.

Why: a user who says "it worked in October" names a GOOD where the case may not run at all (an
operation older adapters do not reach, a dependency missing in that era). Stopping with "nothing
to bisect: untestable at good" loses the regression. Instead, the cases that FAIL at BAD and that
GOOD cannot run (untestable, error, not run) first get one shared bisection of "runs here or
not": running (PASS or FAIL) is "bad", not running "good", so the first "bad" commit is the
oldest commit where the case runs. Where the case PASSes there, it is bisected from that commit
(the driver counts "not running" before it as good); where it already FAILs there, there is
nothing to bisect and the record says so; with ``--strict-good`` nothing is bisected and the
record names the commit to use as GOOD. Every outcome is said in the terminal and kept in the
record (:class:`~harness.bisect.document.LateStart`).

Eras from the ledger first: a case that GOOD cannot run because a feature did not exist yet says
so (``[missing feature KEY: ...]``, :mod:`harness.features`), and the ledger records the MB
commit that introduced it. Where that commit is in the range, the search first probes it and its
parent there: two evaluations verify the start (running there, not running before) instead of a
search over the whole range; a case whose ledger start does not verify (or that names no
feature) is searched as before.

Like ``git bisect``, the search finds *a* transition: if a case runs, stops running and runs
again inside the range, the start found is one of those transitions, not necessarily the oldest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.bisect.algorithm import Bisection, CaseStatus
from harness.bisect.document import LateStart
from harness.bisect.status import Mark
from harness.records.verdict import Verdict, settle

if TYPE_CHECKING:
    from harness.bisect.levelprotocol import Level


def find_starts(driver: Level, good: str, late: dict[str, str]) -> list[LateStart]:
    """Where each case of ``late`` (case -> what GOOD gave) starts running, and what follows."""
    driver.say(
        f"{len(late)} case(s) fail at bad and cannot run at good {good[:12]}: looking for the oldest "
        "commit where each runs"
    )
    search = Bisection(driver.commits, sorted(late))
    driver.view.finding_starts = set(late)
    driver.bisection = search
    try:
        for sha in driver.commits:
            for evaluation in driver.evidence.attempts.get(sha, []):
                driver.feed(sha, evaluation)
        ledger = ledger_probes(driver, good, late)
        if ledger:
            driver.say(
                f"the feature ledger names where {sum(len(c) for c in ledger.values())} of them start: "
                f"verifying {len(ledger)} start(s) with a probe there and one at its parent"
            )
            wanted = [sha for idx in sorted(ledger) for sha in (driver.commits[idx - 1], driver.commits[idx])]
            given: set[str] = set()  # each once: a cached one is replayed, never picked again

            def verify(n: int) -> list[str]:
                picks = [sha for sha in dict.fromkeys(wanted) if sha not in given and search.needs(sha)][:n]
                given.update(picks)
                return picks

            driver.run(verify)
        driver.run(driver.picker(search))
    finally:
        driver.view.finding_starts = set()
        driver.bisection = None
    return [_start(driver, good, case, at_good, search) for case, at_good in sorted(late.items())]


def ledger_probes(driver: Level, good: str, late: dict[str, str]) -> dict[int, list[str]]:
    """Index in the range of each ledger start the late cases name (index -> cases), from the
    untestable messages GOOD gave them; only starts strictly inside the range."""
    from harness.errors import HarnessError
    from harness.features import FEATURES, named

    messages: dict[str, str] = {}
    for evaluation in driver.evidence.attempts.get(good, []):  # GOOD's parts each ran their own suites
        for case in late:
            if evaluation.messages.get(case) and case not in messages:
                messages[case] = evaluation.messages[case]
    found: dict[int, list[str]] = {}
    for case, message in messages.items():
        starts = []
        for key in named(message):
            try:
                sha = driver.repo.resolve(FEATURES[key].since)
            except (HarnessError, KeyError):
                continue
            idx = driver.index.get(sha)
            if idx is not None and idx > 0:
                starts.append(idx)
        if starts:  # several features missing: the case runs once the last of them came
            found.setdefault(max(starts), []).append(case)
    return found


def _start(driver: Level, good: str, case: str, at_good: str, search: Bisection) -> LateStart:
    outcome = search.outcome(case)
    head = f"{at_good} at good {good[:12]}"
    if outcome.status is not CaseStatus.FOUND or outcome.culprit is None:
        why = "; ".join(outcome.notes) or outcome.status.value
        return LateStart(case, at_good, reason=f"{head}; where it starts running could not be found ({why})")
    first = outcome.culprit
    attempts = driver.evidence.attempts.get(first, [])
    real = settle(e.verdicts.get(case) for e in attempts)
    seen = {driver.view(first, e.verdicts).get(case) for e in attempts}
    there = real.value if real else "not run"
    where = f"the oldest commit where it runs is {first[:12]} ({there} there)"
    if Mark.GOOD not in seen or Mark.BAD in seen:
        if real in (Verdict.FAIL, Verdict.KNOWN_FAIL) or Mark.BAD in seen:  # red from its first runnable commit
            born = (
                f"{head}; born failing: it fails from the oldest commit where it runs, {first[:12]} "
                "(where what it needs appeared): that commit is its origin"
            )
            return LateStart(case, at_good, first, there, reason=born)
        return LateStart(case, at_good, first, there, reason=f"{head}; {where}: nothing to bisect")
    if driver.opts.strict_good:
        return LateStart(
            case,
            at_good,
            first,
            there,
            reason=f"{head}; {where}: not bisected (--strict-good); use {first[:12]} as GOOD",
        )
    return LateStart(case, at_good, first, there, bisected=True, reason=f"{head}; {where}: bisected from there")
