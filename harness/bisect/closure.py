"""The suite process's own code: the suite package, the ground floor and the suites.

A cached verdict is only as current as the code that decided it. A hand-kept list of
directories once missed most of it (18 of the 42 harness modules a suite process imported), and
a computed import closure then had to be re-derived on every key. Now the code is closed by
construction: a suite process imports :mod:`harness.suite` and the ground floor
(:data:`harness.paths.GROUND_FLOOR`) and nothing else of the harness, which
``tests/test_architecture.py`` checks import by import. The key is those files' bytes and the
suites'; a change to the driver (a report, a command) keeps every cached verdict.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from harness import paths

IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")


def _python_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return [f for _rel, f in _files(root) if f.suffix == ".py"]


def suite_process_files(suites_dir: Path | None = None) -> list[Path]:
    """Every file of the harness a suite process can run: the suite package, the ground floor and
    the suite modules (sorted)."""
    suites_dir = suites_dir or paths.suites_dir()
    pkg = paths.PACKAGE
    files = _python_files(pkg / "suite")
    for name in paths.GROUND_FLOOR:
        files += _python_files(pkg / name)
    files += sorted(f for f in suites_dir.glob("*.py"))
    return sorted(set(files))


def closure_hash(files: Iterable[Path]) -> str:
    """sha256 over (path relative to its root, bytes) of ``files``."""
    h = hashlib.sha256()
    roots = (paths.PACKAGE.parent, paths.suites_dir().parent)
    for file in sorted(files):
        rel = next((str(file.relative_to(r)) for r in roots if file.is_relative_to(r)), file.name)
        h.update(rel.encode() + b"\0" + file.read_bytes() + b"\0")
    return h.hexdigest()


def suite_hash(paths: Iterable[Path | str]) -> str:
    """sha256 over (relative path, bytes) of every file under ``paths``, sorted.

    Each path contributes under its own base name, so moving a file between suites/ and
    fixtures/ changes the hash. Bytecode caches are skipped (they differ per machine).
    A missing path contributes an explicit marker, so "absent" differs from "empty".
    """
    h = hashlib.sha256()
    for root in sorted(Path(p) for p in paths):
        if not root.exists():
            _feed(h, f"<absent>/{root.name}", b"")
            continue
        for rel, file in _files(root):
            _feed(h, f"{root.name}/{rel}", file.read_bytes())
    return h.hexdigest()


def _files(root: Path) -> list[tuple[str, Path]]:
    """(posix relative path, file) under root, sorted, bytecode caches excluded."""
    if root.is_file():
        return [("", root)]
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_DIRS]
        for name in filenames:
            if not name.endswith(IGNORED_SUFFIXES):
                f = Path(dirpath) / name
                found.append((f.relative_to(root).as_posix(), f))
    return sorted(found)


def _feed(h: hashlib._Hash, name: str, data: bytes) -> None:
    """Length-prefixed so no (name, data) pair can be confused with another split."""
    encoded = name.encode("utf-8")
    h.update(len(encoded).to_bytes(8, "big") + encoded + len(data).to_bytes(8, "big") + data)
