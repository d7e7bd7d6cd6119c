"""megatron-core from the Megatron-LM commit an MB commit pins (``3rdparty/Megatron-LM``).

MB's newest commits need a megatron-core newer than any PyPI release, and MB pins the exact
Megatron-LM commit it was developed against as a git submodule. Given a Megatron-LM repository
(``--megatron-lm PATH``), the ``megatron/`` tree of the pinned commit is extracted (cached, one
tree per pin, through the same private-mirror machinery as MB commits) and put on the suite
process's path before the installed megatron-core. The user's Megatron-LM repository is only read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import GitError, UsageError
from harness.gitrepo import GitRepo, open_repo
from harness.workspaces import WorkspaceCache

SUBMODULE = "3rdparty/Megatron-LM"


@dataclass(frozen=True)
class PinnedCore:
    pin: str  # the Megatron-LM commit
    path: Path  # a directory holding megatron/core of that commit


def pinned_core(mb_repo: GitRepo, mb_sha: str, mlm_repo: Path, cache_dir: Path) -> PinnedCore | None:
    """The pinned megatron-core for ``mb_sha``; None when the MB commit pins no Megatron-LM.

    Raises :class:`GitError` when the pinned commit is not in ``mlm_repo`` (that commit is then
    untestable with this Megatron-LM, not failed).
    """
    pin = mb_repo.submodule_pin(mb_sha, SUBMODULE)
    if pin is None:
        return None
    try:
        return core_at(mlm_repo, pin, cache_dir)
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
    return PinnedCore(full, tree)
