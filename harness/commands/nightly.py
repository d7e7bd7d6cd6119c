"""``harness nightly``: one nightly run, added to the history, with the trend page and an
optional automatic bisection of what newly broke.

Steps: run the suites (as ``harness run`` does), write ``junit.xml`` and ``report.html``,
append the verdicts to the parquet history under the commit tested, render ``trend.html``
and print the cases that newly fail, newly became untestable, or were fixed since the
previous nightly. A case that ran last night and cannot run tonight lost its coverage (an
operation moved, a dependency went missing): it is watched like a failure. With
``--auto-bisect``, cases that PASSED in the previous nightly and FAIL or are UNTESTABLE now
are handed to ``harness bisect PREV..THIS --confirm`` (each culprit reverted on top of THIS and
its cases re-run; ``--no-confirm`` skips that; ``--bisect-untestable`` when any became
untestable; run as a subprocess, so a crash there cannot lose the nightly's results), and its
report is linked from the trend page.

Layout under ``--out DIR``::

    DIR/trend.html            the history's trend page (bisect links when one ran)
    DIR/report.html           this run's report        DIR/junit.xml   this run's JUnit
    DIR/runs/<run-id>/        the runner's raw output (results.json, obtained values) and a
                              copy of its report.html, which the trend page links the night to
    DIR/bisect/               ``harness bisect`` output (bisect.json, report.html)

The history records, per night, where its report is: ``--report-url`` when given (a CI
run's page, say), else ``runs/<run-id>/report.html`` relative to the trend page, which
stays valid as long as ``DIR/runs/`` is kept between nights (examples/ci/nightly.sh keeps it).

The run id is fresh on every call even when ``DIR`` is reused (the history replaces rows of
a run id it already holds, so a fixed ``--out reports/nightly`` must not mean a fixed id).

Which commit a run is filed under: ``--commit`` when given, else the git commit of
``--mb-src``, else the version of the installed MB (a version is no git commit, so such a
run cannot be the end of an automatic bisection; the command says so).

Exit codes: 0 every case passed (untestable allowed, unless newly untestable), 1 a case failed
or erred or newly became untestable (whatever the bisection found), 2 usage or environment
error, found before the suites run when possible; with ``--require-gpu`` a GPU case that could
not run is one (exit 2 after the reports, history and trend are written, and no bisection).

The automatic bisection's plan (which cases, which range, which command) is
:mod:`harness.nightly.autobisect`; here are the command's steps in their order.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness import gpucheck, paths
from harness.commands import _args, _jobargs
from harness.errors import UsageError
from harness.nightly import refine
from harness.nightly.autobisect import BISECT_DIR, BisectEnv, execute, plan_bisect
from harness.records import provenance
from harness.records.results import RunResult
from harness.records.trend import Trend
from harness.suiterun import runner
from harness.target import Target, require_mb

if TYPE_CHECKING:
    from harness.repository import gitrepo


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "nightly",
        help="run the suites, add the run to the history, render the trend (optionally bisect)",
        description="Run the golden suites like 'harness run', append the verdicts to the history store "
        "under the commit tested, write trend.html, report.html and junit.xml under --out, and "
        "print what newly fails or was fixed since the previous nightly. With --auto-bisect, "
        "cases that passed last night and fail now are bisected between the two nightlies' "
        "commits with 'harness bisect' (report linked from trend.html).",
        epilog="Exit 0 when every case passed, 1 when any case failed, 2 on a usage or environment error.",
    )
    _args.add_target(p)
    _args.add_cache_dir(p)
    p.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="parquet history store (default OUT/history.parquet with --out, else reports/history.parquet "
        "under the current directory; created when missing). Report links in it are relative to it",
    )
    _args.add_out(p, "reports/nightly-<run-id>")
    _args.add_summary_md(p, "counts, failures with their impact, changes since the previous nightly")
    _args.add_suites(p, keyword=False)
    p.add_argument(
        "--commit",
        metavar="SHA",
        help="commit to file the run under (default: git commit of --mb-src, else the installed MB's version)",
    )
    p.add_argument(
        "--auto-bisect",
        action="store_true",
        help="bisect cases that passed in the previous nightly and fail now (needs --repo)",
    )
    p.add_argument(
        "--repo",
        type=Path,
        metavar="MB_CHECKOUT",
        help="MB git checkout holding both nightlies' commits (for --auto-bisect)",
    )
    p.add_argument(
        "--no-confirm",
        dest="confirm",
        action="store_false",
        help="with --auto-bisect, do not check each culprit by reverting it on top of this nightly's "
        "commit (harness bisect --confirm, on by default here)",
    )
    _args.add_roots(p)
    _args.add_timeout(p, "the suite process")
    _args.add_jobs(p, "pytest-xdist workers (with --executor slurm: jobs in flight, for the bisection too)")
    _args.add_verbosity(p, verbose=True)
    _args.add_allow_changed(p)
    gpucheck.add_option(p)
    provenance.add_repo_url_option(p)
    p.add_argument(
        "--report-url",
        metavar="URL",
        help="where this night's report can be read later (e.g. the CI run's page), recorded in the "
        "history and linked from trend.html (default: runs/<run-id>/report.html under --out)",
    )
    _jobargs.add_executor(p, "the suites (one job per suite) and the automatic bisection's evaluations")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from harness.executors.shards import run_suites_with
    from harness.nightly import history  # pandas, jinja2: not needed by --help
    from harness.report import render_run_report, write_junit
    from harness.report.terminal import print_nothing_ran, print_run_summary

    fixtures = _args.use_roots(args)
    repo = _check_args(args)
    gpu_suites = gpucheck.check_selection(runner.suite_files(args.suite)) if args.require_gpu else []
    tgt = _target(args)
    require_mb(tgt)
    # the history lives with the nights it describes: under --out when one is given (its runs/ too)
    default_store = Path(args.out) / "history.parquet" if args.out else paths.default_history()
    store = Path(args.history or default_store).expanduser().resolve()
    history.load(store)  # a corrupt or too-new store fails now, not after hours of suites
    run_id = runner.new_run_id()
    out_dir = _args.out_dir(args, f"nightly-{run_id}").resolve()
    run_dir = out_dir / "runs" / run_id

    opts = runner.RunOptions(
        suites=args.suite,
        timeout_s=args.timeout,
        jobs=args.jobs,
        fixtures_dir=fixtures,
        verbose=args.verbose,
        repo_url=provenance.checked_repo_url(args.repo_url),
        case_times=_args.case_times(args),
    )
    result = run_suites_with(
        _jobargs.executor_from_args(args, args.jobs, args.timeout),
        tgt,
        opts,
        run_dir,
        progress=None if args.quiet else sys.stderr,
    )
    junit = write_junit(result, out_dir / "junit.xml")
    report = render_run_report(result, out_dir / "report.html")
    kept = render_run_report(result, run_dir / "report.html")
    print_run_summary(result, out)

    commit = run_commit(args.commit, tgt, result)
    # a path relative to the history store: the trend page of any later night rebases it (report.trend)
    link = args.report_url or Path(os.path.relpath(kept, store.parent)).as_posix()
    df = history.append_run(store, result, commit, link)
    tr = history.trend(df)
    trend_page = out_dir / "trend.html"
    history.write_trend_page(store, trend_page)  # written before any bisect: a killed bisect keeps it
    print(f"\nnightly {result.run_id}: filed under {commit} in {store} ({_plural(len(tr['runs']), 'run')})", file=out)
    if tr["runs"] and tr["runs"][-1]["run_id"] != result.run_id:
        print(
            "note: a stored run started later than this one; the changes below are relative to the latest stored run",
            file=out,
        )
    _print_changes(tr, out)
    if args.summary_md or os.environ.get("GITHUB_STEP_SUMMARY"):
        from harness.report.markdown import nightly_section, run_summary, write_summary

        write_summary(run_summary(result, args.report_url) + nightly_section(tr), args.summary_md)
    if args.require_gpu:  # before any bisection: a night without its GPU cases is no regression to hunt
        gpucheck.check_result(result, gpu_suites)

    if args.auto_bisect:
        plan = plan_bisect(tr, repo, out_dir / BISECT_DIR, bisect_env(args), confirm=args.confirm, tonight=result)
        links = execute(plan, out_dir / BISECT_DIR, out)
        why = f"no bisect: {plan.reason}" if plan.command is None else "the bisection named no report for this case"
        found = out_dir / BISECT_DIR / refine.FILENAME
        rows = [vars(d) for d in refine.DefectCulprits.read(found).defects] if links and found.exists() else None
        history.write_trend_page(store, trend_page, bisect_links=links, bisect_note=why, defect_culprits=rows)

    print(
        f"\ntrend:   {trend_page}\nreport:  {report}\njunit:   {junit}\nresults: {run_dir / 'results.json'}", file=out
    )
    print_nothing_ran(result, sys.stderr)
    code = result.exit_code(allow_changed=args.allow_changed)
    gone = [c for c in tr["newly_failing"] if c["current"] == history.GONE]
    return 1 if tr["newly_untestable"] or gone else code


# --------------------------------------------------------------------------------------------
# Arguments and identity
# --------------------------------------------------------------------------------------------


def _check_args(args: argparse.Namespace) -> gitrepo.GitRepo | None:
    """Usage errors before anything runs; the opened --repo when bisecting."""
    from harness.repository import gitrepo

    runner.suite_files(args.suite)  # unknown suite names
    if args.auto_bisect and args.repo is None:
        raise UsageError("--auto-bisect needs --repo MB_CHECKOUT (the git checkout to bisect in)")
    if args.repo is not None and not args.auto_bisect:
        raise UsageError("--repo is only used with --auto-bisect")
    if args.commit is not None and not args.commit.strip():
        raise UsageError("--commit is empty")
    return gitrepo.open_repo(args.repo) if args.repo is not None else None


def _target(args: argparse.Namespace) -> Target:
    if args.mb_src is None and args.megatron_lm is None:
        return Target(None, args.commit)  # the installed MB; the commit only labels the run
    return _args.target_from_args(args, args.commit)  # --megatron-lm without --mb-src: a usage error


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def run_commit(explicit: str | None, tgt: Target, result: RunResult) -> str:
    """--commit, else the target's git commit, else the MB version the run saw."""
    if explicit:
        return explicit.strip()
    if tgt.commit:
        return tgt.commit
    return str(result.versions.get("megatron-bridge") or "unknown")


# --------------------------------------------------------------------------------------------
# Changes and bisection
# --------------------------------------------------------------------------------------------


def _print_changes(tr: Trend, out: TextIO) -> None:
    failing, untestable, fixed = tr["newly_failing"], tr["newly_untestable"], tr["newly_fixed"]
    if len(tr["runs"]) < 2:
        print("first run in this history: nothing to compare with", file=out)
        return
    print(f"newly failing ({len(failing)}):" if failing else "newly failing: none", file=out)
    from harness.nightly.history import GONE

    for c in failing:
        gone = " (gone: not in tonight's run)" if c["current"] == GONE else ""
        print(f"  {c['case_id']}  (previous nightly: {c['previous'] or 'not run'}){gone}", file=out)
    print(f"newly untestable ({len(untestable)}):" if untestable else "newly untestable: none", file=out)
    for c in untestable:
        print(f"  {c['case_id']}  (previous nightly: {c['previous']}): {c['message'][:200]}", file=out)
    print(f"newly fixed ({len(fixed)}):" if fixed else "newly fixed: none", file=out)
    for c in fixed:
        print(f"  {c['case_id']}", file=out)
    changed = tr.get("newly_changed", [])
    print(
        f"newly changed ({len(changed)}, every invariant holds; review the golden diff):"
        if changed
        else "newly changed: none",
        file=out,
    )
    for c in changed:
        print(f"  {c['case_id']}  (previous nightly: {c['previous'] or 'not run'})", file=out)


def bisect_env(args: argparse.Namespace) -> BisectEnv:
    """The nightly's options that its bisection must share (see :class:`BisectEnv`)."""
    executor = tuple(_jobargs.executor_argv(args))
    return BisectEnv(args.timeout, args.jobs, args.megatron_lm, args.cache_dir, executor, args.repo_url or "")
