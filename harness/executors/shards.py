"""Suite runs as cluster jobs: ``harness run``/``nightly`` shard by suite, ``matrix`` by ref.

Each job calls :func:`harness.suiterun.runner.run_suites` exactly as a local run does, for one suite
(or one MB ref), with its output under the run's directory; the driver merges the
:class:`~harness.records.results.RunResult` records. A job the cluster lost past its retries becomes
an ERROR case ``<suite>::(job lost)`` with the reason and the job's logs: an error of the
harness's machinery, never a verdict on MB. Every job's id and log paths go into the merged
result's notes, so the run report shows where to look.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from harness.executors.local import Handle, JobLog, schedule
from harness.executors.outcome import EvalOutcome
from harness.executors.slurm import SlurmExecutor
from harness.executors.slurmjob import SlurmHandle
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.suiterun import runner
from harness.suiterun.origin import of_run
from harness.target import Target

LOST = "(job lost)"  # the case name of a suite whose job the cluster lost


@dataclass(frozen=True)
class SuiteShard:
    """One suite of the target, in a job, written under ``shards_dir/<suite>``."""

    target: Target
    opts: runner.RunOptions
    shards_dir: Path

    def __call__(self, suite: str) -> RunResult:
        opts = dataclasses.replace(self.opts, suites=[suite], jobs=1)
        return runner.run_suites(self.target, opts, self.shards_dir / suite, progress=None)


@dataclass(frozen=True)
class RefRun:
    """The suites on one exported MB ref, in a job: the argument is (target, out dir); the target
    carries the ref's pinned megatron-core when the matrix runs with ``--megatron-lm``."""

    opts: runner.RunOptions

    def __call__(self, item: tuple[Target, str]) -> RunResult:
        tgt, out = item
        return runner.run_suites(tgt, self.opts, Path(out), progress=None)


def run_jobs(
    executor: SlurmExecutor, fn: object, items: Sequence[Any]
) -> dict[int, tuple[RunResult | EvalOutcome, list[JobLog]]]:
    """``fn(item)`` for every item, ``executor.slots`` jobs in flight; index -> (result or the
    infrastructure outcome of a lost job, the jobs that ran it)."""
    queue = list(enumerate(items))
    done: dict[int, tuple[RunResult | EvalOutcome, list[JobLog]]] = {}

    def refill(free: int) -> list[tuple[int, Any]]:
        taken = queue[:free]
        del queue[:free]
        return taken

    def finished(item: tuple[int, Any], handle: Handle) -> None:
        assert isinstance(handle, SlurmHandle)
        done[item[0]] = (handle.result(), list(handle.logs))

    schedule(executor, lambda item: executor.submit(fn, item[1]), refill, finished)
    return done


def lost_case(name: str, suite: str, outcome: EvalOutcome, logs: Iterable[JobLog]) -> CaseResult:
    return CaseResult(
        f"{name}::{LOST}",
        suite,
        Verdict.ERROR,
        message=f"{outcome.note} (not a verdict on Megatron-Bridge); {describe(logs)}",
    )


def describe(logs: Iterable[JobLog]) -> str:
    return "; ".join(f"{j.cluster} job {j.job_id} attempt {j.attempt} {j.state}: {j.stdout} {j.stderr}" for j in logs)


def run_suites_with(
    executor: SlurmExecutor | None, tgt: Target, opts: runner.RunOptions, out_dir: Path, progress: TextIO | None
) -> RunResult:
    """:func:`harness.suiterun.runner.run_suites` here (no executor), or one job per suite (the executor is
    closed afterwards; an exception or Ctrl-C cancels the jobs in flight)."""
    if executor is None:
        return runner.run_suites(tgt, opts, out_dir, progress=progress)
    with executor:
        return run_sharded(tgt, opts, out_dir, executor)


def run_sharded(tgt: Target, opts: runner.RunOptions, out_dir: Path, executor: SlurmExecutor) -> RunResult:
    """The selected suites, one job each, merged into one result saved as ``out_dir/results.json``."""
    suites = list(opts.suites or runner.golden_suites())
    runner.suite_files(suites)  # unknown names: a usage error before any job
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    executor.check_shared(also=[out_dir])
    done = run_jobs(executor, SuiteShard(tgt, opts, out_dir / "shards"), suites)
    merged = merge(suites, [done[i] for i in range(len(suites))], tgt, out_dir.name, started)
    merged.duration_s = round(time.monotonic() - t0, 2)
    merged.save(out_dir / "results.json")
    return merged


def merge(
    suites: Sequence[str],
    done: Sequence[tuple[RunResult | EvalOutcome, list[JobLog]]],
    tgt: Target,
    run_id: str,
    started: str,
) -> RunResult:
    """One result from the suites' jobs, in suite order; a lost job is an ERROR case of its suite."""
    cases: list[CaseResult] = []
    notes: list[str] = []
    runs: list[RunResult] = []
    for suite, (result, logs) in zip(suites, done):
        if isinstance(result, RunResult):
            runs.append(result)
            cases += result.cases
            notes += [f"[{suite}] {n}" for n in result.notes]
            notes.append(f"[{suite}] ran as {describe(logs)}")
        else:
            cases.append(lost_case(suite, suite, result, logs))
    first = runs[0] if runs else None
    return runner.build_result(  # what the jobs ran, as they recorded it
        Path(run_id),
        tgt,
        cases,
        notes,
        import_mode="; ".join(sorted({r.import_mode for r in runs})) or "none (every job lost)",
        started=started,
        target=first.target if first else {"src": str(tgt.src) if tgt.src else None},
        versions=first.versions if first else {},
        machine=first.machine if first else Machine(),
        standins=sorted({s for r in runs for s in r.standins}),
        provenance=first.provenance if first else of_run(tgt),
    )
