"""One SLURM evaluation's handle, and importing submitit without its logging side effect.

Why apart from :mod:`.slurm`: the handle is the record the executor, the shard runner and the
tests read (state, attempts, logs, faults); the executor's rules are in :mod:`.slurm`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from harness.errors import EnvironmentProblem
from harness.executors.local import Handle, JobLog
from harness.executors.options import JobFailed


class SlurmHandle:
    """One evaluation: its job submissions (retries included) and, once done, its outcome."""

    _PENDING: Any = object()

    def __init__(self, fn: Callable[[Any], Any], arg: object, key: str) -> None:
        self.fn, self.arg, self.key = fn, arg, key
        self.label = arg[:12] if isinstance(arg, str) else repr(arg)[:40]
        self.job: Any = None  # the current submitit Job
        self.attempt = 0
        self.logs: list[JobLog] = []
        self.faults: list[str] = []
        self.value: object = self._PENDING
        self.error: str | None = None
        self.cancelled = False
        self.started = time.monotonic()
        self.finished: float | None = None
        self._ended_at: float | None = None  # first poll that saw the job ended without a result

    def done(self) -> bool:
        return self.value is not self._PENDING or self.error is not None

    def result(self) -> Any:
        if self.error is not None:
            raise JobFailed(self.error)
        if self.value is self._PENDING:
            raise RuntimeError(f"evaluation of {self.label} is not done")
        return self.value


def own(handle: Handle) -> SlurmHandle:
    if not isinstance(handle, SlurmHandle):
        raise TypeError(f"not a handle of this executor: {handle!r}")
    return handle


def import_submitit() -> ModuleType:
    """submitit, imported without its ``logging.config.dictConfig``: that call closes every
    logging handler the process already has (an application's own, pytest's log capture). Jobs
    still configure it: the variable is not left in the environment they inherit."""
    if "submitit" in sys.modules:
        return sys.modules["submitit"]
    before = os.environ.get("SUBMITIT_LOG_LEVEL")
    os.environ["SUBMITIT_LOG_LEVEL"] = "NOCONFIG"
    try:
        import submitit
    except ImportError:
        raise EnvironmentProblem("the slurm executor needs submitit: pip install 'harness[slurm]'") from None
    finally:
        if before is None:
            del os.environ["SUBMITIT_LOG_LEVEL"]
        else:
            os.environ["SUBMITIT_LOG_LEVEL"] = before
    return submitit


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
