"""megatron-core from the Megatron-LM commit an MB commit pins (``3rdparty/Megatron-LM``).

MB's newest commits need a megatron-core newer than any PyPI release, and MB pins the exact
Megatron-LM commit it was developed against as a git submodule. Given a Megatron-LM repository
(``--megatron-lm PATH``), the ``megatron/`` tree of the pinned commit is extracted (cached, one
tree per pin, through the same private-mirror machinery as MB commits) and put on the suite
process's path before the installed megatron-core. The user's Megatron-LM repository is only read.

Before the submodule (added 2025-10-15, 7ac9b97c8) MB pinned megatron-core in ``uv.lock``: a
PyPI version (0.13.0 to 0.15.0rc6), published from Megatron-LM's ``core_v<version>`` tag, or a
git ``rev`` of Megatron-LM. Those commits get that tree the same way.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import GitError, UsageError
from harness.repository.corebuild import ensure_bytecode, ensure_helpers
from harness.repository.gitrepo import GitRepo, open_repo
from harness.repository.workspaces import WorkspaceCache

SUBMODULE = "3rdparty/Megatron-LM"


@dataclass(frozen=True)
class PinnedCore:
    pin: str  # the Megatron-LM commit
    path: Path  # a directory holding megatron/core of that commit
    via: str = SUBMODULE  # where the MB commit names it: the submodule, or uv.lock's megatron-core entry


_LOCK_ENTRY = re.compile(r'^\[\[package\]\]\nname = "megatron-core"\n(?P<body>(?:(?!\n\[\[).)*)', re.M | re.S)
_LOCK_REV = re.compile(r'source = \{ git = "[^"]*[?&]rev=(?P<rev>[0-9a-f]{7,40})')
_LOCK_VERSION = re.compile(r'^version = "(?P<version>[^"]+)"', re.M)


def lock_pin(mb_repo: GitRepo, mb_sha: str) -> tuple[str, str] | None:
    """(Megatron-LM ref, description) from ``uv.lock``'s megatron-core entry; None without one.

    A git source names the commit (``rev=``); a registry version names the Megatron-LM tag PyPI's
    megatron-core was released from (``core_v<version>``). A ``directory`` source (the submodule
    era) is not a pin of its own.
    """
    lock = mb_repo.file_text(mb_sha, "uv.lock")
    if lock is None:
        return None
    m = _LOCK_ENTRY.search(lock)
    if m is None:
        return None
    body = m.group("body")
    if rev := _LOCK_REV.search(body):
        return rev.group("rev"), f"uv.lock megatron-core git rev {rev.group('rev')[:12]}"
    if "registry" in body and (version := _LOCK_VERSION.search(body)):
        tag = f"core_v{version.group('version')}"
        return tag, f"uv.lock megatron-core {version.group('version')} (Megatron-LM tag {tag})"
    return None


def pinned_core(mb_repo: GitRepo, mb_sha: str, mlm_repo: Path, cache_dir: Path) -> PinnedCore | None:
    """The pinned megatron-core for ``mb_sha``; None when the MB commit pins no Megatron-LM.

    The submodule pin first; without a submodule, the ``uv.lock`` pin (:func:`lock_pin`).
    Raises :class:`GitError` when the pinned commit is not in ``mlm_repo`` (that commit is then
    untestable with this Megatron-LM, not failed).
    """
    pin, via = mb_repo.submodule_pin(mb_sha, SUBMODULE), SUBMODULE
    if pin is None:
        locked = lock_pin(mb_repo, mb_sha)
        if locked is None:
            return None
        ref, via = locked
        try:
            pin = open_repo(mlm_repo).resolve(ref)
        except UsageError:
            raise GitError(
                f"Megatron-LM {ref} named by MB {mb_sha[:12]} ({via}) is not in {mlm_repo}; fetch it there (with tags)"
            ) from None
    try:
        return dataclasses.replace(core_at(mlm_repo, pin, cache_dir), via=via)
    except UsageError:  # the pin is not a commit of that repository
        raise GitError(
            f"Megatron-LM commit {pin[:12]} pinned by MB {mb_sha[:12]} is not in {mlm_repo}; fetch it there"
        ) from None


def mlm_workspace(cache_dir: Path, mlm_repo: GitRepo | Path) -> WorkspaceCache:
    """The private mirror and per-commit ``megatron/`` trees of a Megatron-LM repository (shared by
    the trees MB commits pin and the second level of a bisection, which walks Megatron-LM)."""
    return WorkspaceCache(Path(cache_dir) / "megatron-lm", mlm_repo, paths=("megatron",))


def core_at(mlm_repo: GitRepo | Path, sha: str, cache_dir: Path) -> PinnedCore:
    """megatron-core of any Megatron-LM commit; GitError when it has none, UsageError when ``sha``
    is not a commit of the repository."""
    repo = mlm_repo if isinstance(mlm_repo, GitRepo) else open_repo(mlm_repo)
    full = repo.resolve(sha)
    tree = mlm_workspace(cache_dir, repo).materialize(full)
    if not (tree / "megatron" / "core").is_dir():
        raise GitError(f"Megatron-LM commit {full[:12]} has no megatron/core")
    # what MB's initialize builds before any dataset (a failure is recorded, not raised), once per source
    ensure_helpers(tree, shared=Path(cache_dir) / "megatron-lm" / "built-helpers")
    ensure_bytecode(tree)
    return PinnedCore(full, tree)
