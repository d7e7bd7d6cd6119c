"""Building throwaway git repositories in tests, and proving a repository was left untouched.

Shared by the bisect tests: repositories are built at test time (from the installed packages,
never from committed MB or Megatron-LM source) with fixed authors and dates, and
:func:`tree_digest` hashes every file under a repository, ``.git`` included, so a test can
show that a bisection left it byte-identical.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Ada Tester",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Tester",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
}


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV, **(env or {})},
    ).stdout.strip()


def commit_all(repo: Path, msg: str, n: int, add: bool = True) -> str:
    """Commit (everything, unless ``add`` is off: then what is staged) on day ``n`` of 2026-01."""
    stamp = f"2026-01-{1 + n:02d}T12:00:00+00:00"
    if add:  # a gitlink has no directory behind it: 'add -A' would stage its removal
        git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg, env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
    return git(repo, "rev-parse", "HEAD")


def tree_digest(root: Path) -> str:
    """Hash of every file and directory under ``root`` (including .git): names, modes, bytes."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        h.update(f"D {rel}\n".encode())
        for name in sorted(filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"F {rel}/{name} {st.st_mode:o} {st.st_size}\n".encode())
            h.update(os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
    return h.hexdigest()


def installed(package: str) -> Path:
    """Directory of an installed package (``megatron.bridge``, ``megatron.core``); skips without it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def pin(repo: Path, sha: str, path: str = "3rdparty/Megatron-LM") -> None:
    """Stage a gitlink (a submodule entry pinning ``sha``) and its .gitmodules entry, as MB has."""
    (repo / ".gitmodules").write_text(
        f'[submodule "{path}"]\n\tpath = {path}\n\turl = https://github.com/NVIDIA/Megatron-LM.git\n'
    )
    git(repo, "add", ".gitmodules")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{sha},{path}")
    (repo / path).mkdir(parents=True, exist_ok=True)  # an uninitialised submodule: an empty directory
