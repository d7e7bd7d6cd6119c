"""Known MB bugs applied to one case: KNOWN_FAIL, FIXED, or the verdict stands.

Why apart from :mod:`harness.records.known` (the reviewed file and its entries, which the driver
reads too, to group a report's known failures): this is the suite process's decision, and it asks
the adapters whether MB refused a case up front.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.records.known import KnownFailure
from harness.records.verdict import Verdict
from harness.suite.adapters.refusal import is_refusal


@dataclass(frozen=True)
class Classified:
    verdict: Verdict
    entries: tuple[str, ...]  # ids of the entries that explain (KNOWN_FAIL) or expected (FIXED) it
    message: str


def against_known_bugs(
    case_id: str,
    verdict: Verdict,
    violations: Sequence[Mapping[str, object]],
    entries: Sequence[KnownFailure],
    message: str = "",
    *,
    drawn: bool = False,
    others: Sequence[KnownFailure] = (),
    roots: Mapping[str, Path] | None = None,
    gone: frozenset[str] = frozenset(),
) -> Classified | None:
    """KNOWN_FAIL / FIXED for one case (or a FAIL with a hint), or None when the verdict stands.

    ``entries`` are the ones that apply to the target, ``others`` the rest of the file. Oracle
    violations must each be covered; a FAIL without violations (a documented rule, MB raised) is
    known only through an entry's ``message``. ``drawn``: the case's inputs are drawn
    (exploration), so its pass may only mean the bug's input was not drawn this time: never FIXED.

    Any entry listing the case, applying or not, decides two more things: MB refusing the case up
    front by a check (:mod:`harness.suite.adapters.refusal`) where the entry records it misbehaving later
    is FIXED, the check named; and an entry whose code is gone from this MB (``gone``: ids of
    entries past their versions whose code is not in ``roots``) makes a passing case FIXED, a
    failing one a FAIL that says the bug moved.
    """
    listed = [e for e in entries if e.lists(case_id)]
    elsewhere = [e for e in others if e.lists(case_id)]
    if verdict is Verdict.FAIL and is_refusal(message) and (listed or elsewhere):
        ids = tuple(sorted({e.id for e in listed + elsewhere}))
        return Classified(Verdict.FIXED, ids, f"known MB bug(s) {', '.join(ids)} refused up front now, not run into")
    if not listed:
        return _code_gone([e for e in elsewhere if e.id in gone], verdict, violations, message, drawn)
    if verdict is Verdict.FAIL and not violations:
        rule_ids = tuple(sorted(e.id for e in listed if e.explains(message)))
        return Classified(Verdict.KNOWN_FAIL, rule_ids, f"known MB bug(s) {', '.join(rule_ids)}") if rule_ids else None
    if verdict is Verdict.FAIL and violations:
        explained: set[str] = set()
        for v in violations:
            by = [e.id for e in listed if e.covers(v)]
            if not by:
                return None  # something the known bugs do not explain: a regression
            explained.update(by)
        ids = tuple(sorted(explained))
        return Classified(
            Verdict.KNOWN_FAIL, ids, f"known MB bug(s) {', '.join(ids)}: {len(violations)} violation(s), all explained"
        )
    if verdict in (Verdict.PASS, Verdict.CHANGED) and not drawn:  # every invariant holds (a golden may differ)
        ids = tuple(sorted(e.id for e in listed))
        still = [c.describe() for e in listed if e.code_here(roots) for c in e.code]
        advice = (
            f"its code is still in this MB ({'; '.join(still)}), so the case no longer reaches it: "
            "drop the case from the entry"
            if still
            else "remove the entry (fixtures/known_failures.json)"
        )
        return Classified(
            Verdict.FIXED, ids, f"listed as known MB bug(s) {', '.join(ids)} but every invariant holds now: {advice}"
        )
    return None


def _code_gone(
    gone: Sequence[KnownFailure],
    verdict: Verdict,
    violations: Sequence[Mapping[str, object]],
    message: str,
    drawn: bool,
) -> Classified | None:
    """A case listed only by entries whose code this MB no longer has."""
    if not gone:
        return None
    ids = tuple(sorted(e.id for e in gone))
    if verdict in (Verdict.PASS, Verdict.CHANGED) and not drawn:
        return Classified(
            Verdict.FIXED,
            ids,
            f"known MB bug(s) {', '.join(ids)}: the code is gone from this MB and every invariant holds: fixed here "
            "(remove the entry once no MB you test has the code)",
        )
    like = [
        e.id
        for e in gone
        if (violations and all(e.covers(v) for v in violations)) or (not violations and e.explains(message))
    ]
    if verdict is Verdict.FAIL and like:
        return Classified(
            Verdict.FAIL,
            (),
            f"the code of known MB bug(s) {', '.join(sorted(like))} is gone from this MB, yet the case fails "
            "as it did: the bug moved (a regression until the entry names the new code)",
        )
    return None
