"""``harness bisect GOOD..BAD --repo PATH``: find the commit that broke each failing case.

The user's repository is only read (``rev-parse``, ``rev-list``, ``show``, ``diff-tree``,
``status`` with ``--no-optional-locks``; the private mirror is cloned from it): no checkout,
no ``refs/bisect``, no stash, no index or config write. A dirty working tree is therefore
harmless but irrelevant: uncommitted changes are not part of any commit being bisected. We
print a warning rather than refuse (``--allow-dirty`` silences it), because refusing would
stop a user from working in the repository while a long bisection runs, which is exactly
what this design allows.

With ``--megatron-lm``, a culprit that moved the pinned Megatron-LM is followed into Megatron-LM:
its history between the two pins is bisected with MB held at the culprit (``--no-descend``
stops at the bump). ``--mb-at SHA --mb-repo MB`` (or ``--mb-held-src TREE``) runs that second level
directly: ``--repo`` is then the Megatron-LM repository and GOOD..BAD Megatron-LM commits.

Exit codes: 0 every bisected case has a single first-bad commit; 1 some case is ambiguous,
flaky or not reproduced, or nothing fails at BAD while passing at GOOD; 2 usage error
(unknown ref, GOOD not an ancestor of BAD, empty range, unknown suite...).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.commands import _args, _jobargs
from harness.errors import UsageError
from harness.records import provenance
from harness.suiterun import origin, runner

if TYPE_CHECKING:
    from harness.bisect.document import BisectDoc


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bisect",
        help="find the first bad commit of every case that fails at BAD and passes at GOOD",
        description="Bisect GOOD..BAD of a Megatron-Bridge repository, all failing cases at once: evaluate "
        "both endpoints, then probe commits (in parallel with -j) until every case that FAILs at BAD "
        "and PASSes at GOOD has its first bad commit; GOOD and BAD run the whole selection, every "
        "other probe only the cases still open there. Commits where a case cannot run (import "
        "error, missing API) are skipped for that case. Verdicts are cached per (commit, case, "
        "environment), so an interrupted bisection resumes where it stopped and a later one runs "
        "only what is missing. The repository is "
        "only read, never checked out or modified. Writes bisect.json and report.html.",
        epilog="examples: harness bisect v0.5.0..main --repo ~/Megatron-Bridge -j 4 --suite in_batch_packing | "
        "harness bisect GOOD..BAD --repo ~/Megatron-Bridge --megatron-lm ~/Megatron-LM (descends into pin bumps) | "
        "harness bisect OLDPIN..NEWPIN --repo ~/Megatron-LM --mb-at SHA --mb-repo ~/Megatron-Bridge",
    )
    p.add_argument("range", metavar="GOOD..BAD", help="known good and known bad commits (any git revision names)")
    p.add_argument(
        "--repo",
        required=True,
        type=Path,
        metavar="PATH",
        help="the Megatron-Bridge git repository (with --mb-at or --mb-held-src: the Megatron-LM repository)",
    )
    p.add_argument(
        "--first-parent", action="store_true", help="follow only the first parent of merges (bisect merges as units)"
    )
    _args.add_jobs(p, "evaluations in parallel (with --executor slurm: jobs in flight)")
    p.add_argument(
        "--retries",
        type=_args.non_negative_int,
        default=0,
        metavar="N",
        help="evaluate each probed commit N more times; disagreeing verdicts mark a case flaky",
    )
    _args.add_timeout(p, "one evaluation (the commit is then skipped)")
    p.add_argument("--no-cache", action="store_true", help="ignore (and do not add to) the verdict cache")
    _args.add_cache_dir(p)
    _args.add_suites(p)
    _args.add_roots(p)
    _args.add_out(p, "reports/bisect-<timestamp>")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="do not warn about uncommitted changes in --repo (they are never bisected)",
    )
    _args.add_megatron_lm(p)
    p.add_argument(
        "--no-descend",
        action="store_true",
        help="with --megatron-lm: stop at a culprit that moves the Megatron-LM pin instead of bisecting "
        "Megatron-LM between the two pins",
    )
    p.add_argument(
        "--mlm-ancestry-path",
        action="store_true",
        help="walk Megatron-LM's history with --ancestry-path instead of its first-parent chain (the default "
        "on Megatron-LM, at the second level and with --mb-at/--mb-held-src)",
    )
    held = p.add_argument_group(
        "second level directly",
        "bisect --repo as a Megatron-LM repository with Megatron-Bridge held fixed, "
        "GOOD..BAD being Megatron-LM commits (e.g. the old and the new pin of a bump)",
    )
    held.add_argument("--mb-at", metavar="SHA", help="hold Megatron-Bridge at this commit of --mb-repo")
    held.add_argument("--mb-repo", type=Path, metavar="PATH", help="the Megatron-Bridge repository holding --mb-at")
    held.add_argument(
        "--mb-held-src",
        type=Path,
        metavar="PATH",
        help="hold Megatron-Bridge at this source tree (a checkout or its src/); --mb-src names the MB under test "
        "in run and nightly, never the one a bisection holds",
    )
    held.add_argument("--mb-src", dest="mb_src_given", type=Path, help=argparse.SUPPRESS)
    p.add_argument(
        "--changed",
        action="store_true",
        help="also bisect CHANGED cases (golden differences with every invariant holding): the commit "
        "that changed a pinned output, reported as a change, never as a regression",
    )
    p.add_argument(
        "--find-fix",
        action="store_true",
        help="look for the first commit where cases failing at GOOD pass (GOOD..BAD still old..new)",
    )
    p.add_argument(
        "--fork-servers",
        type=_args.non_negative_int,
        default=None,
        metavar="N",
        help="warm fork servers kept alive, one per megatron-core (the installed one or a pinned "
        "Megatron-LM tree) and import mode (light, full; each holds torch and megatron-core in memory, "
        "a full one also MB's third-party dependencies); 0 runs every "
        "evaluation as a plain subprocess (default: 2 per -j slot, plus 2)",
    )
    p.add_argument(
        "--confirm",
        action="store_true",
        help="check each culprit: revert it on top of BAD in a private workspace and re-run its cases "
        "(confirmed / not confirmed / not checkable, in the summary and the report)",
    )
    p.add_argument(
        "--strict-good",
        action="store_true",
        help="when GOOD cannot run a case that fails at BAD, only name the oldest commit where it runs "
        "(to use as GOOD) instead of bisecting the case from there",
    )
    p.add_argument(
        "--case",
        action="append",
        metavar="ID",
        help="bisect only this case (SUITE::NAME, repeatable; its suite is run): what a nightly passes, one "
        "case per defect",
    )
    p.add_argument(
        "--probe-all-cases",
        action="store_true",
        help="run the whole selection at every probed commit, not only the cases still open there "
        "(the default runs it at GOOD and BAD only: they decide which cases are open)",
    )
    p.add_argument(
        "--bisect-untestable",
        action="store_true",
        help="also bisect cases that are untestable at BAD and pass at GOOD: the first commit where "
        "such a case stops passing (fails or cannot run); harness nightly uses it for cases that "
        "newly became untestable",
    )
    _args.add_verbosity(p)
    provenance.add_repo_url_option(p)
    _jobargs.add_executor(p, "evaluations")
    p.set_defaults(func=run)


def parse_range(text: str) -> tuple[str, str]:
    if ".." not in text or "..." in text:
        raise UsageError(f"range {text!r} must be GOOD..BAD (two revisions separated by '..')")
    good, bad = text.split("..", 1)
    if not good or not bad:
        raise UsageError(f"range {text!r} must name both GOOD and BAD (GOOD..BAD)")
    return good, bad


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from harness.bisect.driver import (  # GitPython: not needed by --help
        BisectInterrupted,
        BisectOptions,
        run_bisection,
    )
    from harness.report.terminal import bisect_summary_lines

    good, bad = parse_range(args.range)
    repo_url = provenance.checked_repo_url(args.repo_url)
    _args.use_roots(args)
    runner.suite_files(args.suite)  # no suites, unknown suite names: one-line error before any git work
    if args.mb_src_given is not None:
        raise UsageError(
            "bisect holds Megatron-Bridge fixed with --mb-held-src PATH (--mb-src names the MB under test in run "
            "and nightly)"
        )
    second = args.mb_at is not None or args.mb_held_src is not None
    if args.no_descend and args.megatron_lm is None:
        raise UsageError("--no-descend only applies with --megatron-lm (it stops at a Megatron-LM pin bump)")
    if args.mlm_ancestry_path and args.megatron_lm is None and not second:
        raise UsageError(
            "--mlm-ancestry-path walks Megatron-LM's history: give --megatron-lm, --mb-at or --mb-held-src"
        )
    # both directories are proven writable before the first evaluation, not after the last one
    out_dir = _args.writable_dir(_args.out_dir(args, f"bisect-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"), "--out")
    cache_dir = _args.writable_dir(_args.cache_dir(args), "--cache-dir")
    opts = BisectOptions(
        repo=args.repo,
        good=good,
        bad=bad,
        first_parent=args.first_parent or (second and not args.mlm_ancestry_path),
        jobs=args.jobs,
        retries=args.retries,
        timeout_s=args.timeout,
        use_cache=not args.no_cache,
        cache_dir=cache_dir,
        suites=tuple(args.suite) if args.suite else None,
        keyword=args.keyword,
        out_dir=out_dir,
        allow_dirty=args.allow_dirty,
        find_fix=args.find_fix,
        megatron_lm=args.megatron_lm,
        changed=args.changed,
        bisect_untestable=args.bisect_untestable,
        fork_servers=args.fork_servers,
        strict_good=args.strict_good,
        confirm=args.confirm,
        descend=not args.no_descend,
        mlm_first_parent=not args.mlm_ancestry_path,
        mb_at=args.mb_at,
        mb_repo=args.mb_repo,
        mb_held_src=args.mb_held_src,
        probe_open_cases=not args.probe_all_cases,
        cases=tuple(args.case) if args.case else None,
    )
    executor = _jobargs.executor_from_args(args, args.jobs, args.timeout)
    try:  # Ctrl-C or SIGTERM (or any error) cancels the jobs in flight
        with _args.sigterm_as_interrupt(), executor or contextlib.nullcontext():
            result = run_bisection(opts, executor=executor, progress=None if args.quiet else sys.stderr)
    except BisectInterrupted as stopped:  # what finished, marked partial, open cases with their range left
        result = stopped.run
    result.doc.hint_flags = _args.verdict_flags(args)
    result.doc.repo_url = repo_url or origin.remote_url(args.repo)
    mlm_url = origin.remote_url(args.megatron_lm)  # a descent's commits are Megatron-LM's
    for descent in result.doc.descents:
        if descent.doc is not None:
            descent.doc.repo_url = mlm_url
    json_path, report = write_outputs(result.doc, out_dir)
    print("\n".join(bisect_summary_lines(result.doc)), file=out)
    if result.message:
        print(f"\n{result.message}", file=out)
    print(f"\nbisect: {json_path}\nreport: {report}", file=out)
    if result.doc.partial:
        print("harness: interrupted; the verdicts so far are cached, rerun the same command to resume", file=sys.stderr)
        return 130
    return result.exit_code


def write_outputs(doc: BisectDoc, out_dir: Path) -> tuple[Path, Path]:
    """bisect.json (atomic, versioned) and report.html in ``out_dir``."""
    from harness.report import render_bisect_report

    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "bisect.json"
    doc.save(json_path)
    return json_path, render_bisect_report(doc, out_dir / "report.html")
