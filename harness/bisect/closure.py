"""The suite process's own code, computed: every harness and suites module it can import.

A cached verdict is only as current as the code that decided it. A hand-kept list of
directories missed most of it (the oracle, outcome, ownership, known bugs, the feature ledger,
verdicts: 18 of the 42 harness modules a suite process imports), so a changed invariant reused
verdicts computed by the old one. The closure is read from the code instead: starting at the
pytest plugin, the CPU stand-ins and every suite module, each file's ``import`` statements (all of
them, also those inside functions: an adapter imports lazily) that name ``harness.*`` or
``suites.*`` are followed to their files, with the package ``__init__`` files on the way.
Static, so it costs milliseconds and never imports MB; a superset of what one run imports,
never a subset.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from harness import paths

IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")


def _module_file(name: str, harness_parent: Path, suites_dir: Path) -> list[Path]:
    """The files ``import name`` executes: the module and its packages' ``__init__`` files."""
    parts = name.split(".")
    base = harness_parent
    if parts[0] == "suites":  # wherever the suites live (checkout, wheel data, --suites-dir)
        base, parts = suites_dir, parts[1:]
    out: list[Path] = []
    here = base
    for i, part in enumerate(parts):
        here = here / part
        init = here / "__init__.py"
        if init.is_file():
            out.append(init)
        elif i == len(parts) - 1 and here.with_suffix(".py").is_file():
            out.append(here.with_suffix(".py"))
    return out


def _imports(file: Path) -> set[str]:
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # from pkg import module
    return {n for n in found if n.split(".")[0] in ("harness", "suites")}


def import_closure(start: Iterable[Path], suites_dir: Path | None = None) -> list[Path]:
    """Every harness/suites file reachable by imports from ``start`` (sorted, ``start`` included)."""
    suites_dir = suites_dir or paths.suites_dir()
    harness_parent = paths.PACKAGE.parent
    seen: set[Path] = set()
    todo = [Path(p) for p in start]
    while todo:
        file = todo.pop()
        if file in seen or not file.is_file():
            continue
        seen.add(file)
        for name in _imports(file):
            todo.extend(f for f in _module_file(name, harness_parent, suites_dir) if f not in seen)
    return sorted(seen)


def suite_process_files(suites_dir: Path | None = None) -> list[Path]:
    """The import closure of a suite process: plugin, stand-ins, and the suite modules."""
    suites_dir = suites_dir or paths.suites_dir()
    pkg = paths.PACKAGE
    start = [
        pkg / "suiterun" / "plugin.py",
        *sorted((pkg / "standins").rglob("*.py")),
        *sorted(suites_dir.glob("*.py")),
    ]
    return import_closure(start, suites_dir)


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
