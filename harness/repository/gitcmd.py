"""Running git read-only: the environment every git command gets, GitPython's wrapper set up
with it, and git's failures as one-line harness errors.

Why apart from :mod:`.gitrepo`: the never-modify rule lives in two places that must agree, the
environment (``GIT_OPTIONAL_LOCKS=0``: not even ``status`` rewrites the index) and the queries
(:class:`~harness.repository.gitrepo.GitRepo`); this is the first, imported by the mirror and
workspace code too.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import EnvironmentProblem, GitError

# A missing git executable must become a one-line EnvironmentProblem when git is first needed,
# not an ImportError while the CLI starts.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import git
from git.exc import (
    GitCommandError,
    GitCommandNotFound,
)

#: Environment of every git command: no prompts, stable English messages, no optional locks.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANG": "C", "GIT_OPTIONAL_LOCKS": "0"}


def one_line(text: str) -> str:
    return " ".join(text.split())


def git_failure(exc: Exception, what: str) -> GitError | EnvironmentProblem:
    """The one-line harness error for a failed git command (GitPython's exception chained)."""
    if isinstance(exc, GitCommandNotFound):
        return EnvironmentProblem("git is not installed or not on PATH")
    if isinstance(exc, GitCommandError):
        detail = exc.stderr if isinstance(exc.stderr, str) else ""
        detail = one_line(detail.replace("stderr:", "").strip(" '")) or f"exit status {exc.status}"
        return GitError(f"git {what} failed: {detail}")
    return GitError(f"git {what} failed: {one_line(str(exc))}")


def command(repo: git.Repo) -> git.Git:
    """``repo``'s git command wrapper with the harness environment."""
    repo.git.update_environment(**GIT_ENV)
    return repo.git


def text_of(cmd: git.Git, name: str, *args: str) -> str:
    """stdout of ``git NAME ARGS`` as text (undecodable bytes replaced, final newline kept)."""
    try:
        out = getattr(cmd, name)(*args, stdout_as_string=False, strip_newline_in_stdout=False)
    except (GitCommandError, GitCommandNotFound) as exc:
        raise git_failure(exc, " ".join([name.replace("_", "-"), *args[:2]])) from exc
    return bytes(out).decode("utf-8", "replace")


def commit_subject(message: str) -> str:
    """What ``git log --format=%s`` prints: the first paragraph, its lines joined by spaces."""
    lines = []
    for line in message.lstrip("\n").split("\n"):
        if not line.strip():
            break
        lines.append(line.rstrip())
    return " ".join(lines)


def git_in(directory: Path, git_dir: Path | None = None) -> git.Git:
    """GitPython's command wrapper running in ``directory`` (or on ``git_dir``) with the harness environment."""
    cmd = git.Git(str(directory))
    cmd.update_environment(**GIT_ENV, **({"GIT_DIR": str(git_dir)} if git_dir is not None else {}))
    return cmd
