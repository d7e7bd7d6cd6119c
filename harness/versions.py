"""What a process imports, found without importing it: MB's location and version, the
versions of everything that decides a verdict.

Why apart from :mod:`.target`: the suite process asks this of itself (it writes its versions
for the driver, :func:`harness.contract.write_versions`), ownership asks where MB
lives, known bugs ask MB's version; none of them needs a Target, and :mod:`.target` needs
:mod:`.ownership`. MB is never imported here (its package ``__init__`` costs ~20 s): the
version comes from ``package_info.py``.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

import harness
from harness.contract import Env
from harness.paths import mb_location
from harness.records.commit import Commit


def _dist_version(name: str) -> str:
    import importlib.metadata as md  # ~50 ms; the CLI's start-up does not need it

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"


def mb_version(location: Path | None) -> str:
    """Version from ``package_info.py`` without importing MB."""
    if location is None:
        return "not importable"
    info = location / "package_info.py"
    try:
        text = info.read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    parts = dict(re.findall(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE)\s*=\s*['\"]?([^'\"\n]*)['\"]?", text, re.M))
    if {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE', '')}"
    return "unknown"


def versions() -> dict[str, str]:
    """Versions of everything that decides a verdict (recorded in every result)."""
    loc = mb_location()
    pin = os.environ.get(Env.CORE_PIN)
    return {
        "megatron-bridge": mb_version(loc),
        "megatron-core": f"Megatron-LM {pin[:12]} (pinned by the MB commit)" if pin else _dist_version("megatron-core"),
        "torch": _dist_version("torch"),
        "transformers": _dist_version("transformers"),
        "python": platform.python_version(),
        "harness": harness.__version__,
    }


def _git(path: Path, *args: str) -> str | None:
    """``git -C path args`` stdout, None when git fails or is missing."""
    try:
        out = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def tree_commit(path: Path) -> str | None:
    """HEAD of the git repository holding ``path`` (with ``-dirty`` when tracked files below it
    are modified), or None when ``path`` is not in a repository or not tracked there (a venv
    inside a repository). Plain ``git``, not GitPython: both processes ask it (the driver of an
    ``--mb-src`` tree, the suite process for every golden it writes), and the suite process
    imports nothing of the driver's repository layer. It costs one ``ls-files`` when ``path``
    is not tracked."""
    path = Path(path)
    if not (_git(path, "ls-files", "--", ".") or "").strip():
        return None
    sha = (_git(path, "rev-parse", "--verify", "HEAD^{commit}") or "").strip()
    if not sha:
        return None
    index = (_git(path, "rev-parse", "--git-path", "index") or "").strip()
    checked_out = bool(index) and (path / index).exists()  # a --no-checkout clone has no index: no edits
    status = _git(
        path, "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=dirty", "--", str(path.resolve())
    )
    dirty = checked_out and bool((status or "").strip())
    return str(Commit(sha, dirty))
