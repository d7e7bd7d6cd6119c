"""Read-only git access to the user's repository, and private workspaces per commit.

The user's repository is never modified. Only read-only commands run against it
(``rev-parse``, ``merge-base --is-ancestor``, ``rev-list``, ``log``/``show``, ``diff-tree``,
``cat-file``, ``ls-tree``, ``status --porcelain``), all with ``--no-optional-locks`` so that
even ``status`` does not refresh and rewrite ``.git/index``. No checkout, no bisect refs,
no stash, no config writes: a user can keep working in the repository while a bisection
runs, and an interrupted bisection leaves nothing behind to clean up.

Workspaces (:class:`WorkspaceCache`): a private bare mirror (``git clone --mirror``; tags
kept, since users name ranges with tags) lives under the cache directory and is refreshed
with ``git fetch``. A commit is materialised with ``git archive <sha> <paths>`` extracted
into a temporary directory that is then renamed into place. We chose *archive of selected
paths* over ``git worktree add``: it leaves no administrative state (no worktree entries to
prune after a kill -9), works when the mirror lacks large blobs outside those paths (MB's
``docs/``), and the rename makes each workspace appear atomically, complete or not at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from harness.errors import EnvironmentProblem, GitError, UsageError

DEFAULT_WORKSPACE_PATHS: tuple[str, ...] = ("src", "tests", "pyproject.toml")
GITLINK_MODE = "160000"


def _env() -> dict[str, str]:
    """Environment for every git call: no prompts, stable English messages."""
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANG": "C", "GIT_OPTIONAL_LOCKS": "0"})
    return env


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run_git(args: Sequence[str], *, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run ``git --no-optional-locks ARGS``; GitError (one line, with stderr) on failure."""
    cmd = ["git", "--no-optional-locks", *args]
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise EnvironmentProblem("git is not installed or not on PATH") from None
    if check and proc.returncode != 0:
        err = _one_line(proc.stderr.decode("utf-8", "replace")) or f"exit status {proc.returncode}"
        raise GitError(f"git {' '.join(args[:3])} failed: {err}")
    return proc


@dataclass(frozen=True)
class CommitInfo:
    """What a report shows about a commit."""

    sha: str
    subject: str
    author: str
    email: str
    date: str  # author date, strict ISO 8601
    parents: tuple[str, ...]
    files: tuple[str, ...]  # changed files under ``under`` (vs first parent)

    @property
    def short(self) -> str:
        return self.sha[:12]


class CommitSummary(NamedTuple):
    """One line of a commit table."""

    sha: str
    subject: str
    author: str
    date: str  # author date, strict ISO 8601


class GitRepo:
    """A user's repository, opened read-only. Create it with :func:`open_repo`."""

    def __init__(self, path: Path, git_dir: Path, bare: bool) -> None:
        self.path = path
        self.git_dir = git_dir
        self.bare = bare

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return run_git(["-C", str(self.path), *args], check=check)

    def _out(self, *args: str) -> str:
        return self.git(*args).stdout.decode("utf-8", "replace")

    # ------------------------------------------------------------------ refs

    def resolve(self, ref: str) -> str:
        """Full sha of the commit ``ref`` names (branch, tag, short hash, HEAD~2...)."""
        if not ref or ref.startswith("-"):
            raise UsageError(f"unknown ref {ref!r} in {self.path}")
        proc = self.git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
        if proc.returncode != 0:
            raise UsageError(f"unknown ref {ref!r} in {self.path}")
        return proc.stdout.decode().strip()

    def is_ancestor(self, older: str, newer: str) -> bool:
        proc = self.git("merge-base", "--is-ancestor", older, newer, check=False)
        if proc.returncode in (0, 1):
            return proc.returncode == 0
        raise GitError(f"git merge-base --is-ancestor failed: {_one_line(proc.stderr.decode('utf-8', 'replace'))}")

    def check_range(self, good: str, bad: str) -> tuple[str, str]:
        """Resolve and validate a bisection range; returns (good sha, bad sha)."""
        good_sha, bad_sha = self.resolve(good), self.resolve(bad)
        if good_sha == bad_sha:
            raise UsageError(f"empty range: good {good!r} and bad {bad!r} are the same commit {good_sha[:12]}")
        if not self.is_ancestor(good_sha, bad_sha):
            raise UsageError(
                f"good {good!r} ({good_sha[:12]}) is not an ancestor of bad {bad!r} ({bad_sha[:12]}); "
                "a regression range needs good older than bad on the same history"
            )
        return good_sha, bad_sha

    def commits_between(self, good: str, bad: str, first_parent: bool = False) -> list[str]:
        """Linear candidate list, oldest first, both endpoints included.

        Default: ``rev-list --ancestry-path --topo-order good..bad``, i.e. only commits that
        are descendants of good and ancestors of bad. Every candidate then contains good's
        changes, so a good->bad transition is meaningful; a side branch forked before good
        is represented by its merge commit. Topological order puts every commit after its
        parents. ``first_parent=True`` walks bad's first-parent chain (merges as units,
        like ``git bisect --first-parent``) and requires good to be on that chain.
        """
        good_sha, bad_sha = self.check_range(good, bad)
        if first_parent:
            listed = self._out("rev-list", "--first-parent", f"{good_sha}..{bad_sha}").split()
            self._require_on_first_parent_chain(listed, good_sha, good)
        else:
            listed = self._out("rev-list", "--ancestry-path", "--topo-order", f"{good_sha}..{bad_sha}").split()
        return [good_sha, *reversed(listed)]

    def _require_on_first_parent_chain(self, listed: list[str], good_sha: str, good: str) -> None:
        oldest = listed[-1]
        parents = self.parents(oldest)
        if not parents or parents[0] != good_sha:
            raise UsageError(
                f"good {good!r} ({good_sha[:12]}) is not on the first-parent history of bad; "
                "drop --first-parent or pick a good commit on the mainline"
            )

    def parents(self, sha: str) -> tuple[str, ...]:
        fields = self._out("rev-list", "--parents", "-n", "1", sha).split()
        return tuple(fields[1:])

    # ------------------------------------------------------------ content

    def commit_info(self, sha: str, under: str = "src") -> CommitInfo:
        """Subject, author, date and files changed under ``under`` (vs first parent)."""
        raw = self._out("show", "-s", "--no-show-signature", "--format=%H%x00%s%x00%an%x00%ae%x00%aI%x00%P", sha)
        full, subject, author, email, date, parents = raw.rstrip("\n").split("\x00")
        files = self._changed(full, parents.split(), [under]).split("\n")
        return CommitInfo(full, subject, author, email, date, tuple(parents.split()), tuple(f for f in files if f))

    def commit_summaries(self, shas: Sequence[str]) -> dict[str, CommitSummary]:
        """sha -> subject/author/date for many commits with few git calls (read-only ``show -s``)."""
        meta: dict[str, CommitSummary] = {}
        for i in range(0, len(shas), 400):
            chunk = list(shas[i:i + 400])
            raw = self._out("show", "-s", "--no-show-signature", "--format=%H%x00%s%x00%an%x00%aI%x01", *chunk)
            for rec in raw.split("\x01"):
                fields = rec.strip("\n").split("\x00")
                if len(fields) == 4:
                    meta[fields[0]] = CommitSummary(*fields)
        return meta

    def _diff_tree(self, sha: str, parents: Sequence[str], paths: Sequence[str], *opts: str) -> str:
        """Plumbing tree-to-tree diff (never touches the index); root commits vs empty tree."""
        base = [parents[0], sha] if parents else ["--root", sha]
        return self._out("diff-tree", "-r", "--no-commit-id", *opts, *base, "--", *paths)

    def _changed(self, sha: str, parents: Sequence[str], paths: Sequence[str]) -> str:
        return self._diff_tree(sha, parents, paths, "--name-only")

    def diff(self, sha: str, paths: Sequence[str] = ("src",)) -> str:
        """Patch text of ``sha`` against its first parent, limited to ``paths``."""
        full = self.resolve(sha)
        return self._diff_tree(full, self.parents(full), paths, "-p", "--no-color", "--no-ext-diff")

    def submodule_pin(self, sha: str, path: str = "3rdparty/Megatron-LM") -> str | None:
        """The gitlink sha a commit pins for a submodule, None when it has none there."""
        line = self._out("ls-tree", sha, "--", path).strip()
        if not line:
            return None
        mode, kind, obj = line.split("\t", 1)[0].split()
        return obj if mode == GITLINK_MODE and kind == "commit" else None

    # --------------------------------------------------------------- state

    def dirty_files(self, include_untracked: bool = False) -> list[str]:
        """``status --porcelain`` lines (no index refresh thanks to --no-optional-locks)."""
        if self.bare:
            return []
        untracked = "--untracked-files=normal" if include_untracked else "--untracked-files=no"
        out = self._out("status", "--porcelain", untracked, "--ignore-submodules=dirty")
        return [line for line in out.splitlines() if line]

    def is_dirty(self, include_untracked: bool = False) -> bool:
        """True when tracked files differ from HEAD; the caller decides to refuse or warn."""
        return bool(self.dirty_files(include_untracked))


def open_repo(path: Path | str) -> GitRepo:
    """Open a repository read-only; GitError "not a git repository: PATH" otherwise."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise GitError(f"not a git repository: {p}")
    proc = run_git(["-C", str(p), "rev-parse", "--is-bare-repository", "--absolute-git-dir"], check=False)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace")
        if "dubious ownership" in err:
            raise GitError(f"git refuses {p}: dubious ownership (see git config safe.directory)")
        raise GitError(f"not a git repository: {p}")
    bare_flag, git_dir = proc.stdout.decode().split("\n")[:2]
    bare = bare_flag.strip() == "true"
    if bare:
        return GitRepo(p.resolve(), Path(git_dir), True)
    top = run_git(["-C", str(p), "rev-parse", "--show-toplevel"]).stdout.decode().strip()
    return GitRepo(Path(top), Path(git_dir), False)


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
        self.trees = self.cache_dir / "trees"
        self._synced = False
        self.trees.mkdir(parents=True, exist_ok=True)
        self._remove_stale_temps()

    def _mgit(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return run_git([f"--git-dir={self.mirror}", *args], check=check)

    # ------------------------------------------------------------- mirror

    def sync(self) -> None:
        """Clone the mirror the first time, fetch into it afterwards."""
        if self.mirror.is_dir():
            self._mgit("fetch", "--quiet", "--prune", "origin")
        else:
            self._clone()
        self._synced = True

    def _clone(self) -> None:
        """Clone into a temp dir then rename, so a killed clone is never mistaken for a mirror."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".mirror-", dir=self.cache_dir))
        try:
            target = tmp / "mirror.git"
            run_git(["clone", "--mirror", "--quiet", "--", str(self.repo.path), str(target)])
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
        return self._mgit("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

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
        out = self._mgit("ls-tree", "--name-only", sha, "--", *self.paths).stdout.decode()
        present = [p for p in self.paths if p in out.splitlines()]
        if not present:
            raise GitError(f"commit {sha[:12]} has none of {', '.join(self.paths)}")
        return present

    def _extract(self, sha: str, paths: list[str], dest: Path) -> None:
        """Stream ``git archive`` into tarfile (the 'data' filter refuses unsafe members)."""
        cmd = ["git", f"--git-dir={self.mirror}", "archive", "--format=tar", sha, "--", *paths]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()) as proc:
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
                raise GitError(f"git archive {sha[:12]} failed: {_one_line(err)}")

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
