"""``harness run``: run the suites against one MB and write results, JUnit and HTML report.

Exit codes: 0 nothing to act on (untestable and known MB bugs allowed; changed cases too with
``--allow-changed``), 1 a regression (FAIL), a harness error on a case, a known bug that is
fixed now, an unreviewed change, or no case ran at all; 2 usage or environment error (raised as
HarnessError by the CLI), including, with ``--require-gpu``, a GPU case that could not run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TextIO

from harness import gpucheck
from harness.commands import _args, _jobargs
from harness.errors import HarnessError
from harness.records import provenance
from harness.suiterun import runner
from harness.target import require_mb


def _knob_line(out_dir: Path, out: TextIO) -> None:
    """One line on the knobs the cases exercised (the table: ``harness coverage``)."""
    from harness.contract import KNOBS_LOG
    from harness.records import knobs as records
    from harness.report import knobtable as table

    try:
        rows = table.rows(records.read(out_dir / KNOBS_LOG))
    except HarnessError:
        return
    if rows:
        print(f"{table.summary_line(rows)} (harness coverage {out_dir})", file=out)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run the golden suites against one Megatron-Bridge",
        description="Run the golden suites against the MB importable here (default) or an MB "
        "source tree (--mb-src), print a summary, and write results.json, junit.xml "
        "and report.html under --out (default reports/<run-id>/).",
    )
    _args.add_target(p)
    _args.add_cache_dir(p)
    _args.add_suites(p)
    _args.add_out(p, "reports/<run-id>")
    _args.add_timeout(p, "the suite process")
    _args.add_jobs(p, "pytest-xdist workers (with --executor slurm: suite jobs in flight)")
    _args.add_roots(p)
    _args.add_verbosity(p, verbose=True)
    _args.add_import_mode(p)
    _args.add_allow_changed(p)
    gpucheck.add_option(p)
    provenance.add_repo_url_option(p)
    _args.add_summary_md(p, "a headline and one row per defect, with a link to the report (--report-url)")
    p.add_argument(
        "--report-url",
        metavar="URL",
        help="where the report can be read (e.g. the CI job's artifact page): linked from the Markdown summary",
    )
    _jobargs.add_executor(p, "the suites (one job per suite)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from harness.executors.shards import run_suites_with  # the SLURM side: not needed by --help
    from harness.report import render_run_report, write_junit  # jinja2: not needed by --help
    from harness.report.terminal import print_nothing_ran, print_run_summary

    fixtures = _args.use_roots(args)
    gpu_suites = gpucheck.check_selection(runner.suite_files(args.suite)) if args.require_gpu else []
    tgt = _args.target_from_args(args)
    require_mb(tgt)
    out_dir = _args.out_dir(args, runner.new_run_id())
    opts = runner.RunOptions(
        suites=args.suite,
        keyword=args.keyword,
        timeout_s=args.timeout,
        jobs=args.jobs,
        fixtures_dir=fixtures,
        import_mode=args.import_mode,
        verbose=args.verbose,
        repo_url=provenance.checked_repo_url(args.repo_url),
        case_times=_args.case_times(args),
    )
    try:
        with _args.sigterm_as_interrupt():
            result = run_suites_with(
                _jobargs.executor_from_args(args, args.jobs, args.timeout),
                tgt,
                opts,
                out_dir,
                progress=None if args.quiet else sys.stderr,
            )
    except runner.RunInterrupted as stopped:  # Ctrl-C or SIGTERM: write what finished, marked partial
        result = stopped.result
    result.hint_flags = _args.verdict_flags(args)
    result.save(out_dir / "results.json")  # with the flags, so a report rendered later keeps the hints right
    write_junit(result, out_dir / "junit.xml")
    report = render_run_report(result, out_dir / "report.html")
    print_run_summary(result, out)
    _knob_line(out_dir, out)
    print(f"\nresults: {out_dir / 'results.json'}\njunit:   {out_dir / 'junit.xml'}\nreport:  {report}", file=out)
    if args.summary_md or os.environ.get("GITHUB_STEP_SUMMARY"):
        from harness.report.markdown import run_summary, write_summary

        write_summary(run_summary(result, args.report_url), args.summary_md)
    if result.partial:
        print("harness: interrupted; the partial results of what finished are written above", file=sys.stderr)
        return 130
    print_nothing_ran(result, sys.stderr)
    if args.require_gpu:
        gpucheck.check_result(result, gpu_suites)
    return result.exit_code(allow_changed=args.allow_changed)
