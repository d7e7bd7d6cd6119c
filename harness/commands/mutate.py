"""``harness mutate``: the mutation self-test of the suites.

For every fault of the catalogue (``harness/mutations/catalogue.json``), copy the installed
Megatron-Bridge to a temporary directory, apply the fault, run the fault's suites (or every
suite with ``--all-suites``) against the mutant with ``harness run --mb-src`` semantics, and
report which cases caught it (FAIL verdicts; a mutant that only makes the harness ERROR is
listed as "error only" and scored as escaped). A fault whose search text is not found is "not
applicable" and does not count. Score = caught / applicable. Exit 0 when the score reaches
``--min-score`` (default 0.9), 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from harness import runner
from harness.commands import _args
from harness.errors import UsageError
from harness.mutations import CATALOGUE, Fault, installed_package_dir, load_catalogue, make_mutant
from harness.progress import Progress
from harness.target import Target
from harness.verdict import Verdict


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mutate",
        help="mutation self-test: inject packing faults into a copy of MB",
        description="Apply each catalogued fault to a temporary copy of the installed MB, run the "
        "suites against it and print which cases caught it, plus the mutation score.",
    )
    p.add_argument("--fault", action="append", metavar="ID", help="fault id to run (repeatable; default all)")
    _args.add_jobs(p, "mutants run in parallel")
    p.add_argument("--all-suites", action="store_true", help="run every golden suite against each mutant")
    p.add_argument("--catalogue", type=Path, default=CATALOGUE, help="fault catalogue (JSON)")
    _args.add_timeout(p, "one mutant's run", default=900.0)
    p.add_argument("--min-score", type=float, default=0.9, help="exit 1 below this score (default 0.9)")
    _args.add_out(p, "reports/mutate-<run-id>: per-mutant results and summary.json")
    p.set_defaults(func=run)


def run_fault(fault: Fault, out_dir: Path, *, all_suites: bool, timeout: float, pkg: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    root = make_mutant(fault, pkg)
    if root is None:
        return {
            "id": fault.id,
            "status": "not applicable",
            "caught_by": [],
            "duration_s": 0.0,
            "description": fault.description,
        }
    try:
        known = set(runner.available_suites())
        suites = None if all_suites else [s for s in fault.suites if s in known] or None
        opts = runner.RunOptions(suites=suites, timeout_s=timeout)
        result = runner.run_suites(Target(src=root), opts, out_dir / fault.id, progress=None)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    caught = [c.case_id for c in result.cases if c.verdict is Verdict.FAIL]
    errored = [c.case_id for c in result.cases if c.verdict is Verdict.ERROR]
    untestable = [c.case_id for c in result.cases if c.verdict is Verdict.UNTESTABLE]
    # only a FAIL verdict (an assertion or golden mismatch) counts as caught; a mutant that only
    # crashes the harness is reported separately and scored as escaped (conservative)
    status = "caught" if caught else ("error only" if errored else "escaped")
    return {
        "id": fault.id,
        "status": status,
        "caught_by": caught,
        "errored": errored,
        "untestable": len(untestable),
        "cases": len(result.cases),
        "suites": suites or "all",
        "duration_s": round(time.monotonic() - t0, 1),
        "description": fault.description,
        "notes": result.notes,
    }


def score(rows: list[dict[str, Any]]) -> tuple[int, int, float]:
    applicable = [r for r in rows if r["status"] != "not applicable"]
    caught = sum(r["status"] == "caught" for r in applicable)
    return caught, len(applicable), (caught / len(applicable) if applicable else 0.0)


def print_table(rows: list[dict[str, Any]], out: TextIO) -> None:
    width = max([len(r["id"]) for r in rows] + [5])
    print(f"{'fault':<{width}}  {'status':<15} caught by", file=out)
    print("-" * (width + 40), file=out)
    for r in rows:
        cases = r["caught_by"]
        shown = ", ".join(cases[:3]) + (f" (+{len(cases) - 3} more)" if len(cases) > 3 else "")
        print(f"{r['id']:<{width}}  {r['status']:<15} {shown or '-'}", file=out)
    caught, applicable, s = score(rows)
    na = sum(r["status"] == "not applicable" for r in rows)
    print(f"\nmutation score: {caught}/{applicable} = {s:.1%}  ({na} not applicable)", file=out)
    escaped = [r["id"] for r in rows if r["status"] in ("escaped", "error only")]
    if escaped:
        print("escaped: " + ", ".join(escaped), file=out)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    faults = load_catalogue(args.catalogue)
    if args.fault:
        ids = {f.id for f in faults}
        unknown = [f for f in args.fault if f not in ids]
        if unknown:
            raise UsageError(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(sorted(ids))}")
        faults = [f for f in faults if f.id in args.fault]
    pkg = installed_package_dir()
    out_dir = _args.out_dir(args, f"mutate-{runner.new_run_id()}")
    out_dir.mkdir(parents=True, exist_ok=True)

    def one(fault: Fault) -> dict[str, Any]:
        row = run_fault(fault, out_dir, all_suites=args.all_suites, timeout=args.timeout, pkg=pkg)
        progress.step(f"{fault.id}: {row['status']} ({row['duration_s']} s)")
        return row

    with Progress(sys.stderr, "mutate", total=len(faults)) as progress, ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one, faults))
    print_table(rows, out)
    caught, applicable, s = score(rows)
    (out_dir / "summary.json").write_text(
        json.dumps({"score": s, "caught": caught, "applicable": applicable, "faults": rows}, indent=2)
    )
    print(f"\nsummary: {out_dir / 'summary.json'}", file=out)
    return 0 if applicable and s >= args.min_score else 1
