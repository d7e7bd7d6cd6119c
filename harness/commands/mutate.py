"""``harness mutate``: the mutation self-test of the oracle.

For every entry of the catalogue (``harness/mutations/catalogue.json``), runs the entry's suites
on a temporary copy of the installed Megatron-Bridge with that entry's edits, and compares each
case with the same case of the *baseline*, an unmutated copy run with exactly the same suites
(one baseline per suite selection, shared by the entries that use it). Following
:mod:`harness.mutations.scoring`, a fault is *caught by invariants* when some case shows a
violation or failure the baseline did not have, *golden-only* when only goldens noticed, else
*escaped* (a mutant that only makes the harness ERROR is "error only", scored as escaped). MB's
own known bugs are in the baseline too, so they neither count as catches nor hide new ones.

Score = faults caught by invariants / applicable catchable faults (golden-only catches are
printed apart). Fix entries (edits that make MB more correct) are not scored: each must show no
invariant-level difference from the baseline. Exit 0 when the score reaches ``--min-score``
and no fix breaks an invariant, 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from harness.commands import _args
from harness.errors import EnvironmentProblem, UsageError
from harness.mutations import (
    CATALOGUE,
    Fault,
    installed_package_dir,
    load_catalogue,
    make_mutant,
    scoring,
)
from harness.mutations.table import Row, Summary, print_table
from harness.progress import Progress
from harness.records.results import RunResult
from harness.records.verdict import Verdict
from harness.suiterun import runner
from harness.target import Target


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mutate",
        help="mutation self-test: inject packing faults (and fixes) into a copy of MB",
        description="Run the suites on an unmutated copy of the installed MB (baseline), then on a "
        "copy with each catalogued fault or fix, and print which faults the oracle's "
        "invariants caught (golden-only catches apart) and whether any fix breaks an "
        "invariant.",
    )
    p.add_argument("--fault", action="append", metavar="ID", help="catalogue entry to run (repeatable; default all)")
    _args.add_jobs(p, "mutants run in parallel")
    p.add_argument("--all-suites", action="store_true", help="run every golden suite against each mutant")
    p.add_argument("--catalogue", type=Path, default=CATALOGUE, help="fault catalogue (JSON)")
    _args.add_timeout(p, "one mutant's run", default=900.0)
    p.add_argument(
        "--min-score", type=float, default=0.95, help="exit 1 below this invariant-only score (default 0.95)"
    )
    _args.add_out(p, "reports/mutate-<run-id>: per-mutant results and summary.json")
    p.add_argument("--list", action="store_true", help="list the catalogue's entries (id, kind, layer, suites)")
    p.add_argument(
        "--mb-src",
        type=Path,
        metavar="PATH",
        help="mutate copies of this MB source tree (a checkout or its src/) instead of the installed MB",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no live progress on stderr")
    p.set_defaults(func=run)


def _digest(case_id: str, obtained: Path) -> str | None:
    """What the case would record as its golden (value and sidecar), when a golden check wrote it."""
    from harness.golden.storage import golden_path  # numpy: loaded with the command, not with --help

    suite, _, case = case_id.partition("::")
    path = golden_path(obtained, suite, case)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    h = hashlib.sha256(json.dumps(doc.get("value"), sort_keys=True).encode())
    npz = path.with_suffix(".npz")
    if npz.is_file():
        import numpy as np

        with np.load(npz, allow_pickle=False) as data:
            for k in sorted(data.files):
                h.update(k.encode() + data[k].tobytes())
    return h.hexdigest()


def evidence_of(result: RunResult, out_dir: Path) -> dict[str, scoring.Evidence]:
    """Per case of a run written under ``out_dir``: what scoring compares."""
    return {c.case_id: scoring.evidence(c, _digest(c.case_id, out_dir / "obtained")) for c in result.cases}


def run_copy(
    fault: Fault | None,
    out_dir: Path,
    suites: list[str] | None,
    *,
    timeout: float,
    pkg: Path,
    keyword: str | None = None,
    extra: list[str] | None = None,
) -> RunResult | None:
    """Run ``suites`` on a copy of MB with ``fault`` applied (None: the baseline); None when not
    applicable. ``extra``: further pytest arguments for the suite process."""
    root = make_mutant(fault, pkg)
    if root is None:
        return None
    try:
        opts = runner.RunOptions(suites=suites, keyword=keyword, timeout_s=timeout, extra_pytest=list(extra or []))
        return runner.run_suites(Target(src=root), opts, out_dir, progress=None)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fault_suites(fault: Fault, all_suites: bool) -> list[str] | None:
    known = set(runner.available_suites())
    return None if all_suites else [s for s in fault.suites if s in known] or None


def score_fault(
    fault: Fault,
    baseline: dict[str, scoring.Evidence],
    out_dir: Path,
    *,
    all_suites: bool,
    timeout: float,
    pkg: Path,
    keyword: str | None = None,
) -> Row:
    """Run one entry and compare it with the baseline's evidence."""
    t0 = time.monotonic()
    suites = fault_suites(fault, all_suites)
    row = Row(
        fault.id,
        fault.layer,
        fault.kind,
        fault.catchable,
        fault.description,
        scoring.Status.NOT_APPLICABLE.value,
        fault.reason,
        suites or ["all"],
    )
    result = run_copy(fault, out_dir / fault.id, suites, timeout=timeout, pkg=pkg, keyword=keyword)
    if result is None:
        return row
    outcome = scoring.score(baseline, evidence_of(result, out_dir / fault.id), fix=fault.is_fix)
    row.status = outcome.status.value
    row.invariant_cases, row.golden_cases = outcome.invariant_cases, outcome.golden_cases
    row.error_cases, row.fixed_cases = outcome.error_cases, outcome.fixed_cases
    row.cases = len(result.cases)
    row.untestable = sum(c.verdict is Verdict.UNTESTABLE for c in result.cases)
    row.notes = result.notes
    row.duration_s = round(time.monotonic() - t0, 1)
    return row


def run_baseline(
    out_dir: Path, suites: list[str] | None, *, timeout: float, pkg: Path, keyword: str | None = None
) -> tuple[RunResult, dict[str, scoring.Evidence]]:
    """The unmutated copy on ``suites``, written to ``out_dir``; no decisive verdict is an environment problem."""
    result = run_copy(None, out_dir, suites, timeout=timeout, pkg=pkg, keyword=keyword)
    assert result is not None  # the unmutated copy always applies
    decisive = [c for c in result.cases if c.verdict.is_decisive]
    if not decisive:
        raise EnvironmentProblem(
            "the baseline (unmutated MB) gave no decisive verdict; nothing can be scored: "
            + "; ".join(result.notes[:3])
        )
    return result, evidence_of(result, out_dir)


class Baselines:
    """Baseline runs, one per suite selection, made when an entry first needs one and then shared.

    A mutant is compared with a run of exactly its own selection because the suites of one
    import group share a pytest process: a suite that fails to collect (or a slow one timing out)
    changes what its neighbours report, so a baseline over other suites would not be comparable.
    """

    def __init__(self, out_dir: Path, *, timeout: float, pkg: Path, say: Callable[[str], None] | None = None) -> None:
        self.out_dir, self.timeout, self.pkg = out_dir, timeout, pkg
        self.say = say or (lambda text: print(f"[mutate] {text}", file=sys.stderr, flush=True))
        self._lock = threading.Lock()
        self._locks: dict[tuple[str, ...], threading.Lock] = {}
        self._runs: dict[tuple[str, ...], tuple[RunResult, dict[str, scoring.Evidence], Path]] = {}

    def get(self, suites: list[str] | None) -> dict[str, scoring.Evidence]:
        key = tuple(sorted(suites)) if suites else ("all",)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._runs:
                t0 = time.monotonic()
                out = self.out_dir / f"baseline-{len(self._locks)}-{'+'.join(key)}"
                result, evidence = run_baseline(out, suites, timeout=self.timeout, pkg=self.pkg)
                self._runs[key] = (result, evidence, out)
                self.say(f"baseline {'+'.join(key)}: {len(result.cases)} cases ({time.monotonic() - t0:.0f} s)")
            return self._runs[key][1]

    def describe(self) -> list[dict[str, object]]:
        return [
            {
                "suites": list(key),
                "dir": str(out),
                "cases": len(result.cases),
                "counts": result.counts(),
                "notes": result.notes,
            }
            for key, (result, _, out) in sorted(self._runs.items())
        ]


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    faults = load_catalogue(args.catalogue)
    if args.fault:
        ids = {f.id for f in faults}
        unknown = [f for f in args.fault if f not in ids]
        if unknown:
            raise UsageError(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(sorted(ids))}")
        faults = [f for f in faults if f.id in args.fault]
    if args.list:
        for f in faults:
            tag = "" if f.catchable else "  (not catchable here)"
            print(f"{f.id:<44} {f.kind:<6} {f.layer:<12} {','.join(f.suites)}{tag}", file=out)
        return 0
    pkg = _source_package(args.mb_src) if args.mb_src else installed_package_dir()
    out_dir = _args.out_dir(args, f"mutate-{runner.new_run_id()}")
    out_dir.mkdir(parents=True, exist_ok=True)

    def one(f: Fault) -> Row:
        baseline = baselines.get(fault_suites(f, args.all_suites))
        row = score_fault(f, baseline, out_dir, all_suites=args.all_suites, timeout=args.timeout, pkg=pkg)
        progress.step(f"{f.id}: {row.status} ({row.duration_s} s)")
        return row

    stream = None if args.quiet else sys.stderr
    with Progress(stream, "mutate", total=len(faults)) as progress, ThreadPoolExecutor(args.jobs) as pool:
        baselines = Baselines(out_dir, timeout=args.timeout, pkg=pkg, say=progress.log)
        rows = list(pool.map(one, faults))
    print_table(rows, out)
    s = scoring.overall([asdict(r) for r in rows])
    fixes = [r for r in rows if r.kind == "fix" and r.status != scoring.Status.NOT_APPLICABLE.value]
    clean = sum(r.status == scoring.Status.CLEAN.value for r in fixes)
    Summary(round(s.value, 4), s.caught, s.golden_only, s.scored, clean, len(fixes), baselines.describe(), rows).save(
        out_dir / "summary.json"
    )
    print(f"\nsummary: {out_dir / 'summary.json'}", file=out)
    score_ok = s.scored == 0 or s.value >= args.min_score
    return 0 if score_ok and clean == len(fixes) and (s.scored or fixes) else 1


def _source_package(src: Path) -> Path:
    """The ``megatron/bridge`` package of an MB source tree (a checkout or its ``src/``)."""
    root = src.expanduser().resolve()
    for candidate in (root / "src" / "megatron" / "bridge", root / "megatron" / "bridge"):
        if candidate.is_dir():
            return candidate
    raise UsageError(f"--mb-src {src}: no megatron/bridge package under it (give an MB checkout or its src/)")
