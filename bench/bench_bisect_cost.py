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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=24)
    ap.add_argument("--fault", default="first_fit_needs_one_more", help="a fault name of tests/faults")
    ap.add_argument("--mirror", type=Path, help="a Megatron-Bridge repository (a real range instead)")
    ap.add_argument("--range", default="", help="with --mirror: GOOD..BAD, walked --first-parent")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bisect-cost-") as tmp:
        work = Path(tmp)
        if args.mirror:
            rows = {mode: _bisect(args.mirror, work, mode, args.range) for mode in ("open", "all")}
            what = f"real MB range {args.range} (--first-parent) in {args.mirror}"
        else:
            fault = faults.FAULTS[args.fault]
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
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
