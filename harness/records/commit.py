"""The commit under test, typed: a sha and whether its tree had uncommitted changes.

Why a record of its own: the commit crosses every boundary (the suite process's environment,
goldens' provenance, results, the nightly history) as the string ``<sha>[-dirty]``; it is
parsed in exactly one place, here, below everything that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Commit:
    """The commit under test: its sha and whether the tree had uncommitted changes.

    Written as ``<sha>`` or ``<sha>-dirty`` (the environment, goldens' provenance, results), and
    parsed only by :meth:`parse`.
    """

    sha: str
    dirty: bool = False

    DIRTY = "-dirty"

    @classmethod
    def parse(cls, text: str | None) -> Commit | None:
        if not text:
            return None
        if text.endswith(cls.DIRTY):
            return cls(text[: -len(cls.DIRTY)], True)
        return cls(text, False)

    def __str__(self) -> str:
        return self.sha + (self.DIRTY if self.dirty else "")


def clean_sha(text: str | None) -> str | None:
    """The sha of ``<sha>[-dirty]`` (None stays None)."""
    found = Commit.parse(text)
    return found.sha if found else None
