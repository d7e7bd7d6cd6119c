"""SLURM executor on submitit: one cluster job per evaluation, ``slots`` jobs in flight.

It implements :class:`harness.executors.local.Executor`, so the bisect driver runs unchanged:
the job calls the same evaluator with the same commit as a local evaluation and returns the
same :class:`~harness.bisect.driver.EvalOutcome`; the verdict cache stays with the driver.
submitit does the submission (sbatch script, pickled call, result file, logs); with
``cluster="local"`` its LocalExecutor runs the very same jobs as local processes (tests,
benchmarks, a workstation).

Rules, and why:

* **Shared file system, checked at start** (:meth:`SlurmExecutor.bind`): the driver writes a
  token into the cache directory and submits one job that must read it back, and whose
  result the driver must see. Jobs materialise nothing: the driver builds the commit's tree
  in the cache directory before submitting (``evaluator.prepare``). The same start-up job
  reports the evaluator's cache namespace where jobs run (a container's torch and
  megatron-core), so verdicts are cached under the environment that produced them.
* **Cluster faults are not verdicts**: a job that ends without a result (preempted,
  cancelled by someone, node failure, time limit, out of memory, SIGKILL) is submitted again,
  ``job_retries`` times; past that the outcome is an empty, ``infrastructure``-marked skip the
  driver never caches. A job whose Python raised is a broken job environment or a harness
  bug: :class:`JobFailed`, with the log tail on the terminal.
* **Moot and interrupted work is cancelled**: :meth:`cancel` (the driver's k-ary speculation
  made a commit useless) and :meth:`close` with ``cancel=True`` (Ctrl-C) scancel the jobs.
* **A killed driver loses nothing**: every job is in a job list on disk
  (:mod:`harness.executors.joblist`); a rerun adopts it and reattaches to those jobs.

Container images (pyxis/enroot): ``--container-image``/``--container-mounts`` go to the
``srun`` that submitit runs inside the batch script (``slurm_srun_args``), not to ``sbatch``:
pyxis on sbatch runs the whole batch script in the container, where ``srun`` is missing.
The cache directory is mounted at the same path automatically. Other sbatch flags go
through ``sbatch_extra`` (submitit's ``slurm_additional_parameters``).

The start-up check is :mod:`.sharedcheck` (a mixin), the job handle :mod:`.slurmjob`;
submission, resubmission, cancel and reattach share the in-flight job state here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

from harness.errors import EnvironmentProblem, UsageError
from harness.executors import jobstate
from harness.executors.jobcalls import JobCall, JobFault
from harness.executors.joblist import EntryState, JobEntry, JobList, job_key, now_utc
from harness.executors.local import Handle, JobLog
from harness.executors.options import SlurmOptions
from harness.executors.outcome import EvalOutcome
from harness.executors.sharedcheck import SharedCheck
from harness.executors.slurmjob import SlurmHandle, import_submitit, indent, own

if TYPE_CHECKING:
    import submitit
    from submitit import AutoExecutor
    from submitit.core.utils import JobPaths


class SlurmExecutor(SharedCheck):
    """Evaluations as submitit jobs under ``<cache_dir>/jobs/<run id>/<job id>/``."""

    def __init__(
        self, cache_dir: Path, slots: int, options: SlurmOptions | None = None, progress: TextIO | None = sys.stderr
    ) -> None:
        if slots < 1:
            raise UsageError("-j must be at least 1 (jobs in flight)")
        self.options = options or SlurmOptions()
        submitit = import_submitit()
        if self.options.cluster == "slurm" and shutil.which("sbatch") is None:
            raise EnvironmentProblem("the slurm executor needs sbatch on PATH (run the driver on a SLURM login node)")
        self.slots = slots
        self.progress = progress
        self.cache_dir = Path(cache_dir).expanduser().absolute()
        self.jobs_root = self.cache_dir / "jobs"
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{secrets.token_hex(3)}"
        self.run_dir = self.jobs_root / run_id
        self.joblist = JobList(self.run_dir)
        self._adopted, notes = self.joblist.adopt_orphans(self.jobs_root)
        for note in notes:
            self.say(note)
        if self._adopted:
            self.say(f"{len(self._adopted)} job(s) of an interrupted run found: reattaching instead of resubmitting")
        self._ex = self._make_executor(submitit)
        self._live: list[SlurmHandle] = []
        self.stats = {"submitted": 0, "retried": 0, "reattached": 0, "cancelled": 0, "infrastructure": 0}
        self.overheads: list[float] = []  # per evaluation: driver-side wall time minus in-job duration
        default_poll = 5.0 if self.options.cluster == "slurm" else 0.2
        self.poll_s = self.options.poll_s if self.options.poll_s is not None else default_poll

    def say(self, text: str) -> None:
        if self.progress is not None:
            print(text, file=self.progress, flush=True)

    def _make_executor(self, submitit: ModuleType) -> AutoExecutor:
        o = self.options
        ctor = {f"{o.cluster}_python": o.python} if o.python else {}
        ex = submitit.AutoExecutor(folder=self.run_dir / "%j", cluster=o.cluster, **ctor)
        params: dict[str, object] = {
            "name": "harness-eval",
            "timeout_min": o.time_min,
            "gpus_per_node": o.gpus,
            "cpus_per_task": o.cpus_per_task,
            "mem_gb": o.mem_gb,
        }
        if o.cluster == "slurm":
            params.update(
                slurm_partition=o.partition,
                slurm_account=o.account,
                slurm_additional_parameters=dict(o.sbatch_extra) or None,
                slurm_srun_args=self.srun_args() or None,
                slurm_setup=list(o.setup) or None,
            )
        elif o.setup:
            params["local_setup"] = list(o.setup)
        ex.update_parameters(**params)
        return ex

    def srun_args(self) -> list[str]:
        """Flags for the job's srun step: the container (pyxis) and ``srun_extra``."""
        o = self.options
        args = list(o.srun_extra)
        if o.container_image:
            mounts = list(o.container_mounts)
            if not any(m.split(":")[0] == str(self.cache_dir) for m in mounts):
                mounts.append(f"{self.cache_dir}:{self.cache_dir}")
            args += [f"--container-image={o.container_image}", f"--container-mounts={','.join(mounts)}"]
        return args

    # ------------------------------------------------------------------ the Executor protocol

    def submit(self, fn: Any, arg: object) -> SlurmHandle:
        h = SlurmHandle(fn, arg, job_key(fn, arg))
        entry = self._adopted.pop(h.key, None) if h.key else None
        if entry is not None and entry.cluster == self.options.cluster:
            self._attach(h, entry)
        else:
            prepare = getattr(fn, "prepare", None)
            if prepare is not None:  # the tree goes to the shared cache dir; jobs never read the user's repo
                prepare(arg)
            self._start(h)
        self._live.append(h)
        return h

    def wait_any(self, handles: Iterable[Handle], timeout: float | None = None) -> list[SlurmHandle]:
        pending = [own(h) for h in handles]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._poll([h for h in pending if not h.done()])
            done = [h for h in pending if h.done()]
            if done or not pending or (deadline is not None and time.monotonic() >= deadline):
                return done
            time.sleep(self.poll_s)

    def cancel(self, any_handle: Handle) -> bool:
        """scancel a job nobody needs; False when it already finished (its result is still good)."""
        handle = own(any_handle)
        if handle.done() or handle.cancelled or jobstate.read_result(self._paths(handle).result_pickle):
            return False
        self._kill(handle.job)
        self.joblist.mark(handle.job.job_id, EntryState.CANCELLED)
        handle.cancelled = True
        self.stats["cancelled"] += 1
        return True

    def close(self, cancel: bool = False) -> None:
        """``cancel``: scancel every job still in flight (Ctrl-C). Otherwise jobs still in flight
        stay in the job list for a rerun to reattach to."""
        outstanding = [h for h in self._live if not h.done() and not h.cancelled]
        if cancel and outstanding:
            finished = [h for h in outstanding if not self.cancel(h)]  # results nobody took: a rerun will
            self.say(f"cancelled {len(outstanding) - len(finished)} job(s) in flight")
            outstanding = finished
        if not outstanding:  # adopted jobs nobody asked for: nothing will read them
            for entry in self._adopted.values():
                if entry.state is EntryState.SUBMITTED:
                    self._kill(self._job_of(entry))
                    self.joblist.mark(entry.job_id, EntryState.CANCELLED)
            self._adopted.clear()
        self.joblist.close(keep=bool(outstanding))
        if not any(p.is_dir() and any(p.iterdir()) for p in self.run_dir.iterdir()):
            shutil.rmtree(self.run_dir, ignore_errors=True)  # no job ran (a usage error came first): no logs to keep

    def __enter__(self) -> SlurmExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(cancel=exc[0] is not None)

    # ------------------------------------------------------------------ jobs

    def _start(self, h: SlurmHandle, count: bool = True) -> None:
        from submitit.core.utils import FailedJobError, FailedSubmissionError

        local = self.options.cluster == "local"
        try:
            with jobstate.cancellable_children() if local else contextlib.nullcontext():
                job = self._ex.submit(JobCall(h.fn, h.arg))
        except (FailedJobError, FailedSubmissionError, OSError) as exc:
            raise EnvironmentProblem(f"job submission refused: {' '.join(str(exc).split())[:300]}") from None
        if local:  # a local job id is a pid: a reused one must not find an old result
            job.paths.result_pickle.unlink(missing_ok=True)
        h.attempt += 1
        h.job, h._ended_at = job, None
        self.joblist.put(
            JobEntry(
                h.key,
                h.label,
                str(job.job_id),
                str(self.run_dir / "%j"),
                self.options.cluster,
                h.attempt,
                now_utc(),
                EntryState.SUBMITTED,
            )
        )
        if count:
            self.stats["submitted"] += 1

    def _attach(self, h: SlurmHandle, entry: JobEntry) -> None:
        h.job, h.attempt = self._job_of(entry), entry.attempt
        self.stats["reattached"] += 1
        self.say(f"reattached to job {entry.job_id} ({entry.label}, submitted {entry.submitted_at})")

    def _job_of(self, entry: JobEntry) -> submitit.Job[object]:
        return self._ex._executor.job_class(folder=entry.folder, job_id=entry.job_id)

    def _paths(self, h: SlurmHandle) -> JobPaths:
        return h.job.paths

    def _kill(self, job: submitit.Job[object]) -> None:
        if self.options.cluster == "local" and getattr(job, "_process", None) is None:
            jobstate.cancel_local(str(job.job_id))  # reattached: submitit has no process to signal
            return
        with contextlib.suppress(OSError, ValueError):  # already gone
            job.cancel(check=False)

    def _states(self, handles: list[SlurmHandle]) -> dict[str, str] | None:
        if self.options.cluster == "local":
            return {h.job.job_id: jobstate.local_state(h.job) for h in handles}
        return jobstate.slurm_states([h.job.job_id for h in handles])

    def _poll(self, handles: list[SlurmHandle]) -> None:
        if not handles:
            return
        states = self._states(handles)
        for h in handles:
            found = jobstate.read_result(self._paths(h).result_pickle)
            if found is not None:
                self._finish(h, *found)
            elif states is not None:  # None: the scheduler did not answer; ask again next poll
                self._check_alive(h, states.get(h.job.job_id, jobstate.UNKNOWN))

    def _check_alive(self, h: SlurmHandle, state: str) -> None:
        if jobstate.is_active(state):
            h._ended_at = None
            return
        now = time.monotonic()
        h._ended_at = h._ended_at or now
        if now - h._ended_at >= self.options.result_grace_s or self.options.cluster == "local":
            self._fault(h, state, f"job {h.job.job_id} ({h.label}) left no result (scheduler state {state})")

    def _finish(self, h: SlurmHandle, outcome: str, payload: object) -> None:
        if outcome == "success" and isinstance(payload, JobFault):
            self._fault(h, "TIMEOUT", f"job {h.job.job_id} ({h.label}): {payload.reason}")
            return
        if outcome != "success" and "UncompletedJobError" in str(payload):  # time limit outside the call
            self._fault(
                h, "TIMEOUT", f"job {h.job.job_id} ({h.label}) was cut short: {str(payload).strip().splitlines()[-1]}"
            )
            return
        h.logs.append(self._log(h, "COMPLETED" if outcome == "success" else "FAILED"))
        h.finished = time.monotonic()
        self.joblist.mark(h.job.job_id, EntryState.CONSUMED)
        if outcome == "success":
            h.value = self._with_jobs(h, payload)
            return
        trace = str(payload).strip().splitlines()
        self.say(f"job {h.job.job_id} ({h.label}) raised; last lines:\n" + indent("\n".join(trace[-15:])))
        h.error = (
            f"job {h.job.job_id} ({h.label}) raised {trace[-1] if trace else 'an error'}; log: {self._paths(h).stderr}"
        )

    def _with_jobs(self, h: SlurmHandle, payload: object) -> object:
        if not isinstance(payload, EvalOutcome):
            return payload
        self.overheads.append((h.finished or time.monotonic()) - h.started - payload.duration_s)
        return dataclasses.replace(payload, jobs=[*payload.jobs, *h.logs])

    def _fault(self, h: SlurmHandle, state: str, reason: str) -> None:
        """The cluster lost the job: show its log tail, then retry it or give up (infrastructure)."""
        paths = self._paths(h)
        h.logs.append(self._log(h, state))
        h.faults.append(reason)
        self.joblist.mark(h.job.job_id, EntryState.FAULT)
        self._kill(h.job)  # a held or half-dead job must not come back later
        tail = jobstate.log_tail([paths.stderr, paths.stdout])
        self.say(reason + (f"; last lines of its log:\n{indent(tail)}" if tail else f" (no log at {paths.stderr})"))
        if h.attempt <= self.options.job_retries:
            self.stats["retried"] += 1
            self.say(f"resubmitting {h.label} (attempt {h.attempt + 1} of {1 + self.options.job_retries})")
            self._start(h, count=False)
            return
        self.stats["infrastructure"] += 1
        h.finished = time.monotonic()
        h.value = EvalOutcome(
            {},
            duration_s=h.finished - h.started,
            infrastructure=True,
            jobs=list(h.logs),
            note="infrastructure: " + "; ".join(h.faults),
        )

    def _log(self, h: SlurmHandle, state: str) -> JobLog:
        paths = self._paths(h)
        return JobLog(str(h.job.job_id), self.options.cluster, str(paths.stdout), str(paths.stderr), h.attempt, state)
