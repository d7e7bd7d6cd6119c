"""Known MB bugs, never hidden: the reviewed file whose entries turn a matching FAIL into KNOWN_FAIL.

A record both processes read: the suite process classifies with it, the driver groups a report's
known failures by it.

When Megatron-Bridge itself breaks an oracle invariant (a real bug in a release), every run of
that release would be red and a new regression in the same cases would drown in it. An entry in
``fixtures/known_failures.json`` (a reviewed data file, like the goldens) names the bug:

* ``cases``: case ids where it shows (``*`` matches anything; brackets are literal);
* ``invariants`` and ``tags``: which violations it explains (a violation is covered when its
  invariant is listed and it carries every listed tag, e.g. ``input:eos``); or, for a documented
  rule or MB raising (a FAIL without oracle violations), ``message``: text the FAIL message
  must contain (``invariants: ["rule"]``);
* ``code`` (a list of :class:`~harness.records.knowncode.CodeSignature`): the offending MB code.
  Where MB's source can be read, the entry applies exactly where that code is, release or not;
  where the code is gone, a listed case that holds every invariant is FIXED and one that still
  fails like it is a FAIL (the bug moved), said in its message;
* ``mb_versions`` (a PEP 440 specifier set, or a list of them meaning any; for installed
  packages and checkouts alike; what decides for an entry without ``code``, or where no MB
  source can be read) and/or
  ``commits`` (``FIRST_BAD..FIRST_FIXED``; resolved against the repository when one is known):
  where the bug exists;
* ``reason`` and ``upstream`` (file and line, issue or PR): why, for the person reading it;
* ``impact``: what the bug does to training, one value of :class:`~harness.records.impact.Impact`
  (harmless behaviour is no bug: such an entry has no place here);
* ``fix_mutant`` (the id of a ``kind: "fix"`` entry of the mutation catalogue: the smallest edit
  of the installed MB that makes it right, run by ``harness mutate``) and/or ``fixed_in`` (the
  release or commit where MB fixed it): how it is known to be a bug and not the oracle's taste.

Schema 1 files (before impacts) still load: their entries get the impact of their first
invariant and no fix.

Classification (:func:`harness.suite.known.against_known_bugs`, in the suite process): a failing
case whose violations are *all* covered by
applicable entries is KNOWN_FAIL (listed and counted, not failing the run); anything else stays
FAIL, so a new break in a known-bad case is still a regression. A case an applicable entry
lists that now passes is FIXED, like pytest's strict xfail: the run says so until the entry is
removed. Nothing else may silence a FAIL.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import CorruptFile
from harness.records import knownversions
from harness.records.knowncode import CodeSignature

KIND = "harness-known-failures"
SCHEMA = 2  # 2: impact, fix_mutant / fixed_in
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
    mb_versions: str | tuple[str, ...] | None = None  # one specifier set, or several (any of them)
    commits: str | None = None
    message: str | None = None  # for FAILs without oracle violations (documented rules, MB raised)
    impact: str = ""  # harness.records.impact.Impact value
    fix_mutant: str | None = None  # a fix entry of harness/mutations/catalogue.json
    fixed_in: str | None = None  # the release or commit where MB fixed it
    code: tuple[CodeSignature, ...] = ()  # the offending code (harness.records.knowncode)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> KnownFailure:
        try:
            entry = cls(
                id=str(doc["id"]),
                cases=tuple(doc["cases"]),
                invariants=tuple(doc["invariants"]),
                reason=str(doc["reason"]),
                upstream=str(doc["upstream"]),
                tags=tuple(doc.get("tags", ())),
                mb_versions=knownversions.versions_field(doc.get("mb_versions")),
                commits=doc.get("commits"),
                message=doc.get("message"),
                impact=str(doc["impact"]),
                fix_mutant=doc.get("fix_mutant"),
                fixed_in=doc.get("fixed_in"),
                code=tuple(CodeSignature.from_json(c) for c in doc.get("code", ())),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"known failure entry {doc.get('id', '?')!r}: missing or bad field {exc}") from exc
        if not entry.cases or not entry.invariants:
            raise ValueError(f"known failure {entry.id!r}: cases and invariants must not be empty")
        if entry.mb_versions is None and entry.commits is None:
            raise ValueError(f"known failure {entry.id!r}: give mb_versions and/or commits (where the bug exists)")
        for spec in knownversions.as_tuple(entry.mb_versions):
            knownversions.specifier(spec, entry.id)
        if entry.commits is not None and ".." not in entry.commits:
            raise ValueError(f"known failure {entry.id!r}: commits must read FIRST_BAD..FIRST_FIXED")
        from harness.records.impact import parse

        try:
            parse(entry.impact)
        except ValueError as exc:
            raise ValueError(f"known failure {entry.id!r}: {exc}") from None
        if doc.get("upgraded") is None and entry.fix_mutant is None and entry.fixed_in is None:
            raise ValueError(
                f"known failure {entry.id!r}: give fix_mutant (a fix of the mutation catalogue) and/or fixed_in "
                "(where MB fixed it): a bug is known by its fix"
            )
        return entry

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "id": self.id,
            "cases": list(self.cases),
            "invariants": list(self.invariants),
            "tags": list(self.tags),
            "reason": self.reason,
            "upstream": self.upstream,
        }
        if self.mb_versions is not None:
            doc["mb_versions"] = self.mb_versions if isinstance(self.mb_versions, str) else list(self.mb_versions)
        if self.commits is not None:
            doc["commits"] = self.commits
        if self.message is not None:
            doc["message"] = self.message
        doc["impact"] = self.impact
        if self.fix_mutant is not None:
            doc["fix_mutant"] = self.fix_mutant
        if self.fixed_in is not None:
            doc["fixed_in"] = self.fixed_in
        if self.code:
            doc["code"] = [c.to_json() for c in self.code]
        return doc

    def code_here(self, roots: Mapping[str, Path] | None) -> bool | None:
        """Is all of the bug's code in the target (``roots``, see :mod:`~harness.records.knowncode`)?
        None: no code named, or no source to look in."""
        if not self.code or not roots:
            return None
        found = [sig.present_in(roots) for sig in self.code]
        return None if None in found else all(found)

    def lists(self, case_id: str) -> bool:
        return any(_pattern(p).fullmatch(case_id) for p in self.cases)

    def explains(self, message: str) -> bool:
        """A FAIL without oracle violations: the entry names text its message contains."""
        return self.message is not None and self.message in message

    def covers(self, violation: Mapping[str, Any]) -> bool:
        tags = set(violation.get("tags") or ())
        return violation.get("invariant") in self.invariants and set(self.tags) <= tags

    def applies(
        self,
        mb_version: str | None,
        commit: str | None,
        in_range: Callable[[str, str, str | None], bool | None] | None = None,
        roots: Mapping[str, Path] | None = None,
    ) -> bool:
        """Does the bug exist in this target? In a release its versions name, yes. Past them (a
        source checkout of main, a later release), where its code is, when it names code (``roots``:
        the target's ``megatron/bridge`` and megatron-core). Else in its commit range (resolved by the
        target's repository). A release tag sits on a branch the main-line range may not reach, and a
        commit between releases carries a version no release specifier names: the code answers there.
        Before them, at a commit between releases (a pre-release version: a bisection's GOOD), the code's
        presence says the bug is there, its absence nothing (it may have been written differently); an
        older release the entry does not name keeps its own verdicts."""
        era = self.era(mb_version)
        if era == "in":
            return True  # a release the entry names: reviewed there
        here = self.code_here(roots)
        if era == "after" and here is not None:  # past the releases it names (a checkout of main): where its code is
            return here
        if (
            era == "before" and here and knownversions.unreleased(mb_version)
        ):  # an older commit (a bisection's GOOD) with its code
            return True
        if self.commits is not None and commit and in_range is not None:
            first_bad, _, first_fixed = self.commits.partition("..")
            if in_range(commit, first_bad, first_fixed or None):
                return True
        return False

    def era(self, mb_version: str | None) -> str:
        """Where ``mb_version`` sits against the entry's versions (:func:`~.knownversions.era`)."""
        return knownversions.era(self.mb_versions, self.id, mb_version)


@functools.cache
def _pattern(text: str) -> re.Pattern[str]:
    """A case pattern: ``*`` matches anything, everything else literally (case ids hold brackets)."""
    return re.compile(".*".join(re.escape(part) for part in text.split("*")))


def load(path: Path) -> list[KnownFailure]:
    """The entries of ``path``; a missing file is no entries, a corrupt one a one-line error."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("kind") != KIND or doc.get("schema_version") not in (1, SCHEMA):
            raise ValueError(
                f"expected kind {KIND!r} schema {SCHEMA}, got {doc.get('kind')!r} schema {doc.get('schema_version')!r}"
            )
        raw = doc["entries"] if doc["schema_version"] == SCHEMA else [_upgrade_v1(e) for e in doc["entries"]]
        entries = [KnownFailure.from_json(e) for e in raw]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFile(f"{path}: not a readable known-failures file: {exc}") from exc
    ids = [e.id for e in entries]
    if len(ids) != len(set(ids)):
        raise CorruptFile(f"{path}: duplicate known failure ids")
    return entries


def _upgrade_v1(entry: object) -> Any:
    """A schema-1 entry with the impact of its first invariant (rules: a crash) and no fix."""
    if not isinstance(entry, dict) or "impact" in entry:
        return entry
    from harness.records.oracle import DEFAULT_IMPACT, Invariant

    invariants = entry.get("invariants") or []
    first = invariants[0] if invariants else "rule"
    impact = DEFAULT_IMPACT[Invariant(first)].value if first in {i.value for i in Invariant} else "crash"
    return {**entry, "impact": impact, "upgraded": 1}


def dump(entries: Iterable[KnownFailure]) -> dict[str, object]:
    return {"kind": KIND, "schema_version": SCHEMA, "entries": [e.to_json() for e in entries]}
