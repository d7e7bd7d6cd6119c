"""Wall time of the packing-module cases with light vs full import of MB, side by side.

Runs the suites packing_algorithms, packed_seq_params and in_batch_packing through
``harness.suiterun.runner.run_suites`` twice per round against the same MB: ``--import light`` (package
``__init__`` files of megatron.bridge skipped) and ``--import full``, and prints both wall times
and their ratio, plus the light import through the warm fork server (``harness.suiterun.forkserver``),
which is how ``harness bisect`` evaluates a commit (target: under 1/3 of full). Every case must
have the same verdict in every mode.

    .venv/bin/python bench/bench_light_import.py [--mb-src DIR] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.suiterun import runner
from harness.target import Target

SUITES = ["packing_algorithms", "packed_seq_params", "in_batch_packing"]


def one(tgt: Target, mode: str) -> tuple[float, dict[str, str]]:
    """One evaluation; mode "forked" = light import through the (already warm) fork server, as a bisect runs it."""
    forked = mode == "forked"
    with tempfile.TemporaryDirectory(prefix=f"bench-light-{mode}-") as d:
        t0 = time.monotonic()
        opts = runner.RunOptions(
            suites=SUITES, import_mode="light" if forked else mode, fork_servers=2 if forked else 0
        )
        res = runner.run_suites(tgt, opts, Path(d) / "run", progress=None)
        wall = time.monotonic() - t0
    return wall, {c.case_id: c.verdict.value for c in res.cases}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb-src", help="MB source tree (default: the installed MB)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    tgt = Target.from_args(args.mb_src)
    light, full, forked = [], [], []
    one(tgt, "forked")  # start the fork server once (a bisect pays this once, not per commit)
    for r in range(args.rounds):
        for mode, acc in (("light", light), ("full", full), ("forked", forked)):
            wall, verdicts = one(tgt, mode)
            acc.append((wall, verdicts))
            counts = {v: list(verdicts.values()).count(v) for v in sorted(set(verdicts.values()))}
            print(f"round {r + 1} {mode:<5} {wall:7.1f} s  {counts}", flush=True)
    mismatch = {k for k, v in light[-1][1].items() if full[-1][1].get(k) != v or forked[-1][1].get(k) != v}
    lt, ft = statistics.median(w for w, _ in light), statistics.median(w for w, _ in full)
    kt = statistics.median(w for w, _ in forked)
    print(f"\nsuites: {', '.join(SUITES)} ({len(light[-1][1])} cases)")
    print(f"light import  median {lt:6.1f} s\nfull import   median {ft:6.1f} s\nratio light/full = {lt / ft:.2f}")
    print(
        f"light import through the warm fork server (how bisect evaluates a commit) median {kt:6.1f} s\n"
        f"ratio forked/full = {kt / ft:.2f} (target < 0.33: {'met' if kt / ft < 1 / 3 else 'NOT met'})"
    )
    if mismatch:
        print(f"verdicts differ between modes for {sorted(mismatch)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
