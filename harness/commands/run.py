"""``harness run``: run the suites against one MB and write results, JUnit and HTML report.

Exit codes: 0 every case passed (untestable cases allowed), 1 a case failed or the harness
erred on a case, 2 usage or environment error (raised as HarnessError by the CLI).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TextIO

from harness import paths, runner
from harness.report import render_run_report, write_junit
from harness.errors import UsageError
from harness.results import RunResult
from harness.target import Target, require_mb
from harness.verdict import Verdict


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the golden suites against one Megatron-Bridge",
                       description="Run the golden suites against the MB importable here (default) or an MB "
                                   "source tree (--mb-src), print a summary, and write results.json, junit.xml "
                                   "and report.html under --out (default reports/<run-id>/).")
    add_target_args(p)
    p.add_argument("--suite", action="append", metavar="NAME",
                   help=f"suite to run (repeatable; default all: {', '.join(runner.available_suites())})")
    p.add_argument("-k", dest="keyword", help="pytest -k expression to select cases")
    p.add_argument("--out", type=Path, help="output directory (default reports/<run-id>)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before the suite process is killed")
    p.add_argument("-j", "--jobs", type=int, default=1, help="pytest-xdist workers (default 1)")
    p.add_argument("--fixtures", type=Path, default=paths.FIXTURES_DIR, help="golden root (default fixtures/)")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    p.add_argument("--import", dest="import_mode", choices=runner.IMPORT_MODES, default="auto",
                   help="how MB is imported: auto (default) runs light-group cases without executing MB's package "
                        "__init__ files and the others with the full import; full imports MB normally for every "
                        "case; light runs only the light-group cases")
    p.set_defaults(func=run)


def add_target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mb-src", metavar="PATH", help="an MB checkout (or its src/) to test instead of the installed MB")
    p.add_argument("--megatron-lm", metavar="PATH", type=Path,
                   help="with --mb-src in a git checkout: a Megatron-LM repository; use the megatron-core that the "
                        "checkout's HEAD pins in 3rdparty/Megatron-LM instead of the installed one")


def target_from_args(args: argparse.Namespace, commit: str | None = None) -> Target:
    """The target of --mb-src (and --megatron-lm): a one-line error for what cannot work."""
    tgt = Target.from_args(args.mb_src, commit)
    mlm = getattr(args, "megatron_lm", None)
    if mlm is None:
        return tgt
    if tgt.src is None:
        raise UsageError("--megatron-lm needs --mb-src (an MB git checkout that pins Megatron-LM)")
    from harness.gitrepo import open_repo
    from harness.pins import pinned_core

    repo = open_repo(tgt.src)
    pinned = pinned_core(repo, "HEAD", mlm, paths.cache_dir())
    if pinned is None:
        raise UsageError(f"{repo.path} pins no Megatron-LM at HEAD (no 3rdparty/Megatron-LM submodule)")
    return dataclasses.replace(tgt, core=pinned.path, core_pin=pinned.pin)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    tgt = target_from_args(args)
    require_mb(tgt)
    out_dir = args.out or paths.REPORTS_DIR / runner.new_run_id()
    opts = runner.RunOptions(suites=args.suite, keyword=args.keyword, timeout_s=args.timeout, jobs=args.jobs,
                             fixtures_dir=args.fixtures, import_mode=getattr(args, "import_mode", "auto"))
    result = runner.run_suites(tgt, opts, Path(out_dir), progress=None if args.quiet else sys.stderr)
    write_junit(result, Path(out_dir) / "junit.xml")
    report = render_run_report(result, Path(out_dir) / "report.html")
    print_summary(result, out)
    print(f"\nresults: {Path(out_dir) / 'results.json'}\njunit:   {Path(out_dir) / 'junit.xml'}\nreport:  {report}", file=out)
    return 0 if result.ok and result.cases else 1


def print_summary(result: RunResult, out: TextIO) -> None:
    """Per-suite counts, then every failure with its diff and every untestable reason."""
    v = result.versions
    print(f"\nMegatron-Bridge {v.get('megatron-bridge')} ({result.target.get('kind')}"
          f"{', ' + str(result.target['commit']) if result.target.get('commit') else ''}), "
          f"megatron-core {v.get('megatron-core')}, torch {v.get('torch')}, {result.machine.get('accelerator')}",
          file=out)
    suites = sorted({c.suite for c in result.cases})
    header = f"{'suite':<28}{'pass':>6}{'fail':>6}{'untestable':>12}{'error':>7}"
    print(header + "\n" + "-" * len(header), file=out)
    for s in suites:
        cs = [c for c in result.cases if c.suite == s]
        n = {vv: sum(c.verdict is vv for c in cs) for vv in Verdict}
        print(f"{s:<28}{n[Verdict.PASS]:>6}{n[Verdict.FAIL]:>6}{n[Verdict.UNTESTABLE]:>12}{n[Verdict.ERROR]:>7}", file=out)
    counts = result.counts()
    print(f"{'total':<28}{counts['pass']:>6}{counts['fail']:>6}{counts['untestable']:>12}{counts['error']:>7}"
          f"   ({result.duration_s:.1f} s)", file=out)
    for c in result.cases:
        if c.verdict in (Verdict.FAIL, Verdict.ERROR):
            print(f"\n{c.verdict.value.upper()} {c.case_id}\n  " + c.message.replace("\n", "\n  "), file=out)
    untestable = [c for c in result.cases if c.verdict is Verdict.UNTESTABLE]
    if untestable:
        print("\nuntestable here:", file=out)
        for c in untestable:
            print(f"  {c.case_id}: {c.message}", file=out)
    for note in result.notes:
        print(f"note: {note}", file=out)
    if result.standins:
        print("stand-ins used: " + "; ".join(result.standins), file=out)
