"""Private per-commit source trees of a user's repository, built without touching it.

A private bare mirror (``git clone --mirror``; tags kept, since users name ranges with tags)
lives under the cache directory and is refreshed with ``git fetch``. A commit is materialised
with ``git archive <sha> <paths>`` streamed into :mod:`tarfile` and extracted into a temporary
directory that is then renamed into place. We chose *archive of selected paths* over ``git
worktree add``: it leaves no administrative state (no worktree entries to prune after a kill
-9), works when the mirror lacks large blobs outside those paths (MB's ``docs/``), and the
rename makes each workspace appear atomically, complete or not at all. The archive stays a
plain subprocess so the tar streams through without being held in memory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import git

from harness.errors import GitError
from harness.repository.gitcmd import GIT_ENV, git_failure, git_in, one_line, text_of
from harness.repository.gitrepo import GitRepo, open_repo

DEFAULT_WORKSPACE_PATHS: tuple[str, ...] = ("src", "tests", "pyproject.toml")
_TREES = "trees"  # workspaces under a WorkspaceCache directory, one per full sha


def workspace_dir_for(cache_dir: Path, repo: GitRepo) -> Path:
    """One mirror + trees per user repository, so one cache dir can serve several repos."""
    key = hashlib.sha256(str(Path(repo.git_dir).resolve()).encode()).hexdigest()[:16]
    return cache_dir / "workspaces" / key


class WorkspaceCache:
    """Private mirror of the user's repository plus one extracted tree per commit.

    Layout under ``cache_dir``: ``mirror.git`` (bare mirror), ``trees/<sha>`` (complete
    workspaces), ``trees/.tmp-<pid>-*`` (being built; stale ones are removed on start).
    """

    def __init__(
        self,
        cache_dir: Path | str,
        user_repo: GitRepo | Path | str,
        paths: Sequence[str] = DEFAULT_WORKSPACE_PATHS,
    ) -> None:
        self.cache_dir = Path(cache_dir)
        self.repo = user_repo if isinstance(user_repo, GitRepo) else open_repo(user_repo)
        self.paths = tuple(paths)
        self.mirror = self.cache_dir / "mirror.git"
        self.trees = self.cache_dir / _TREES
        self._synced = False
        self.trees.mkdir(parents=True, exist_ok=True)
        self._remove_stale_temps()

    def _mirror_git(self) -> git.Git:
        return git_in(self.cache_dir, git_dir=self.mirror)

    # ------------------------------------------------------------- mirror

    def sync(self) -> None:
        """Clone the mirror the first time, fetch into it afterwards."""
        if self.mirror.is_dir():
            text_of(self._mirror_git(), "fetch", "--quiet", "--prune", "origin")
        else:
            self._clone()
        self._synced = True

    def _clone(self) -> None:
        """Clone into a temp dir then rename, so a killed clone is never mistaken for a mirror."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".mirror-", dir=self.cache_dir))
        try:
            target = tmp / "mirror.git"
            text_of(git_in(tmp), "clone", "--mirror", "--quiet", "--", str(self.repo.path), str(target))
            try:
                os.rename(target, self.mirror)
            except OSError:
                if not self.mirror.is_dir():  # lost a race to another process: fine
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def has_commit(self, sha: str) -> bool:
        if not self.mirror.is_dir():
            return False
        try:
            self._mirror_git().cat_file("-e", f"{sha}^{{commit}}")
        except git.GitCommandError:
            return False
        except git.GitCommandNotFound as exc:
            raise git_failure(exc, "cat-file") from exc
        return True

    def _ensure_commit(self, sha: str) -> None:
        if self.has_commit(sha):
            return
        if not self._synced:
            self.sync()
        if not self.has_commit(sha):
            raise GitError(
                f"commit {sha[:12]} is not reachable from any branch or tag of {self.repo.path}; "
                "create a branch or tag pointing at it"
            )

    # --------------------------------------------------------- workspaces

    def path_for(self, sha: str) -> Path:
        return self.trees / sha

    @staticmethod
    def prepared(cache_dir: Path | str, sha: str) -> Path | None:
        """The complete workspace of full ``sha`` under ``cache_dir``, if one was built, found
        without opening the user's repository (a cluster job may not see it)."""
        tree = Path(cache_dir) / _TREES / sha
        return tree if tree.is_dir() else None

    def materialize(self, sha: str) -> Path:
        """Directory with ``paths`` of commit ``sha``; built once, atomically, then reused."""
        full = self.repo.resolve(sha)
        final = self.path_for(full)
        if final.is_dir():
            return final
        self._ensure_commit(full)
        present = self._present_paths(full)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-", dir=self.trees))
        try:
            self._extract(full, present, tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def _present_paths(self, sha: str) -> list[str]:
        """The configured paths that exist at ``sha`` (older commits may lack tests/)."""
        out = text_of(self._mirror_git(), "ls_tree", "--name-only", sha, "--", *self.paths)
        present = [p for p in self.paths if p in out.splitlines()]
        if not present:
            raise GitError(f"commit {sha[:12]} has none of {', '.join(self.paths)}")
        return present

    def _extract(self, sha: str, paths: list[str], dest: Path) -> None:
        """Stream ``git archive`` into tarfile (the 'data' filter refuses unsafe members)."""
        cmd = ["git", f"--git-dir={self.mirror}", "archive", "--format=tar", sha, "--", *paths]
        env = {**os.environ, **GIT_ENV}
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            try:
                with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                    tar.extractall(dest, filter="data")
            except tarfile.TarError as exc:
                proc.kill()
                raise GitError(f"git archive {sha[:12]} produced an unreadable tar: {exc}") from None
            finally:
                proc.stdout.close()
            err = proc.stderr.read().decode("utf-8", "replace")
            if proc.wait() != 0:
                raise GitError(f"git archive {sha[:12]} failed: {one_line(err)}")

    def cleanup(self, sha: str) -> None:
        """Remove a commit's workspace (renamed away first so it vanishes atomically)."""
        final = self.path_for(sha)
        if not final.is_dir():
            return
        doomed = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-rm-", dir=self.trees))
        os.rename(final, doomed / "tree")
        shutil.rmtree(doomed, ignore_errors=True)

    def _remove_stale_temps(self) -> None:
        """Delete temp dirs left by killed processes (their pid no longer runs)."""
        for entry in self.trees.glob(".tmp-*"):
            pid = entry.name.split("-")[1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
