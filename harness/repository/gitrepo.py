"""Read-only access to a user's git repository, on GitPython: the harness's one git layer.

Everything the harness asks of a repository goes through :class:`GitRepo`: resolving refs,
ancestry, rev-lists, commit metadata, diffs, submodule pins, the dirty state ("which commit
is this source tree" is :func:`harness.versions.tree_commit`, plain git, which the suite process
asks too). Commit objects and trees are read
through GitPython's object database; range and diff questions run git itself through
GitPython's command wrapper, because git's own rev-list and diff-tree are the reference.
Private per-commit trees are :mod:`harness.repository.workspaces` (streaming ``git archive``).

The user's repository is never modified. Only read-only commands run against it
(``rev-parse``, ``merge-base --is-ancestor``, ``rev-list``, ``diff-tree``, ``ls-files``,
``status --porcelain``, object reads), all with ``GIT_OPTIONAL_LOCKS=0`` so that even
``status`` does not refresh and rewrite ``.git/index``. No checkout, no bisect refs, no
stash, no config writes: a user can keep working in the repository while a bisection runs,
and an interrupted bisection leaves nothing behind to clean up.

Every query sits in this one class, where the never-modify rule can be checked by reading one
file; the read-only environment git runs under and the translation of its failures into
one-line errors are :mod:`.gitcmd`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from harness.errors import GitError, UsageError
from harness.repository.gitcmd import command, commit_subject, git_failure, git_in, text_of

# a missing git executable is a one-line EnvironmentProblem when git is first needed (as in gitcmd)
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import git
from git.exc import (
    BadName,
    GitCommandError,
    GitCommandNotFound,
    InvalidGitRepositoryError,
    NoSuchPathError,
)


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


class CommitSummary(NamedTuple):
    """One line of a commit table."""

    sha: str
    subject: str
    author: str
    date: str  # author date, strict ISO 8601


class GitRepo:
    """A user's repository, opened read-only. Create it with :func:`open_repo`."""

    def __init__(self, repo: git.Repo, path: Path, git_dir: Path, bare: bool) -> None:
        self._repo = repo
        self._git = command(repo)
        if bare:  # whatever GitPython guessed as its working directory, git works on this git dir
            self._git.update_environment(GIT_DIR=str(git_dir))
        self.path = path
        self.git_dir = git_dir
        self.bare = bare

    def _text(self, name: str, *args: str) -> str:
        return text_of(self._git, name, *args)

    def _commit(self, sha: str) -> git.Commit:
        """The commit object of a full sha (read from the object database, no subprocess per commit)."""
        try:
            return self._repo.commit(sha)
        except (BadName, ValueError) as exc:
            raise GitError(f"no commit {sha[:12]} in {self.path}") from exc

    # ------------------------------------------------------------------ refs

    def resolve(self, ref: str) -> str:
        """Full sha of the commit ``ref`` names (branch, tag, short hash, HEAD~2...)."""
        if not ref or ref.startswith("-"):
            raise UsageError(f"unknown ref {ref!r} in {self.path}")
        try:
            return str(self._git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")).strip()
        except GitCommandError:
            raise UsageError(f"unknown ref {ref!r} in {self.path}") from None
        except GitCommandNotFound as exc:
            raise git_failure(exc, "rev-parse") from exc

    def is_ancestor(self, older: str, newer: str) -> bool:
        try:
            self._git.merge_base("--is-ancestor", older, newer)
        except GitCommandError as exc:
            if exc.status == 1:  # answered: not an ancestor
                return False
            raise git_failure(exc, "merge-base --is-ancestor") from exc
        except GitCommandNotFound as exc:
            raise git_failure(exc, "merge-base --is-ancestor") from exc
        return True

    def is_shallow(self) -> bool:
        """A ``git clone --depth N`` (also seen from a linked worktree): history ends at grafted commits."""
        return self._text("rev_parse", "--is-shallow-repository").strip() == "true"

    def _unshallow_hint(self, what: str) -> UsageError:
        return UsageError(
            f"{what}: {self.path} is a shallow clone whose history may not reach it; "
            f"run 'git -C {self.path} fetch --unshallow' (or fetch a deeper history) and retry"
        )

    def check_range(self, good: str, bad: str) -> tuple[str, str]:
        """Resolve and validate a bisection range; returns (good sha, bad sha)."""
        try:
            good_sha, bad_sha = self.resolve(good), self.resolve(bad)
        except UsageError as exc:
            if self.is_shallow():
                raise self._unshallow_hint(str(exc)) from None
            raise
        if good_sha == bad_sha:
            raise UsageError(f"empty range: good {good!r} and bad {bad!r} are the same commit {good_sha[:12]}")
        if not self.is_ancestor(good_sha, bad_sha):
            what = f"good {good!r} ({good_sha[:12]}) is not an ancestor of bad {bad!r} ({bad_sha[:12]})"
            if self.is_shallow():  # the graft cut the path between them
                raise self._unshallow_hint(what)
            raise UsageError(f"{what}; a regression range needs good older than bad on the same history")
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
            listed = self._text("rev_list", "--first-parent", f"{good_sha}..{bad_sha}").split()
            oldest_parents = self.parents(listed[-1])
            if not oldest_parents or oldest_parents[0] != good_sha:
                raise UsageError(
                    f"good {good!r} ({good_sha[:12]}) is not on the first-parent history of bad; "
                    "drop --first-parent or pick a good commit on the mainline"
                )
        else:
            listed = self._text("rev_list", "--ancestry-path", "--topo-order", f"{good_sha}..{bad_sha}").split()
        return [good_sha, *reversed(listed)]

    def parents(self, sha: str) -> tuple[str, ...]:
        return tuple(p.hexsha for p in self._commit(sha).parents)

    def tags(self) -> list[str]:
        return [t.name for t in self._repo.tags]

    def first_parent_chain(self, ref: str = "HEAD") -> list[str]:
        """Every commit on ``ref``'s first-parent history, oldest first."""
        return self._text("rev_list", "--first-parent", "--reverse", self.resolve(ref)).split()

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two commits, None when they share no history."""
        try:
            return str(self._git.merge_base(self.resolve(a), self.resolve(b))).strip() or None
        except GitCommandError as exc:
            if exc.status == 1:  # answered: no common ancestor
                return None
            raise git_failure(exc, "merge-base") from exc

    def committed_date(self, sha: str) -> str:
        """Committer date of a commit, strict ISO 8601."""
        return self._commit(self.resolve(sha)).committed_datetime.isoformat()

    # ------------------------------------------------------------ content

    def commit_info(self, sha: str, under: str = "src") -> CommitInfo:
        """Subject, author, date and files changed under ``under`` (vs first parent)."""
        commit = self._commit(self.resolve(sha))
        parents = tuple(p.hexsha for p in commit.parents)
        files = self._diff_tree(commit.hexsha, parents, [under], "--name-only").split("\n")
        return CommitInfo(
            commit.hexsha,
            commit_subject(_message(commit)),
            commit.author.name or "",
            commit.author.email or "",
            commit.authored_datetime.isoformat(),
            parents,
            tuple(f for f in files if f),
        )

    def commit_summaries(self, shas: Sequence[str]) -> dict[str, CommitSummary]:
        """sha -> subject/author/date for many commits (object reads through one persistent git process)."""
        out = {}
        for sha in shas:
            commit = self._commit(sha)
            out[commit.hexsha] = CommitSummary(
                commit.hexsha,
                commit_subject(_message(commit)),
                commit.author.name or "",
                commit.authored_datetime.isoformat(),
            )
        return out

    def _diff_tree(self, sha: str, parents: Sequence[str], paths: Sequence[str], *opts: str) -> str:
        """Plumbing tree-to-tree diff (never touches the index); root commits vs empty tree."""
        base = [parents[0], sha] if parents else ["--root", sha]
        return self._text("diff_tree", "-r", "--no-commit-id", *opts, *base, "--", *paths)

    def diff(self, sha: str, paths: Sequence[str] = ("src",)) -> str:
        """Patch text of ``sha`` against its first parent, limited to ``paths``."""
        full = self.resolve(sha)
        return self._diff_tree(full, self.parents(full), paths, "-p", "--no-color", "--no-ext-diff")

    def patch(self, sha: str, paths: Sequence[str]) -> str:
        """A patch of ``sha`` against its first parent that ``git apply`` (also ``-R``) can apply,
        binary changes included, limited to ``paths``."""
        full = self.resolve(sha)
        return self._diff_tree(full, self.parents(full), paths, "-p", "--binary", "--no-color", "--no-ext-diff")

    def file_text(self, ref: str, path: str) -> str | None:
        """A file of a commit's tree as text (undecodable bytes replaced), None when absent."""
        tree = self._commit(self.resolve(ref)).tree
        try:
            entry = tree / path
        except KeyError:
            return None
        if entry.type != "blob":
            return None
        return bytes(entry.data_stream.read()).decode("utf-8", "replace")

    def submodule_pin(self, ref: str, path: str = "3rdparty/Megatron-LM") -> str | None:
        """The commit a commit pins for the submodule at ``path`` (its gitlink), None when it has none there."""
        tree = self._commit(self.resolve(ref)).tree
        try:
            entry = tree / path
        except KeyError:
            return None
        return entry.hexsha if entry.type == "submodule" else None

    # --------------------------------------------------------------- state

    def dirty_files(self, include_untracked: bool = False, under: Path | None = None) -> list[str]:
        """``status --porcelain`` lines (no index refresh: no optional locks), optionally below ``under``.

        None for a bare repository or a clone made with ``--no-checkout``: nothing was ever
        checked out there (git keeps no index), so the missing files are no deletions.
        """
        if self.bare or not self.checked_out():
            return []
        untracked = "--untracked-files=normal" if include_untracked else "--untracked-files=no"
        limit = ["--", str(under)] if under is not None else []
        out = self._text("status", "--porcelain", untracked, "--ignore-submodules=dirty", *limit)
        return [line for line in out.splitlines() if line]

    def checked_out(self) -> bool:
        """False when the working tree was never checked out (``git clone --no-checkout``: no index)."""
        index = self._text("rev-parse", "--git-path", "index").strip()
        return (self.path / index).exists()

    def is_dirty(self, include_untracked: bool = False) -> bool:
        """True when tracked files differ from HEAD; the caller decides to refuse or warn."""
        return bool(self.dirty_files(include_untracked))


def _message(commit: git.Commit) -> str:
    message = commit.message
    return message.decode("utf-8", "replace") if isinstance(message, bytes) else message


def open_repo(path: Path | str) -> GitRepo:
    """Open a repository read-only; GitError "not a git repository: PATH" otherwise.

    Git itself says where the repository is and whether it is bare (a mirror without a
    ``config`` file is bare to git, not to GitPython's own guess).
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise GitError(f"not a git repository: {p}")
    probe = git_in(p)
    try:
        bare_flag, git_dir = str(probe.rev_parse("--is-bare-repository", "--absolute-git-dir")).split("\n")[:2]
        bare = bare_flag.strip() == "true"
        top = p.resolve() if bare else Path(str(probe.rev_parse("--show-toplevel")).strip())
    except GitCommandError as exc:
        if "dubious ownership" in str(exc.stderr):
            raise GitError(f"git refuses {p}: dubious ownership (see git config safe.directory)") from None
        raise GitError(f"not a git repository: {p}") from None
    except GitCommandNotFound as exc:
        raise git_failure(exc, "rev-parse") from exc
    try:
        repo = git.Repo(git_dir if bare else top, expand_vars=False)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise GitError(f"not a git repository: {p}") from None
    return GitRepo(repo, top, Path(git_dir), bare)
