"""`harness run`'s wall time against a baseline commit of the harness, measured in one script.

Why: issue 48 added the data's whole life (splits, epochs, re-preparation, caps) to the default
suites and asked that a run stay within 1.5x of its wall time before. A timed test would measure
the machine; a ratio of two runs on the same machine, interleaved, measures the harness.

The baseline is a detached ``git worktree`` of ``--base`` (default: the commit before issue 48's
first; the user's checkout is never touched), run with this environment's Python and MB, the
same ``-j`` and a fresh output folder each time. Runs alternate (baseline, head, baseline, ...)
so that a drift of the machine falls on both alike. Prints each wall time, the medians and their
ratio; exit 1 when the ratio passes ``--goal``.

    .venv/bin/python bench/bench_run_wall.py [--base REV] [--repeat N] [-j N] [--goal 1.5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = "b8d43a4"  # the harness before issue 48's first commit (5d9f1dd)


def _run(tree: Path, jobs: int, work: Path) -> float:
    out = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "-j", str(jobs), "-q", "--out", str(out)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: a red case (a known bug, a defect) still timed a whole run
        raise SystemExit(f"harness run in {tree} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=BASE, help="the baseline commit of the harness")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each (interleaved)")
    ap.add_argument("-j", type=int, default=2, dest="jobs")
    ap.add_argument("--goal", type=float, default=1.5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-run-wall-"))
    base_tree = work / "base"
    subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), args.base], cwd=ROOT, check=True)
    try:
        times: dict[str, list[float]] = {"base": [], "head": []}
        for i in range(args.repeat):
            for name, tree in (("base", base_tree), ("head", ROOT)):
                took = _run(tree, args.jobs, work)
                times[name].append(took)
                print(f"run {i + 1} {name}: {took:.1f} s", flush=True)
        base, head = statistics.median(times["base"]), statistics.median(times["head"])
        ratio = head / base
        print(f"median base ({args.base}) {base:.1f} s, head {head:.1f} s: ratio {ratio:.2f} (goal <= {args.goal})")
        return 0 if ratio <= args.goal else 1
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
