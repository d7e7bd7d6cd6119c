"""Benchmark of the SLURM executor's overhead: submitit jobs vs the local thread pool (not a test).

The same generated history as bench/bench_bisect.py (4,096 commits of a tiny fake package,
two injected faults, built with ``git fast-import``) and the same evaluator (materialise,
run the fake package's pytest check), bisected with the local pool and with
:class:`harness.executors.slurm.SlurmExecutor` in submitit's local mode (``cluster="local"``:
every evaluation a real job, i.e. a pickled call, a controller and a job process, a result
file, polled by the driver), each with 1, 4 and 8 slots. On a cluster the same path is taken
through sbatch, plus queueing.

Printed side by side: evaluations, rounds, wall time, and per evaluation the time ``submit``
blocks the driver and the overhead (the driver's wall time for the evaluation minus the time
the evaluator itself took). Ratios are against the local pool with the same slots, measured
in the same run.

    .venv/bin/python bench/bench_slurm.py [--commits 4096] [--slots 1 4 8] [--seed 11]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]
# jobs are separate processes: they import this module (the evaluator) and bench_bisect
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])])

from bench_bisect import FakeEvaluator, make_history  # noqa: E402

from harness.bisect.driver import BisectOptions, run_bisection  # noqa: E402
from harness.executors.local import Executor, LocalExecutor  # noqa: E402
from harness.executors.options import SlurmOptions  # noqa: E402
from harness.executors.slurm import SlurmExecutor  # noqa: E402
from harness.repository.gitrepo import open_repo  # noqa: E402
from harness.repository.workspaces import WorkspaceCache, workspace_dir_for  # noqa: E402


@dataclass(frozen=True)
class PreparedFakeEvaluator(FakeEvaluator):
    """bench_bisect's evaluator, materialised by the driver before submitting (as MB's is)."""

    def prepare(self, sha: str) -> None:
        WorkspaceCache(self.workspace_dir, self.repo).materialize(sha)


class Timed:
    """Wraps an executor: how long ``submit`` blocks, and each evaluation's driver-side wall time."""

    def __init__(self, inner: Executor) -> None:
        self.inner, self.slots = inner, inner.slots
        self.submit_s: list[float] = []
        self.overhead_s: list[float] = []
        self._started: dict[Any, float] = {}

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        t0 = time.monotonic()
        handle = self.inner.submit(fn, arg)
        self.submit_s.append(time.monotonic() - t0)
        self._started[handle] = t0
        return handle

    def wait_any(self, handles: Any, timeout: float | None = None) -> list[Any]:
        done = self.inner.wait_any(handles, timeout)
        now = time.monotonic()
        for h in done:
            if h in self._started:
                self.overhead_s.append(now - self._started.pop(h) - h.result().duration_s)
        return done

    def cancel(self, handle: Any) -> bool:
        self._started.pop(handle, None)
        return self.inner.cancel(handle)

    def close(self, cancel: bool = False) -> None:
        self.inner.close(cancel)

    def bind(self, evaluator: Any) -> Any:
        bind = getattr(self.inner, "bind", None)
        return bind(evaluator) if bind else evaluator


def bisect(repo: Path, shas: list[str], work: Path, name: str, make: Callable[[Path], Executor]) -> dict[str, Any]:
    cache = work / f"cache-{name}"
    ev = PreparedFakeEvaluator(repo, workspace_dir_for(cache, open_repo(repo)))
    executor = Timed(make(cache))
    t0 = time.monotonic()
    try:
        run = run_bisection(
            BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=cache, jobs=executor.slots),
            evaluator=ev,
            executor=executor,
            progress=None,
        )
    finally:
        executor.close()
    wall = time.monotonic() - t0
    found = {c.case_id: c.culprit.sha if c.culprit else None for c in run.doc.cases}
    return {
        "found": found,
        "evals": run.doc.evaluations,
        "rounds": run.doc.rounds,
        "wall": wall,
        "cancelled": len(run.doc.cancelled),
        "submit_ms": 1000 * statistics.fmean(executor.submit_s),
        "overhead_s": statistics.fmean(executor.overhead_s),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=4096)
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        work = Path(tmp)
        fault_at = sorted(rng.sample(range(1, args.commits), 2))
        shas = make_history(work / "repo", args.commits, fault_at)
        expect = {f"calc::test_{name}": shas[at] for name, at in zip(("add", "mul"), fault_at)}
        print(f"history: {args.commits} commits, faults at {fault_at}", file=sys.stderr)
        for slots in args.slots:
            pool = bisect(work / "repo", shas, work, f"pool-{slots}", lambda _c, s=slots: LocalExecutor(s))
            jobs = bisect(
                work / "repo",
                shas,
                work,
                f"jobs-{slots}",
                lambda c, s=slots: SlurmExecutor(c, s, SlurmOptions(cluster="local", time_min=30), progress=None),
            )
            for side in (pool, jobs):
                assert side["found"] == expect, f"{slots} slots: found {side['found']}, expected {expect}"
            rows.append((slots, pool, jobs))
            print(f"done: {slots} slot(s)", file=sys.stderr)
    head = (
        f"{'slots':>5} | {'executor':<16} {'evals':>5} {'rounds':>6} {'cancelled':>9} {'wall s':>7} "
        f"{'submit ms/eval':>14} {'overhead s/eval':>15} | {'wall vs pool':>12}"
    )
    print(head)
    print("-" * len(head))
    for slots, pool, jobs in rows:
        for name, r in (("local pool", pool), ("submitit jobs", jobs)):
            ratio = r["wall"] / pool["wall"]
            print(
                f"{slots:>5} | {name:<16} {r['evals']:>5} {r['rounds']:>6} {r['cancelled']:>9} {r['wall']:>7.1f} "
                f"{r['submit_ms']:>14.1f} {r['overhead_s']:>15.2f} | {ratio:>11.2f}x"
            )
    print(
        "\nevals include the 2 endpoints; rounds = longest chain of dependent evaluations; cancelled = in-flight "
        "evaluations a newer result made moot (jobs are cancelled, pool threads cannot be); overhead = the "
        "driver's wall time per evaluation minus the evaluator's own time (process start, pickles, polling)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
