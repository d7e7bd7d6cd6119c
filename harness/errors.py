"""The one user-facing exception family.

Anything a user can cause (bad input, a broken environment, a corrupt file) raises a
``HarnessError`` subclass; the CLI prints it as one line and exits with ``exit_code``.
Anything else escaping is a bug in the harness and keeps its traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error the CLI reports as a one-line message."""

    exit_code: int = 2

    def one_line(self) -> str:
        text = " ".join(str(self).split())
        return f"harness: error: {text}"


class UsageError(HarnessError):
    """Bad arguments: unknown ref, empty range, unknown suite..."""


class EnvironmentProblem(HarnessError):
    """The environment cannot run the job (no MB importable, no Python 3.12, no git)."""


class CorruptFile(HarnessError):
    """A golden, cache or result file exists but cannot be read or has a wrong schema."""


class GitError(HarnessError):
    """A git operation on the user's repository or the harness clone failed."""


class Untestable(Exception):
    """The case cannot be evaluated on this target (missing operation, CUDA-only code...).

    Not a :class:`HarnessError`: it never reaches the CLI. The pytest plugin turns it into an
    UNTESTABLE verdict (a bisect "skip"); it lives here so that adapters and suites can raise it
    without importing the plugin.
    """


class NotHere(Exception):
    """An adapter candidate does not fit this MB (its probe failed); try the next candidate.

    Internal to :mod:`harness.suite.adapters`: when no candidate fits, the operation raises
    :class:`Untestable` with what was tried.
    """


class Broken(Exception):
    """MB has the operation but it is broken at this commit: its module exists and does not
    import because of the commit's own code, or it no longer produces its output.

    The plugin turns it into a FAIL whose message starts with ``broken:`` (bisectable): a break
    is the commit's failure, never an era gap (see :mod:`harness.suite.adapters.failures`).
    """


class MissingOutput(Exception):
    """MB ran an adapter's operation, but its output lacks what the operation produces in this
    era; :class:`harness.suite.adapters.Operation` raises it as :class:`Broken`."""
