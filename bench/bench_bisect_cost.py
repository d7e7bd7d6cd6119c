"""What a bisection probe costs: open-case probing against whole-selection probing (issue 26).

Not a test (about 10 minutes on 2 cores). A generated Megatron-Bridge history (the installed MB
package's files, one injected fault from ``tests/faults``, noise commits around it) is bisected
twice with ``harness bisect`` over the default suites (every case), each from a cold cache:
as shipped (GOOD and BAD run the whole selection, every other probe only the cases still open)
and with ``--probe-all-cases`` (every probe runs everything, what the harness did before).
Same range, same evaluations; the ratio of wall times is the figure (goal <= 0.35 with <= 3
open cases out of >= 100), with the mean wall of an endpoint and of an intermediate probe.

    .venv/bin/python bench/bench_bisect_cost.py [--commits 24] [--fault first_fit_needs_one_more]
    .venv/bin/python bench/bench_bisect_cost.py --mirror MB_MIRROR --range GOOD..BAD   # a real range
                                                                      # (first-parent, installed megatron-core)

On a real range it also times ``git bisect run`` over the same first-parent range driving MB's
own packing tests (the ``upstream`` suite's commands, one pytest each) and prints the harness's
intermediate probe against its step (goal <= 1.5x).
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
sys.path.insert(0, str(ROOT / "tests"))

import faults  # noqa: E402

from tests.test_bisect_command import GIT_ENV, build_repo  # noqa: E402


def _history(n: int, fault: faults.Fault) -> list[tuple[str, object]]:
    at = (2 * n) // 3
    out: list[tuple[str, object]] = [("Import Megatron-Bridge sources", None)]
    for i in range(1, n):
        out.append((f"Inject {fault.name}", fault) if i == at else (f"Update README ({i})", "noise"))
    return out


def _fault(name: str) -> faults.Fault:
    """A test fault, or a catalogue mutation as one (the catalogue names its MB file and edit)."""
    if name in faults.FAULTS:
        return faults.FAULTS[name]
    doc = json.loads((ROOT / "harness" / "mutations" / "catalogue.json").read_text())
    entry = next((f for f in doc["faults"] if f["id"] == name), None)
    if entry is None:
        raise SystemExit(f"bench_bisect_cost: no fault or catalogue mutation {name!r}")
    return faults.Fault(name, entry["file"], entry["search"], entry["replace"], entry["description"])


def _bisect(repo: Path, work: Path, mode: str, rng: str = "good..bad") -> dict[str, object]:
    cache, out = work / f"cache-{mode}", work / f"out-{mode}"
    cmd = [sys.executable, "-m", "harness", "bisect", rng, "--repo", str(repo), "-q"]
    cmd += ["--first-parent"] if rng != "good..bad" else []
    cmd += ["--cache-dir", str(cache), "--out", str(out)] + (["--probe-all-cases"] if mode == "all" else [])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **GIT_ENV}, timeout=3600)
    wall = time.monotonic() - t0
    doc = json.loads((out / "bisect.json").read_text())
    costs = [c for cs in doc.get("probe_costs", {}).values() for c in cs]
    ends = [c["seconds"] for c in costs if c["endpoint"]]
    probes = [c["seconds"] for c in costs if not c["endpoint"]]
    return {
        "rc": proc.returncode,
        "wall_s": wall,
        "evaluations": doc["evaluations"],
        "cases_bisected": len(doc["cases"]),
        "culprits": sorted({(c.get("culprit") or {}).get("sha", "")[:12] for c in doc["cases"]}),
        "endpoint_s": sum(ends) / len(ends) if ends else 0.0,
        "probe_s": sum(probes) / len(probes) if probes else 0.0,
        "probe_cases": sorted({c["cases"] for c in costs if not c["endpoint"]}),
        "all_cases": max((c["cases"] for c in costs), default=0),
    }


# One ``git bisect run`` step: MB's own packing verification commands (the upstream suite's
# selection, resolved for the tree checked out), one pytest process each, as MB's guidance writes
# them; the step is bad when any fails. Run in the throwaway clone's work tree.
_STEP = """
import os, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from harness.suiterun.upstream.selection import load_selection, resolve
tree = Path.cwd()
env = {**os.environ, "PYTHONPATH": str(tree / "src")}
bad = False
for r in resolve(tree, load_selection()):
    if r.variant is None:
        continue
    k = ["-k", r.variant.k] if r.variant.k else []
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", r.variant.file, *k]
    rc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    bad |= rc not in (0, 5)  # 5: nothing collected at this commit
sys.exit(1 if bad else 0)
"""


def _git_bisect_run(mirror: Path, work: Path, rng: str) -> dict[str, object]:
    """``git bisect run`` over the same first-parent range, driving MB's own packing tests."""
    good, bad = rng.split("..")
    clone = work / "git-bisect-run"
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(mirror), str(clone)], check=True, env=env)
    step = work / "step.py"
    step.write_text(_STEP)
    subprocess.run(["git", "sparse-checkout", "set", "src", "tests"], cwd=clone, check=True, env=env)  # only these
    subprocess.run(["git", "checkout", "-q", bad], cwd=clone, check=True, env=env)
    subprocess.run(["git", "bisect", "start", "--first-parent", bad, good], cwd=clone, check=True, env=env)
    t0 = time.monotonic()
    proc = subprocess.run(
        ["git", "bisect", "run", sys.executable, str(step), str(ROOT)],
        cwd=clone,
        capture_output=True,
        text=True,
        env=env,
        timeout=7200,
    )
    wall = time.monotonic() - t0
    steps = proc.stdout.count("\nrunning ") + proc.stdout.startswith("running ")
    found = next((line for line in proc.stdout.splitlines() if "is the first bad commit" in line), "")
    return {"wall_s": wall, "steps": steps, "step_s": wall / max(steps, 1), "answer": found or proc.stdout[-200:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=24)
    ap.add_argument(
        "--fault",
        default="first_fit_needs_one_more",
        help="a fault name of tests/faults, or an id of the mutation catalogue (harness/mutations/catalogue.json)",
    )
    ap.add_argument("--mirror", type=Path, help="a Megatron-Bridge repository (a real range instead)")
    ap.add_argument("--range", default="", help="with --mirror: GOOD..BAD, walked --first-parent")
    ap.add_argument("--no-git-bisect", action="store_true", help="with --mirror: leave out the git bisect run timing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bisect-cost-") as tmp:
        work = Path(tmp)
        gbr: dict[str, object] | None = None
        if args.mirror:
            rows = {mode: _bisect(args.mirror, work, mode, args.range) for mode in ("open", "all")}
            gbr = None if args.no_git_bisect else _git_bisect_run(args.mirror, work, args.range)
            what = f"real MB range {args.range} (--first-parent) in {args.mirror}"
        else:
            fault = _fault(args.fault)
            repo = build_repo(work, _history(args.commits, fault)).path
            rows = {mode: _bisect(repo, work, mode) for mode in ("open", "all")}
            what = f"generated MB history: {args.commits} commits, fault {fault.name}"
    print(f"{what}; default suites; -j 1; cold caches")
    head = f"{'probing':<10} {'rc':>3} {'evals':>6} {'cases':>6} {'wall s':>8} {'endpoint s':>11} {'probe s':>8}"
    print(head + "  probe cases")
    for mode, r in rows.items():
        print(
            f"{mode:<10} {r['rc']:>3} {r['evaluations']:>6} {r['all_cases']:>6} {r['wall_s']:>8.1f} "
            f"{r['endpoint_s']:>11.1f} {r['probe_s']:>8.1f}  {r['probe_cases']}"
        )
    same = (
        rows["open"]["evaluations"] == rows["all"]["evaluations"]
        and rows["open"]["culprits"] == rows["all"]["culprits"]
    )
    ratio = rows["open"]["wall_s"] / rows["all"]["wall_s"]  # type: ignore[operator]
    print(f"open-case / whole-selection wall time: {ratio:.2f} (goal <= 0.35); same evaluations and culprits: {same}")
    if gbr is not None:
        probe = rows["open"]["probe_s"]
        print(
            f"git bisect run, MB's own packing tests, same range: {gbr['steps']} steps, {gbr['wall_s']:.1f} s, "
            f"{gbr['step_s']:.1f} s a step ({gbr['answer']}); the harness's intermediate probe: {probe:.1f} s "
            f"= {probe / gbr['step_s']:.2f}x (goal <= 1.5x)"  # type: ignore[operator]
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
