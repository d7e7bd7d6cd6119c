"""Known MB bugs, never hidden: reviewed entries that turn a matching FAIL into KNOWN_FAIL.

When Megatron-Bridge itself breaks an oracle invariant (a real bug in a release), every run of
that release would be red and a new regression in the same cases would drown in it. An entry in
``fixtures/known_failures.json`` (a reviewed data file, like the goldens) names the bug:

* ``cases``: case ids where it shows (``*`` matches anything; brackets are literal);
* ``invariants`` and ``tags``: which violations it explains (a violation is covered when its
  invariant is listed and it carries every listed tag, e.g. ``input:eos``);
* ``mb_versions`` (PEP 440 specifiers, for installed packages and checkouts alike) and/or
  ``commits`` (``FIRST_BAD..FIRST_FIXED``; resolved against the repository when one is known):
  where the bug exists;
* ``reason`` and ``upstream`` (file and line, issue or PR): why, for the person reading it.

Classification (:func:`classify`): a failing case whose violations are *all* covered by
applicable entries is KNOWN_FAIL (listed and counted, not failing the run); anything else stays
FAIL, so a new break in a known-bad case is still a regression. A case an applicable entry
lists that now passes is FIXED, like pytest's strict xfail: the run says so until the entry is
removed. Nothing else may silence a FAIL.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import CorruptFile
from harness.verdict import Verdict

KIND = "harness-known-failures"
SCHEMA = 1
FILENAME = "known_failures.json"  # in the fixtures directory, reviewed like the goldens


@dataclass(frozen=True)
class KnownFailure:
    """One reviewed MB bug (see the module docstring for the fields)."""

    id: str
    cases: tuple[str, ...]
    invariants: tuple[str, ...]
    reason: str
    upstream: str
    tags: tuple[str, ...] = ()
    mb_versions: str | None = None
    commits: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> KnownFailure:
        try:
            entry = cls(id=str(doc["id"]), cases=tuple(doc["cases"]), invariants=tuple(doc["invariants"]),
                        reason=str(doc["reason"]), upstream=str(doc["upstream"]), tags=tuple(doc.get("tags", ())),
                        mb_versions=doc.get("mb_versions"), commits=doc.get("commits"))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"known failure entry {doc.get('id', '?')!r}: missing or bad field {exc}") from exc
        if not entry.cases or not entry.invariants:
            raise ValueError(f"known failure {entry.id!r}: cases and invariants must not be empty")
        if entry.mb_versions is None and entry.commits is None:
            raise ValueError(f"known failure {entry.id!r}: give mb_versions and/or commits (where the bug exists)")
        if entry.mb_versions is not None:
            _specifier(entry.mb_versions, entry.id)
        if entry.commits is not None and ".." not in entry.commits:
            raise ValueError(f"known failure {entry.id!r}: commits must read FIRST_BAD..FIRST_FIXED")
        return entry

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.id, "cases": list(self.cases), "invariants": list(self.invariants),
                               "tags": list(self.tags), "reason": self.reason, "upstream": self.upstream}
        if self.mb_versions is not None:
            doc["mb_versions"] = self.mb_versions
        if self.commits is not None:
            doc["commits"] = self.commits
        return doc

    def lists(self, case_id: str) -> bool:
        return any(_pattern(p).fullmatch(case_id) for p in self.cases)

    def covers(self, violation: Mapping[str, Any]) -> bool:
        tags = set(violation.get("tags") or ())
        return violation.get("invariant") in self.invariants and set(self.tags) <= tags

    def applies(self, mb_version: str | None, commit: str | None,
                in_range: Callable[[str, str, str | None], bool | None] | None = None) -> bool:
        """Does the bug exist in this target? Commit ranges win when they can be resolved."""
        if self.commits is not None and commit and in_range is not None:
            first_bad, _, first_fixed = self.commits.partition("..")
            decided = in_range(commit, first_bad, first_fixed or None)
            if decided is not None:
                return decided
        if self.mb_versions is not None and mb_version:
            from packaging.version import InvalidVersion, Version

            try:
                return Version(mb_version) in _specifier(self.mb_versions, self.id)
            except InvalidVersion:
                return False
        return False


@functools.lru_cache(maxsize=None)
def _pattern(text: str) -> re.Pattern[str]:
    """A case pattern: ``*`` matches anything, everything else literally (case ids hold brackets)."""
    return re.compile(".*".join(re.escape(part) for part in text.split("*")))


def _specifier(text: str, entry_id: str) -> Any:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(text, prereleases=True)
    except InvalidSpecifier as exc:
        raise ValueError(f"known failure {entry_id!r}: bad mb_versions {text!r}: {exc}") from exc


def load(path: Path) -> list[KnownFailure]:
    """The entries of ``path``; a missing file is no entries, a corrupt one a one-line error."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("kind") != KIND or doc.get("schema_version") != SCHEMA:
            raise ValueError(f"expected kind {KIND!r} schema {SCHEMA}, got {doc.get('kind')!r} "
                             f"schema {doc.get('schema_version')!r}")
        entries = [KnownFailure.from_json(e) for e in doc["entries"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFile(f"{path}: not a readable known-failures file: {exc}") from exc
    ids = [e.id for e in entries]
    if len(ids) != len(set(ids)):
        raise CorruptFile(f"{path}: duplicate known failure ids")
    return entries


def dump(entries: Iterable[KnownFailure]) -> dict[str, Any]:
    return {"kind": KIND, "schema_version": SCHEMA, "entries": [e.to_json() for e in entries]}


@dataclass(frozen=True)
class Classified:
    verdict: Verdict
    entries: tuple[str, ...]  # ids of the entries that explain (KNOWN_FAIL) or expected (FIXED) it
    message: str


def classify(case_id: str, verdict: Verdict, violations: Sequence[Mapping[str, Any]],
             entries: Sequence[KnownFailure]) -> Classified | None:
    """KNOWN_FAIL / FIXED for one case, or None when the verdict stands as it is.

    ``entries`` are the ones that apply to the target. Only oracle violations can be known:
    a FAIL without structured violations (MB raised, a documented rule) always stands.
    """
    listed = [e for e in entries if e.lists(case_id)]
    if not listed:
        return None
    if verdict is Verdict.FAIL and violations:
        explained: set[str] = set()
        for v in violations:
            by = [e.id for e in listed if e.covers(v)]
            if not by:
                return None  # something the known bugs do not explain: a regression
            explained.update(by)
        ids = tuple(sorted(explained))
        return Classified(Verdict.KNOWN_FAIL, ids, f"known MB bug(s) {', '.join(ids)}: {len(violations)} "
                                                   "violation(s), all explained")
    if verdict is Verdict.PASS:
        ids = tuple(sorted(e.id for e in listed))
        return Classified(Verdict.FIXED, ids, f"listed as known MB bug(s) {', '.join(ids)} but every invariant "
                                              "holds now: remove the entry (fixtures/known_failures.json)")
    return None


def git_in_range(repo: Path) -> Callable[[str, str, str | None], bool | None]:
    """``in_range(commit, first_bad, first_fixed)`` answered by ``repo``'s history (read-only).

    None when the repository cannot tell (a commit it does not have): then versions decide.
    """
    import subprocess

    def ancestor(a: str, b: str) -> bool | None:
        proc = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", a, b], capture_output=True,
                              timeout=60)
        return {0: True, 1: False}.get(proc.returncode)

    def in_range(commit: str, first_bad: str, first_fixed: str | None) -> bool | None:
        after_bad = ancestor(first_bad, commit)
        if after_bad is None or not after_bad:
            return after_bad
        if first_fixed is None:
            return True
        fixed = ancestor(first_fixed, commit)
        return None if fixed is None else not fixed

    return in_range
