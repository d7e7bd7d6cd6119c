"""Where known MB bugs apply: the known-bug file split for one target, and commit ranges.

An entry applies where its code is (:mod:`harness.records.knowncode`), else in its commit
range (answered by the target's repository, read-only) or its versions
(:meth:`harness.records.known.KnownFailure.applies`). The suite process splits the file once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.records.known import KnownFailure


@dataclass(frozen=True)
class Book:
    """The entries of the known-bug file as one MB target sees them."""

    applying: tuple[KnownFailure, ...]
    others: tuple[KnownFailure, ...]
    roots: dict[str, Path]  # "bridge"/"core" -> the target's packages, where entries' code is looked for
    gone: frozenset[str] = frozenset()  # entries past their versions whose code is not in this target

    @classmethod
    def split(
        cls,
        entries: Iterable[KnownFailure],
        version: str | None,
        commit: str | None,
        in_range: Callable[[str, str, str | None], bool | None] | None,
        roots: dict[str, Path],
    ) -> Book:
        applying: list[KnownFailure] = []
        others: list[KnownFailure] = []
        for e in entries:
            (applying if e.applies(version, commit, in_range, roots) else others).append(e)
        gone = frozenset(e.id for e in others if e.era(version) == "after" and e.code_here(roots) is False)
        return cls(tuple(applying), tuple(others), roots, gone)


def git_in_range(repo: Path) -> Callable[[str, str, str | None], bool | None]:
    """``in_range(commit, first_bad, first_fixed)`` answered by ``repo``'s history (read-only).

    None when the repository cannot tell (a commit it does not have): then versions decide.
    """
    import subprocess

    def ancestor(a: str, b: str) -> bool | None:
        proc = subprocess.run(
            ["git", "-C", str(repo), "merge-base", "--is-ancestor", a, b], capture_output=True, timeout=60
        )
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
