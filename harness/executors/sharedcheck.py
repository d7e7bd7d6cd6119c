"""The SLURM executor's start-up check: do jobs see the cache directory, and in which environment
do they run?

Why a mixin of its own: the check (a token written here, read back by one job, whose result
this driver must see) is the first thing :class:`~harness.executors.slurm.SlurmExecutor` does
and the one rule users meet when their file system is wrong; it uses only the executor's
submit/wait/cancel, declared below.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

from harness.executors.jobcalls import ProbeAnswer, RemoteEvaluator, SharedProbe
from harness.executors.local import Handle
from harness.executors.options import JobFailed, SharedFilesystemError, SlurmOptions
from harness.executors.slurmjob import SlurmHandle
from harness.records.atomicio import atomic_write_text


class _Executor(Protocol):
    options: SlurmOptions
    run_dir: Path
    cache_dir: Path

    def say(self, text: str) -> None: ...

    def _start(self, h: SlurmHandle, count: bool = True) -> None: ...

    def wait_any(self, handles: Iterable[Handle], timeout: float | None = None) -> list[SlurmHandle]: ...

    def cancel(self, any_handle: Handle) -> bool: ...

    def check_shared(self, evaluator: Any = None, also: Sequence[Path] = ()) -> tuple[str, str] | None: ...

    def _probe(self, probe: SharedProbe) -> ProbeAnswer: ...


class SharedCheck:
    """``bind`` and ``check_shared`` of the SLURM executor."""

    def bind(self: _Executor, evaluator: Any) -> Any:
        """The start-up check (see the module docstring); returns the evaluator to submit, bound to
        the cache namespace measured where the jobs run."""
        namespace = self.check_shared(evaluator)
        return evaluator if namespace is None else RemoteEvaluator(evaluator, namespace)

    def check_shared(self: _Executor, evaluator: Any = None, also: Sequence[Path] = ()) -> tuple[str, str] | None:
        """Run the start-up job: it must read a token this driver wrote into the cache directory
        (and into each directory of ``also``, where jobs write their output), and the driver must
        see its result. Returns ``evaluator``'s cache namespace measured in the job (None without
        an evaluator)."""
        token = secrets.token_hex(16)
        dirs = [self.run_dir, *(Path(d).absolute() for d in also)]
        token_files = [d / f".harness-shared-fs-{token[:8]}" for d in dirs]
        for f in token_files:
            atomic_write_text(f, token)
        try:
            answer = self._probe(SharedProbe(tuple(map(str, token_files)), token, evaluator))
        finally:
            for f in token_files[1:]:
                f.unlink(missing_ok=True)
        where = "must be on a file system the compute nodes share (NFS, Lustre, GPFS)"
        if answer["unseen"]:
            raise SharedFilesystemError(
                f"the start-up job on {answer['host']} cannot read {answer['unseen'][0]}, "
                f"which this driver wrote: {Path(answer['unseen'][0]).parent} {where}"
            )
        self.say(f"jobs run on {answer['host']} and see {', '.join(map(str, [self.cache_dir, *also]))}")
        namespace = answer["namespace"]
        return None if namespace is None else (namespace[0], namespace[1])

    def _probe(self: _Executor, probe: SharedProbe) -> ProbeAnswer:
        h = SlurmHandle(probe, None, "")
        h.label = "start-up job"
        self._start(h, count=False)
        if not self.wait_any([h], timeout=self.options.probe_timeout_s):
            self.cancel(h)
            raise SharedFilesystemError(
                f"the start-up job {h.job.job_id} did not run within {self.options.probe_timeout_s:.0f} s, so "
                f"whether jobs see {self.cache_dir} is unknown; retry when the partition is less busy or raise "
                "probe_timeout_s in [tool.harness.slurm]"
            )
        if h.error is not None:
            raise JobFailed(f"the start-up job failed, so nothing can run: {h.error}")
        if not isinstance(h.value, dict):  # ended without a result the driver can see
            raise SharedFilesystemError(
                f"the start-up job left no result under {self.run_dir} "
                f"({'; '.join(h.faults)}): --cache-dir {self.cache_dir} must be on a "
                "file system the compute nodes share (NFS, Lustre, GPFS)"
            )
        return cast(ProbeAnswer, h.value)  # what SharedProbe returned, through the job's pickle
