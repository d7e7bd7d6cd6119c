"""Benchmark: ``harness bisect`` over a long real range of MB's first-parent history, beside
``git bisect run`` driving MB's own packing tests on the same range (not a test; minutes).

Issue 11's performance goal: on a 2,000-commit ``--first-parent`` range with ``--megatron-lm``,
evaluations <= ceil(log2 N) + 2 when no commit is skipped, and under 10 minutes on 2 cores for
the light cases. The range ends at ``--bad`` (default MB's main) and starts ``--n`` first-parent
commits earlier; the case selection (``--suite``/``-k``) names the behaviour to bisect. Where the
selected case cannot run at GOOD (a feature younger than GOOD), the harness starts from the
oldest commit where it runs (issue 11 item 4) and says so; those evaluations are counted too.

Beside it, plain ``git bisect run`` in a throwaway clone (sparse: ``src/`` and ``tests/``, the
mirror lacks some docs blobs) with a step script that runs MB's own packing tests (the
``upstream`` suite: the tests MB's packing guidance names, at that commit, with the megatron-core
the commit pins): exit 0 when they pass, 1 when one fails, 125 (skip) when none can run. It is
run only when those tests fail at BAD: otherwise ``git bisect run`` has no failure to look for,
and that is the line printed.

The user's repositories are only read. A fresh ``--work`` directory gives a cold verdict cache;
pinned megatron-core trees are shared from ``--core-cache`` (default the work dir: cold too).

    .venv/bin/python bench/bench_long_range.py [--bad REF] [--n 2000] [--suite S] [-k EXPR]
        [--work DIR] [--no-git-bisect] [--git-bisect-budget S]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_history import HARNESS, git

DEFAULT_K = "test_offline_gpt_step and clean-prompt-mult4"


def upstream_verdicts(tree: Path, mlm: Path, cache: Path, out: Path) -> dict[str, str]:
    """case id -> verdict of MB's own packing tests (the ``upstream`` suite) in ``tree``."""
    cmd = [*HARNESS, "run", "--mb-src", str(tree), "--megatron-lm", str(mlm), "--cache-dir", str(cache)]
    cmd += ["--suite", "upstream", "--out", str(out), "-q"]
    subprocess.run(cmd, capture_output=True, text=True)
    results = out / "results.json"
    if not results.exists():
        return {}
    return {c["case_id"]: c["verdict"] for c in json.loads(results.read_text())["cases"]}


def step_code(verdicts: dict[str, str]) -> int:
    """``git bisect run``'s answer: 1 when a test fails, 0 when some pass, 125 when none ran."""
    if any(v in ("fail", "error") for v in verdicts.values()):
        return 1
    return 0 if any(v == "pass" for v in verdicts.values()) else 125


def step(args: argparse.Namespace) -> int:
    """One ``git bisect run`` step (this script re-invoked with ``--step``), in the clone's cwd."""
    here = Path.cwd()
    sha = git(here, "rev-parse", "HEAD").strip()
    out = Path(args.work) / "git-bisect-runs" / sha[:12]
    shutil.rmtree(out, ignore_errors=True)
    verdicts = upstream_verdicts(here, Path(args.megatron_lm), Path(args.core_cache), out)
    return step_code(verdicts)


def sparse_clone(mirror: Path, where: Path, sha: str) -> Path:
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(mirror), str(where)], check=True)
    git(where, "sparse-checkout", "set", "--cone", "src", "tests")
    git(where, "checkout", "-q", "--detach", sha)
    return where


def harness_bisect(a: argparse.Namespace, good: str, bad: str, n: int) -> str:
    out = a.work / "harness-bisect"
    cmd = [*HARNESS, "bisect", f"{good}..{bad}", "--repo", str(a.mb_repo), "--megatron-lm", str(a.megatron_lm)]
    cmd += ["--first-parent", "--out", str(out), "--cache-dir", str(a.core_cache), "--allow-dirty", "-q"]
    cmd += [x for s in a.suite for x in ("--suite", s)] + (["-k", a.k] if a.k else [])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    path = out / "bisect.json"
    if not path.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        return f"harness bisect wrote no record (exit {proc.returncode}): {tail}"
    doc = json.loads(path.read_text())
    bound = math.ceil(math.log2(n)) + 2
    skipped = sum(
        1 for per in doc["probes"].values() if per and all(v in ("untestable", "error") for v in per.values())
    )
    lines = [
        f"harness bisect {good[:9]}..{bad[:9]} ({n} first-parent commits): {doc['evaluations']} evaluations "
        f"(bound ceil(log2 N)+2 = {bound}; probes where nothing ran: {skipped}), {wall:.0f} s wall "
        f"({doc['duration_s']:.0f} s in the driver), exit {proc.returncode}"
    ]
    for case in doc["cases"]:
        c = case.get("culprit") or {}
        lines.append(
            f"  {case['case_id']}: culprit {c.get('sha', '-')[:9]} {c.get('date', '')[:10]} {c.get('subject', '')[:60]}"
        )
    for late in doc.get("late_starts", []):
        lines.append(f"  late start: {late['case_id']}: {late['reason']}")
    for nb in doc.get("not_bisected", []):
        lines.append(f"  not bisected: {nb['case_id']}: {nb['reason']}")
    return "\n".join(lines)


def git_bisect(a: argparse.Namespace, good: str, bad: str) -> str:
    clone = sparse_clone(a.mb_repo, a.work / "git-bisect-clone", bad)
    t0 = time.monotonic()
    at_bad = upstream_verdicts(clone, a.megatron_lm, a.core_cache, a.work / "git-bisect-runs" / "bad")
    failing = sorted(c for c, v in at_bad.items() if v in ("fail", "error"))
    if not failing:
        ran = sum(1 for v in at_bad.values() if v == "pass")
        return (
            f"git bisect run (MB's own packing tests): they pass at BAD {bad[:9]} ({ran} passing, "
            f"{time.monotonic() - t0:.0f} s): no failure for git bisect to look for"
        )
    git(clone, "bisect", "start", "--first-parent", bad, good)
    me = [sys.executable, str(Path(__file__).resolve()), "--step", "--work", str(a.work)]
    me += ["--megatron-lm", str(a.megatron_lm), "--core-cache", str(a.core_cache)]
    try:
        proc = subprocess.run(
            ["git", "bisect", "run", *me], cwd=clone, capture_output=True, text=True, timeout=a.git_bisect_budget
        )
        verdict = next(
            (ln for ln in proc.stdout.splitlines() if "is the first bad commit" in ln), "no first bad commit named"
        )
    except subprocess.TimeoutExpired:
        verdict = f"not finished within {a.git_bisect_budget} s"
    log = subprocess.run(["git", "bisect", "log"], cwd=clone, capture_output=True, text=True).stdout
    steps = sum(
        1 for ln in log.splitlines() if ln.startswith("git bisect ") and ln.split()[2] in ("good", "bad", "skip")
    )
    skips = sum(1 for ln in log.splitlines() if ln.startswith("git bisect skip"))
    subprocess.run(["git", "bisect", "reset", "-q"], cwd=clone, capture_output=True)
    return (
        f"git bisect run (MB's own packing tests failing at BAD: {', '.join(failing)[:120]}): {verdict}; "
        f"{steps} steps ({skips} skipped), {time.monotonic() - t0:.0f} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb-repo", type=Path, default=os.environ.get("HARNESS_MB_MIRROR"))
    ap.add_argument("--megatron-lm", type=Path, default=os.environ.get("HARNESS_MLM_MIRROR"))
    ap.add_argument("--bad", default="main")
    ap.add_argument("--good", help="default: --n first-parent commits before --bad")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--suite", action="append", default=None, help="default: forward_cpu")
    ap.add_argument("-k", default=DEFAULT_K)
    ap.add_argument("--work", type=Path, default=Path("/tmp/harness-bench-long-range"))
    ap.add_argument("--core-cache", type=Path, help="harness cache dir (pinned cores, verdicts); default WORK/cache")
    ap.add_argument("--no-git-bisect", action="store_true")
    ap.add_argument("--git-bisect-budget", type=float, default=1800.0)
    ap.add_argument("--step", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.suite = a.suite or ["forward_cpu"]
    a.core_cache = a.core_cache or a.work / "cache"
    if a.step:
        return step(a)
    for what, p in (("--mb-repo/HARNESS_MB_MIRROR", a.mb_repo), ("--megatron-lm/HARNESS_MLM_MIRROR", a.megatron_lm)):
        if p is None or not Path(p).is_dir():
            print(f"skipped: no Megatron-Bridge / Megatron-LM mirror ({what} not set or not a directory)")
            return 0
    bad = git(a.mb_repo, "rev-parse", a.bad).strip()
    good = a.good or git(a.mb_repo, "rev-list", "--first-parent", f"--skip={a.n}", "-n1", bad).strip()
    good = git(a.mb_repo, "rev-parse", good).strip()
    n = int(git(a.mb_repo, "rev-list", "--first-parent", "--count", f"{good}..{bad}").strip())
    a.work.mkdir(parents=True, exist_ok=True)
    print(harness_bisect(a, good, bad, n), flush=True)
    if not a.no_git_bisect:
        print(git_bisect(a, good, bad), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
