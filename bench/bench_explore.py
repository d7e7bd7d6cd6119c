"""What exploration and the parallel layouts cost (issue 25), as ratios measured in one run.

Not a test (about 4 minutes on 2 cores). Two figures:

* **examples per minute** of ``harness explore``, per space: the light path (``--space data``),
  the drawn layouts (``--space layouts``, ``--layout-small``/``--layout-large``), the direct HF
  SFT path (``--space direct``, ``--direct-small``/``--direct-large``), pretraining samples
  (``--space pretrain``, ``--pretrain-small``/``--pretrain-large``), Energon VLM samples
  (``--space energon``, ``--energon-small``/``--energon-large``) and MIMO samples
  (``--space mimo``, ``--mimo-small``/``--mimo-large``) and whole packing configurations
  (``--space config``, ``--config-small``/``--config-large``): two runs
  of the explore suite per space with a small and a large budget (same seed), so the suite
  process's start-up cancels out: ``(large - small) / (wall_large - wall_small)`` examples a
  second, times 60;
* **CP = 2 forward over CP = 1 forward** of the same case: MB's ``gpt_step`` on every packed
  micro-batch of the case at CP = 1 (warm: the case built and the model made before the clock
  starts), then the same at CP = 2 in a forked gloo world (:func:`suites._layouts.rank_model`
  and :func:`~suites._layouts.rank_steps`, what :func:`~suites._layouts.run_cp` runs on each
  rank). Goal: at most 3x, held to ``forward_ratio``: MB's steps on the slower CP rank (timed
  inside the rank) over the same steps at CP 1. The fixed costs of a CP case are reported
  apart, never hidden: the world's start (fork, gloo, MCore's groups: an empty world timed in
  the same run), each rank's model build (the CP 1 model is built once per process and
  reused), and the results sent back. ``ratio`` is the CP 2 case without the world's start over
  the CP 1 steps, ``ratio_with_model`` the same over CP 1's steps plus its model build,
  ``ratio_with_start`` all of it.

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
    from harness.suite.standins import te

    te.install()
    from harness.suite.adapters import forward as fwd
    from harness.suite.adapters import step
    from harness.suite.adapters.world import Layout, run_world
    from suites import _forward, _layouts, _sftcases

    case = {c.id: c for c in _sftcases.CASES}[case_id]
    built = _sftcases.built(case)
    batches = list(built.batches)
    gpt, _ = _forward.models()
    [step.gpt_step(gpt, b) for b in batches]  # warm

    def timed_rank(_rank: int) -> tuple[float, float]:
        t0 = time.monotonic()
        groups, model = _layouts.rank_model()
        t1 = time.monotonic()
        _layouts.rank_steps(groups, model, batches)
        return t1 - t0, time.monotonic() - t1

    cp1 = cp1_build = cp2 = empty = cp2_build = cp2_steps = 1e9
    for _ in range(repeats):
        t0 = time.monotonic()
        fwd.tiny_gpt(seed=_forward.SEED, vocab_size=_forward.MODEL_VOCAB)
        cp1_build = min(cp1_build, time.monotonic() - t0)
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
        ranks = run_world(Layout(cp=2), timed_rank)  # the ranks run at once: the slower one counts
        cp2_build = min(cp2_build, max(b for b, _ in ranks))
        cp2_steps = min(cp2_steps, max(s for _, s in ranks))
    return {
        "micro_batches": len(batches),
        "cp1_s": round(cp1, 3),
        "cp2_s": round(cp2, 3),
        "world_start_s": round(empty, 3),  # fork, gloo, MCore's groups: once per case, whatever its size
        "cp1_model_build_s": round(cp1_build, 3),
        "cp2_model_build_s": round(cp2_build, 3),  # per rank, in the world (slowest rank)
        "cp2_steps_s": round(cp2_steps, 3),  # MB's forward steps on each rank (slowest rank)
        "ratio_with_start": round(cp2 / cp1, 2),
        # the CP = 2 case without the world's start (model built, steps, gathers, results sent back)
        "ratio": round((cp2 - empty) / cp1, 2),
        # forward against forward: MB's steps on the slowest CP rank over the same steps at CP 1
        "forward_ratio": round(cp2_steps / cp1, 2),
        # the case with its model on both sides: CP 1 build + steps vs CP 2 without the world's start
        "ratio_with_model": round((cp2 - empty) / (cp1 + cp1_build), 2),
    }


# space -> (option prefix, default small and large budgets, the result's key, its examples-per-minute key)
SPACES = {
    "data": ("", 4, 104, "explore", "examples_per_minute"),
    "layouts": ("layout-", 3, 23, "layouts", "layout_examples_per_minute"),
    "direct": ("direct-", 3, 203, "direct", "direct_examples_per_minute"),
    "pretrain": ("pretrain-", 3, 103, "pretrain", "pretrain_examples_per_minute"),
    "energon": ("energon-", 3, 23, "energon", "energon_examples_per_minute"),
    "mimo": ("mimo-", 3, 43, "mimo", "mimo_examples_per_minute"),
    "config": ("config-", 100, 1100, "config", "config_examples_per_minute"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for prefix, small, large, _, _ in SPACES.values():
        ap.add_argument(f"--{prefix}small", type=int, default=small)
        ap.add_argument(f"--{prefix}large", type=int, default=large)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--case", default="prompt-mult4")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    result: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bench-explore-") as tmp:
        for space, (prefix, _, _, key, rate_key) in SPACES.items():
            n_small, n_large = (getattr(args, f"{prefix}{size}".replace("-", "_")) for size in ("small", "large"))
            small, large = (_explore_wall(n, args.seed, Path(tmp), space) for n in (n_small, n_large))
            result[key] = {
                "small": n_small,
                "large": n_large,
                "wall_small_s": round(small, 1),
                "wall_large_s": round(large, 1),
            }
            result[rate_key] = round(60.0 * (n_large - n_small) / max(1e-6, large - small), 1)
    cp = _cp_ratio(args.case, args.repeats)
    result["cp_forward"] = {"case": args.case, **cp, "goal_ratio": 3.0, "met": cp["forward_ratio"] <= 3.0}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
