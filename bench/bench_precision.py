"""Verdict precision: what is red on each MB, with its training impact, and proof a nightly can go green.

Not a test (minutes on 2 cores). For each target, ``harness run`` on the default suites, then:
one row of counts (documented tier apart from the hypothetical tier), the red cases' impact
classes, and every remaining FAIL with its first violation, so each red at MB main can be
explained by file and line in a closing note. Targets:

* ``installed``: the MB in this environment (0.6.2 by default);
* ``installed+fixes``: the same with every known bug's fix mutant applied (``fix_all`` of
  harness/mutations/catalogue.json) and no known-failure entries at all: it must be green;
* every release scripts/setup_releases.sh installed (``.releases/``), when present;
* ``main``: MB main (``--ref``, default the mirror's HEAD) from the mirror, with the Megatron-LM it
  pins (``--mb-repo`` / ``HARNESS_MB_MIRROR``, ``--megatron-lm`` / ``HARNESS_MLM_MIRROR``); and the
  same with the fix mutants that apply there (``main+fixes``, reported, not required to be green:
  main's code moved under some fixes).

Without a mirror the mirror rows say why and the rest still runs. Exit 0 unless the
installed+fixes run has a red case (the construction this bench proves).

    .venv/bin/python bench/bench_precision.py [--work DIR] [--ref REF] [--skip-releases]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import paths  # noqa: E402
from harness.mutations import installed_package_dir, load_catalogue, make_mutant  # noqa: E402
from harness.records import known  # noqa: E402
from harness.records.results import RunResult  # noqa: E402
from harness.records.verdict import Verdict  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
SUITES_SKIP = ("forward_gpu",)  # no GPU here: untestable, listed apart


def _run(label: str, args: list[str], work: Path, python: str = PY) -> RunResult | str:
    out = work / label
    shutil.rmtree(out, ignore_errors=True)
    cmd = [python, "-m", "harness", "run", "--quiet", "--out", str(out), *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=5400)
    results = out / "results.json"
    if not results.exists():
        return f"no results (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-400:]}"
    return RunResult.load(results)


def _mutant(fault_id: str, pkg: Path, work: Path) -> tuple[Path, int, int]:
    """A copy of the MB package ``pkg`` with the edits of catalogue entry ``fault_id`` that apply
    there (all of them on the installed MB; on another commit, those whose text is still there);
    returns (src root, edits applied, edits in the entry)."""
    fault = {f.id: f for f in load_catalogue()}[fault_id]
    applied = tuple(e for e in fault.edits if e.occurrences(pkg) == 1)
    root = make_mutant(dataclasses.replace(fault, edits=applied) if applied else None, pkg, parent=work)
    assert root is not None
    return root, len(applied), len(fault.edits)


def _clone(mirror: Path, ref: str, dest: Path) -> Path:
    """A plain clone of the mirror at ``ref`` with only ``src/`` materialised (never the mirror itself)."""
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(mirror), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", ref, "--", "src"], check=True)
    subprocess.run(["git", "-C", str(dest), "reset", "-q", "--soft", ref], check=True)
    return dest


def _apply(fault_id: str, pkg: Path) -> tuple[int, int]:
    """Apply, in place, the edits of ``fault_id`` whose text is in ``pkg``: (applied, in the entry)."""
    fault = {f.id: f for f in load_catalogue()}[fault_id]
    applied = tuple(e for e in fault.edits if e.occurrences(pkg) == 1)
    if applied:
        dataclasses.replace(fault, edits=applied).apply(pkg)
    return len(applied), len(fault.edits)


def _no_known_failures(work: Path) -> Path:
    """A copy of the goldens with no known-failure entries: a run against it shows every red."""
    fixtures = work / "fixtures-without-known-failures"
    shutil.rmtree(fixtures, ignore_errors=True)
    shutil.copytree(paths.fixtures_dir(), fixtures)
    (fixtures / known.FILENAME).write_text(json.dumps(known.dump([])))
    return fixtures


def _row(label: str, result: RunResult | str) -> tuple[str, list[str]]:
    if isinstance(result, str):
        return f"| {label} | {result} |", []
    doc = [c for c in result.cases if not c.hypothetical]
    hyp = [c for c in result.cases if c.hypothetical]
    count = Counter(c.verdict for c in doc)
    red = [c for c in doc if c.verdict in (Verdict.FAIL, Verdict.KNOWN_FAIL)]
    impacts = Counter(i for c in red for i in (c.impacts or ["unclassified"]))
    mb = result.versions.get("megatron-bridge", "?")
    line = (
        f"| {label} | {mb} | {count[Verdict.PASS]} | {count[Verdict.FAIL]} | {count[Verdict.KNOWN_FAIL]} | "
        f"{count[Verdict.CHANGED]} | {count[Verdict.FIXED]} | {count[Verdict.UNTESTABLE]} | {count[Verdict.ERROR]} | "
        f"{len(hyp)} | {', '.join(f'{k} x{n}' for k, n in sorted(impacts.items())) or '-'} |"
    )
    details = []
    for c in doc:
        if c.verdict in (Verdict.FAIL, Verdict.ERROR):
            first = c.violations[0] if c.violations else None
            why = (
                f"{first['invariant']} [{first.get('impact')}] row {first['row']} pos {first['position']}: "
                f"expected {first['expected']}, got {first['got']} ({first['detail']})"
                if first
                else c.message.splitlines()[0][:300]
            )
            details.append(f"  {label}: {c.verdict.value.upper()} {c.case_id} [{', '.join(c.impacts)}]: {why}")
    return line, details


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=None, help="where runs are kept (default: a temp dir)")
    ap.add_argument("--mb-repo", type=Path, default=os.environ.get("HARNESS_MB_MIRROR"))
    ap.add_argument("--megatron-lm", type=Path, default=os.environ.get("HARNESS_MLM_MIRROR"))
    ap.add_argument("--ref", default="HEAD", help="the MB commit of the main row (default the mirror's HEAD)")
    ap.add_argument("--skip-releases", action="store_true")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-precision-"))
    work.mkdir(parents=True, exist_ok=True)
    suites: list[str] = []
    from harness.suiterun import runner

    for s in runner.available_suites():
        if s not in SUITES_SKIP:
            suites += ["--suite", s]
    bare = ["--fixtures", str(_no_known_failures(work))]
    rows: list[tuple[str, RunResult | str]] = []
    pkg = installed_package_dir()
    rows.append(("installed", _run("installed", suites, work)))
    fixed, n, total = _mutant("fix_all", pkg, work)
    fixes_label = f"installed+fixes ({n}/{total} edits)"
    rows.append((fixes_label, _run("installed-fixes", [*suites, "--mb-src", str(fixed), *bare], work)))
    if not args.skip_releases:
        rel = ROOT / ".releases"
        for v in ("0.5.1", "0.4.0"):
            if (rel / f"mb-{v}" / "megatron" / "bridge").is_dir():
                rows.append((v, _run(f"release-{v}", [*suites, "--mb-src", str(rel / f"mb-{v}")], work)))
        venv = rel / "venv-0.3.1" / "bin" / "python"
        if venv.exists():
            rows.append(("0.3.1", _run("release-0.3.1", suites, work, python=str(venv))))
    if args.mb_repo and args.megatron_lm and Path(args.mb_repo).exists():
        clone = _clone(Path(args.mb_repo), args.ref, work / "mb-main")
        sha = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
        label = f"main {sha.strip()[:9]}"
        mlm = ["--megatron-lm", str(args.megatron_lm)]
        rows.append((label, _run("main", [*suites, "--mb-src", str(clone), *mlm], work)))
        # a second clone edited in place: its history still names the pinned Megatron-LM
        fixed_clone = _clone(Path(args.mb_repo), args.ref, work / "mb-main-fixes")
        n, total = _apply("fix_all", fixed_clone / "src" / "megatron" / "bridge")
        rows.append(
            (
                f"{label}+fixes ({n}/{total} edits)",
                _run("main-fixes", [*suites, "--mb-src", str(fixed_clone), *mlm, *bare], work),
            )
        )
    else:
        rows.append(("main", "no mirror: give --mb-repo and --megatron-lm (or HARNESS_MB_MIRROR, HARNESS_MLM_MIRROR)"))
    cols = ("target", "MB", "pass", "fail", "known-fail", "changed", "fixed", "untestable", "error", "hypothetical")
    print("| " + " | ".join((*cols, "red by impact")) + " |")
    print("|" + "---|" * (len(cols) + 1))
    details: list[str] = []
    for label, result in rows:
        line, more = _row(label, result)
        print(line)
        details += more
    print("\nper suite (fail / error / known-fail / fixed, documented tier; suites with none left out):")
    for label, result in rows:
        if isinstance(result, str):
            continue
        parts = []
        for suite in sorted({c.suite for c in result.documented}):
            count = Counter(c.verdict for c in result.documented if c.suite == suite)
            cells = [count[v] for v in (Verdict.FAIL, Verdict.ERROR, Verdict.KNOWN_FAIL, Verdict.FIXED)]
            if any(cells):
                parts.append(f"{suite} {'/'.join(map(str, cells))}")
        print(f"  {label}: {'; '.join(parts) or 'none'}")
    if details:
        print("\nremaining failures and errors:")
        print("\n".join(details))
    print(f"\nruns kept under {work}")
    green = rows[1][1]
    if isinstance(green, str):
        return 1
    red = [c for c in green.documented if c.verdict in (Verdict.FAIL, Verdict.KNOWN_FAIL, Verdict.ERROR)]
    return 1 if red else 0


if __name__ == "__main__":
    raise SystemExit(main())
