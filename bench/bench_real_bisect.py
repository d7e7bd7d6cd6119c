"""Benchmark: a long real bisection against its information limit, at ``-j 1`` and ``-j 2``.

Not a test (tens of minutes on 2 cores). Issue 47's figure: ``harness bisect GOOD..BAD`` over a
real range of MB's history (every commit, not only first parents) with the Megatron-LM each
commit pins, every default suite, from a cold cache (verdicts and pinned Megatron-LM trees) per
run. For each ``-j`` it prints the evaluations against the information limit (the sum over the
bisection's targets of ceil(log2 of the target's range), the targets being the cases the
probes could not tell apart), the cases that start late and at how many commits,
the rounds (parallel evaluation steps), the wall time and the culprits, which must be the same
commits at every ``-j``.

    HARNESS_MB_MIRROR=... HARNESS_MLM_MIRROR=... .venv/bin/python bench/bench_real_bisect.py \\
        [--range 5e4313cfe..4e085c1e4^] [--jobs 1 --jobs 2] [--work DIR]

The repositories are only read; each run writes under ``--work``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HARNESS = [sys.executable, "-m", "harness"]
DEFAULT_RANGE = "5e4313cfe..4e085c1e4^"  # 2,085 commits: issue 47's measured range


def information_limit(doc: dict) -> tuple[int, int]:
    """(targets, the information limit): the two endpoints plus, per target, ceil(log2) of the
    commits its culprit could be. A target is the found cases with one culprit and one start (GOOD,
    or the commit a late-starting case runs from): the probes could not tell them apart."""
    order = {c["sha"]: i for i, c in enumerate(doc["commits"])}
    starts = {s["case_id"]: s.get("runs_from") or "" for s in doc.get("late_starts") or []}
    groups = {(c["culprit"]["sha"], starts.get(c["case_id"], "")) for c in doc["cases"] if c.get("culprit")}
    n = len(order)
    bits = 0
    for _, start in groups:
        left = n - order.get(start, -1) - 1 if start else n
        bits += math.ceil(math.log2(max(2, left)))
    return len(groups), 2 + bits


def run_once(args: argparse.Namespace, jobs: int) -> dict:
    work = args.work / f"j{jobs}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.case_times is not None:  # a user who ran the suites before: the endpoints are cut by those times
        (work / "cache").mkdir()
        shutil.copy(args.case_times, work / "cache" / "case-times.json")
    cmd = [*HARNESS, "bisect", args.range, "--repo", str(args.mb_repo), "--megatron-lm", str(args.megatron_lm)]
    cmd += ["-j", str(jobs), "--cache-dir", str(work / "cache"), "--out", str(work / "out"), "--allow-dirty", "-q"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    (work / "log.txt").write_text(proc.stdout + proc.stderr)
    record = work / "out" / "bisect.json"
    if not record.exists():
        raise SystemExit(f"-j {jobs}: no bisect.json (rc {proc.returncode}); see {work / 'log.txt'}")
    doc = json.loads(record.read_text())
    found = [c for c in doc["cases"] if c["status"] == "found"]
    targets, limit = information_limit(doc)
    return {
        "jobs": jobs,
        "evaluations": int(doc.get("evaluations") or 0),
        "late_starts": len(doc.get("late_starts") or []),
        "late_start_commits": len({s.get("runs_from") for s in doc.get("late_starts") or [] if s.get("runs_from")}),
        "rounds": int(doc.get("rounds") or 0),
        "targets": targets,
        "limit": limit,
        "wall_s": round(wall, 1),
        "culprits": sorted({c["culprit"]["sha"][:10] for c in found if c.get("culprit")}),
        "endpoint_parts_s": _endpoint_parts(doc),
        "found": len(found),
        "rc": proc.returncode,
    }


def _endpoint_parts(doc: dict) -> str:
    """Seconds of each endpoint's evaluations (its parts at -j N), GOOD first: "33+15, 105+62"."""
    good, bad = doc["range"]["good"], doc["range"]["bad"]
    costs = doc.get("probe_costs") or {}
    return ", ".join(
        "+".join(f"{c['seconds']:.0f}" for c in costs.get(sha, []) if c.get("endpoint")) or "-" for sha in (good, bad)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb-repo", type=Path, default=os.environ.get("HARNESS_MB_MIRROR"))
    ap.add_argument("--megatron-lm", type=Path, default=os.environ.get("HARNESS_MLM_MIRROR"))
    ap.add_argument("--range", default=DEFAULT_RANGE)
    ap.add_argument("--jobs", type=int, action="append", help="default: 1 and 2")
    ap.add_argument("--work", type=Path, default=Path("/tmp/harness-bench-real-bisect"))
    ap.add_argument(
        "--case-times",
        type=Path,
        help="a case-times.json a run left in its cache directory, copied into each run's cold cache "
        "(the endpoints are then cut by those times; without it they are cut blind)",
    )
    args = ap.parse_args()
    if not args.mb_repo or not args.megatron_lm:
        print("needs --mb-repo and --megatron-lm (or HARNESS_MB_MIRROR / HARNESS_MLM_MIRROR)", file=sys.stderr)
        return 2
    rows = [run_once(args, j) for j in (args.jobs or [1, 2])]
    print(f"range {args.range}")
    print(
        "| -j | evaluations | limit | ratio | late starts (commits) | targets | rounds | wall s "
        "| endpoints s (GOOD, BAD) | culprits |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['evaluations'] / r['limit']:.2f}" if r["limit"] else "-"
        print(
            f"| {r['jobs']} | {r['evaluations']} | {r['limit']} | {ratio} "
            f"| {r['late_starts']} ({r['late_start_commits']}) | {r['targets']} "
            f"| {r['rounds']} | {r['wall_s']} | {r['endpoint_parts_s']} | {' '.join(r['culprits'])} |"
        )
    same = len({tuple(r["culprits"]) for r in rows}) == 1
    print("culprits agree across -j" if same else "CULPRITS DIFFER across -j")
    (args.work / "summary.json").write_text(json.dumps(rows, indent=2))
    return 0 if same and all(r["rc"] in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
