"""Era gap or harness gap: an untestable case checked against MB's history with the feature ledger.

An untestable case is an *era gap* only when its reason names a ledger feature
(:mod:`harness.features`) whose introducing commit is not an ancestor of the commit under test:
the feature truly does not exist there yet. Everything else is a *harness gap*, counted
against the sweep's goal: a reason that names no feature (a missing dependency, an adapter
that found no candidate), a feature the ledger says exists at this commit (the adapter missed
it), or a feature whose introducing commit this repository does not have (nothing to check).
The check is conservative by construction: a reason has to earn "era gap". Its one blind spot:
a release branch that got the feature by cherry-pick has no ancestry link to the introducing
commit, so an adapter that misses the cherry-picked feature there would pass for an era gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from harness import features
from harness.errors import HarnessError
from harness.features import Feature


class _Ancestry(Protocol):
    def is_ancestor(self, older: str, newer: str) -> bool: ...


@dataclass(frozen=True)
class Judgement:
    era_gap: bool
    why: str  # one line: the feature and its commit, or what keeps it from being an era gap


class EraJudge:
    """Judges the untestable reasons of one repository's commits (ancestry answers are cached)."""

    def __init__(self, repo: _Ancestry, ledger: dict[str, Feature] | None = None) -> None:
        self.repo = repo
        self.ledger = features.FEATURES if ledger is None else ledger
        self._seen: dict[tuple[str, str], bool | None] = {}

    def _exists_at(self, feature: Feature, commit: str) -> bool | None:
        """Is ``feature.since`` an ancestor of ``commit``? None when the repository cannot say."""
        key = (feature.since, commit)
        if key not in self._seen:
            try:
                self._seen[key] = self.repo.is_ancestor(feature.since, commit)
            except HarnessError:  # the introducing commit is not in this repository
                self._seen[key] = None
        return self._seen[key]

    def judge(self, commit: str, reason: str) -> Judgement:
        keys = features.named(reason)
        if not keys:
            return Judgement(False, "the reason names no missing feature of the ledger")
        present: list[Feature] = []
        unknown: list[str] = []
        for key in keys:
            feature = self.ledger.get(key)
            exists = None if feature is None else self._exists_at(feature, commit)
            if feature is None or exists is None:
                unknown.append(key)
            elif not exists:
                return Judgement(True, f"{key} came with {feature.since} ({feature.date}), after this commit")
            else:
                present.append(feature)
        if present:
            f = present[0]
            return Judgement(False, f"{f.key} exists here ({f.since}, {f.date}, is an ancestor): a harness gap")
        return Judgement(False, f"{', '.join(unknown)}: not in the ledger or its commit is not in this repository")
