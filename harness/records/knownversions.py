"""The MB versions a known bug names (``mb_versions``): parsing them and placing a target's version.

Apart from :mod:`harness.suite.known` so the entry record stays one job: these are PEP 440
specifier sets, a list meaning any of them, and "in / before / after" for a target's version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet


def versions_field(value: object) -> str | tuple[str, ...] | None:
    """``mb_versions`` as JSON holds it: a specifier string, or a non-empty list of them (any)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError(f"mb_versions must be a specifier string or a non-empty list of them, got {value!r}")


def as_tuple(value: str | tuple[str, ...] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else value


def specifier(text: str, entry_id: str) -> SpecifierSet:
    """One specifier set (pre-releases included); a one-line ``ValueError`` naming the entry otherwise."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(text, prereleases=True)
    except InvalidSpecifier as exc:
        raise ValueError(f"known failure {entry_id!r}: bad mb_versions {text!r}: {exc}") from exc


def unreleased(mb_version: str | None) -> bool:
    """A pre-release or development version: a commit between releases, not a release itself."""
    from packaging.version import InvalidVersion, Version

    try:
        return mb_version is not None and Version(mb_version).is_prerelease
    except InvalidVersion:
        return False


def era(mb_versions: str | tuple[str, ...] | None, entry_id: str, mb_version: str | None) -> str:
    """Where ``mb_version`` sits against ``mb_versions``: "in" one of them, "before" all of them (the
    code may not exist yet: its absence says nothing), or "after" (the code decides). "after" too for
    an entry without versions or a version that does not parse."""
    if mb_versions is None or not mb_version:
        return "after"
    from packaging.version import InvalidVersion, Version

    try:
        version = Version(mb_version)
    except InvalidVersion:
        return "after"
    specs = [specifier(spec, entry_id) for spec in as_tuple(mb_versions)]
    if any(version in spec for spec in specs):
        return "in"
    floors = [Version(s.version) for spec in specs for s in spec if s.operator in ("==", ">=", ">", "~=", "===")]
    return "before" if floors and all(version < f for f in floors) else "after"
