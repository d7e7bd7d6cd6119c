"""A pinned (``--megatron-lm``) evaluation of the light cases: plain subprocess vs warm fork server.

With ``--megatron-lm`` every MB commit runs against the megatron-core its submodule pins. A plain
suite process imports torch and that tree's megatron-core for every commit; the fork server of
the pinned tree (``harness.suiterun.forkserver``, one per tree) imports them once. This runs the light
suites (packing_algorithms, packed_seq_params, in_batch_packing) against a pinned tree both ways,
in the same run, and prints the medians and their ratio (target: forked <= 1/4 of plain). Every
case must get the same verdict both ways.

Pinned tree: by default a copy of the installed megatron-core in a temporary tree (needs no
mirror; the cost of importing a tree that is not the installed package is the same). With
``--mb-repo MB --megatron-lm MLM --commit SHA`` the real tree MB's commit pins, and MB at SHA.

    .venv/bin/python bench/bench_pinned_forkserver.py [--rounds N] [--mb-repo MB --megatron-lm MLM --commit SHA]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.suiterun import runner
from harness.suiterun.forkserver import POOL
from harness.target import Target

SUITES = ["packing_algorithms", "packed_seq_params", "in_batch_packing"]


def one(tgt: Target, forked: bool) -> tuple[float, dict[str, str], list[str]]:
    with tempfile.TemporaryDirectory(prefix="bench-pinned-") as d:
        t0 = time.monotonic()
        opts = runner.RunOptions(suites=SUITES, import_mode="light", fork_servers=2 if forked else 0)
        res = runner.run_suites(tgt, opts, Path(d) / "run", progress=None)
        wall = time.monotonic() - t0
    return wall, {c.case_id: c.verdict.value for c in res.cases}, res.notes


def synthetic_target(work: Path) -> Target:
    spec = importlib.util.find_spec("megatron.core")
    assert spec is not None and spec.submodule_search_locations, "megatron-core is not installed"
    tree = work / "pinned"
    shutil.copytree(
        next(iter(spec.submodule_search_locations)),
        tree / "megatron" / "core",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return Target(core=tree, core_pin="copy-of-installed-megatron-core")


def real_target(mb_repo: Path, mlm: Path, commit: str, cache: Path) -> Target:
    from harness.repository.gitrepo import open_repo
    from harness.repository.pins import pinned_core
    from harness.repository.workspaces import WorkspaceCache

    repo = open_repo(mb_repo)
    sha = repo.resolve(commit)
    ws = WorkspaceCache(cache / "ws", repo)
    ws.sync()
    tree = ws.materialize(sha)
    pinned = pinned_core(repo, sha, mlm, cache)
    if pinned is None:
        raise SystemExit(f"{sha[:12]} pins no Megatron-LM commit")
    return Target(src=tree / "src", commit=sha, core=pinned.path, core_pin=pinned.pin)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mb-repo", type=Path)
    ap.add_argument("--megatron-lm", type=Path)
    ap.add_argument("--commit")
    ap.add_argument("--cache-dir", type=Path, help="where real pinned trees are materialised (default: temporary)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pinned-work-") as d:
        work = Path(d)
        if args.mb_repo:
            tgt = real_target(args.mb_repo, args.megatron_lm, args.commit or "HEAD", args.cache_dir or work)
        else:
            tgt = synthetic_target(work)
        print(f"pinned tree {tgt.core} ({tgt.core_pin}); MB {tgt.src or 'installed'}", flush=True)
        t0 = time.monotonic()
        one(tgt, forked=True)  # start the pinned tree's server once (a bisect pays this once per pin)
        print(f"fork server start + first run {time.monotonic() - t0:6.1f} s", flush=True)
        plain, forked = [], []
        for r in range(args.rounds):
            for name, acc, fk in (("plain", plain, False), ("forked", forked, True)):
                wall, verdicts, notes = one(tgt, fk)
                acc.append((wall, verdicts))
                counts = {v: list(verdicts.values()).count(v) for v in sorted(set(verdicts.values()))}
                extra = f"  notes: {notes}" if any("fork server" in n for n in notes) else ""
                print(f"round {r + 1} {name:<6} {wall:7.1f} s  {counts}{extra}", flush=True)
        POOL.close()
    pt, ft = statistics.median(w for w, _ in plain), statistics.median(w for w, _ in forked)
    mismatch = {k for k, v in plain[-1][1].items() if forked[-1][1].get(k) != v}
    print(f"\nsuites: {', '.join(SUITES)} ({len(plain[-1][1])} cases), pinned megatron-core")
    print(f"plain pinned subprocess median {pt:6.1f} s\nwarm pinned fork server median {ft:6.1f} s")
    print(f"ratio forked/plain = {ft / pt:.2f} (target <= 0.25: {'met' if ft / pt <= 0.25 else 'NOT met'})")
    if mismatch:
        print(f"verdicts differ between the two for {sorted(mismatch)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
