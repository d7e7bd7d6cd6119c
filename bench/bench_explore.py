"""What exploration and the parallel layouts cost (issue 25), as ratios measured in one run.

Not a test (about 2 minutes on 2 cores). Two figures:

* **examples per minute** of ``harness explore``, per space: the light path (``--space data``)
  and the drawn layouts (``--space layouts``, ``--layout-small``/``--layout-large``): two runs
  of the explore suite per space with a small and a large budget (same seed), so the suite
  process's start-up cancels out: ``(large - small) / (wall_large - wall_small)`` examples a
  second, times 60;
* **CP = 2 forward over CP = 1 forward** of the same case, in one process: MB's ``gpt_step`` on
  every packed micro-batch of the case at CP = 1, then the same at CP = 2 in a forked gloo world
  (:func:`suites._layouts.run_cp`, which runs both; the CP = 1 part is timed apart), warm
  (the case built and the model made before the clock starts). Goal: at most 3x. The world's
  start (fork, gloo, MCore's groups; an empty world timed in the same run) is a fixed cost per
  case and is reported apart: ``ratio`` is the forward in the world, ``ratio_with_start`` all of it.

    .venv/bin/python bench/bench_explore.py [--small 4] [--large 24] [--case prompt-mult4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _explore_wall(budget: int, seed: int, work: Path, space: str) -> float:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    cmd = [sys.executable, "-m", "harness", "explore", "--space", space, "--budget", str(budget), "--seed", str(seed)]
    cmd += ["-q", "--out", str(work / f"out-{space}-{budget}")]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean, cwd=work, timeout=3600)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"harness explore --budget {budget} failed ({proc.returncode}): {proc.stderr[-500:]}")
    return wall


def _cp_ratio(case_id: str, repeats: int) -> dict[str, float]:
    from harness.standins import te

    te.install()
    from harness.adapters import step
    from harness.adapters.world import Layout, run_world
    from suites import _forward, _layouts, _oracle

    case = {c.id: c for c in _oracle.CASES}[case_id]
    built = _oracle.built(case)
    gpt, _ = _forward.models()
    batches = list(built.batches)
    [step.gpt_step(gpt, b) for b in batches]  # warm
    cp1 = cp2 = empty = 1e9
    for _ in range(repeats):
        t0 = time.monotonic()
        for b in batches:
            step.gpt_step(gpt, b)
        cp1 = min(cp1, time.monotonic() - t0)
        t0 = time.monotonic()
        run_world(Layout(cp=2), _layouts._rank_runs(batches))
        cp2 = min(cp2, time.monotonic() - t0)
        t0 = time.monotonic()
        run_world(Layout(cp=2), lambda _rank: None)
        empty = min(empty, time.monotonic() - t0)
    return {
        "micro_batches": len(batches),
        "cp1_s": round(cp1, 3),
        "cp2_s": round(cp2, 3),
        "world_start_s": round(empty, 3),  # fork, gloo, MCore's groups: once per case, whatever its size
        "ratio_with_start": round(cp2 / cp1, 2),
        "ratio": round((cp2 - empty) / cp1, 2),  # the CP = 2 forward itself (model built, steps, gathers)
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=4)
    ap.add_argument("--large", type=int, default=104)
    ap.add_argument("--layout-small", type=int, default=3)
    ap.add_argument("--layout-large", type=int, default=23)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--case", default="prompt-mult4")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-explore-") as tmp:
        work = Path(tmp)
        small, large = (_explore_wall(n, args.seed, work, "data") for n in (args.small, args.large))
        lsmall, llarge = (_explore_wall(n, args.seed, work, "layouts") for n in (args.layout_small, args.layout_large))
    per_minute = 60.0 * (args.large - args.small) / max(1e-6, large - small)
    layouts_per_minute = 60.0 * (args.layout_large - args.layout_small) / max(1e-6, llarge - lsmall)
    cp = _cp_ratio(args.case, args.repeats)
    result = {
        "explore": {
            "small": args.small,
            "large": args.large,
            "wall_small_s": round(small, 1),
            "wall_large_s": round(large, 1),
        },
        "examples_per_minute": round(per_minute, 1),
        "layouts": {
            "small": args.layout_small,
            "large": args.layout_large,
            "wall_small_s": round(lsmall, 1),
            "wall_large_s": round(llarge, 1),
        },
        "layout_examples_per_minute": round(layouts_per_minute, 1),
        "cp_forward": {"case": args.case, **cp, "goal_ratio": 3.0, "met": cp["ratio"] <= 3.0},
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
