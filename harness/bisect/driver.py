"""The bisect driver: git range -> evaluations (cached, parallel, retried) -> culprits.

Glue between the pure pieces: :mod:`harness.repository.gitrepo` (read-only range, private workspaces), an
:class:`~harness.bisect.evaluator.Evaluator` (one commit -> one verdict per case), an
:class:`~harness.executors.local.Executor` (where evaluations run),
:class:`~harness.bisect.cache.VerdictCache` (every attempt kept, one transaction each) and
:class:`~harness.bisect.algorithm.Bisection` (what to probe next).

Flow:

1. Resolve and validate GOOD..BAD (unknown ref, not an ancestor, empty range: UsageError),
   list the candidate commits (``--ancestry-path``, or ``--first-parent``).
2. Evaluate both endpoints. The cases to bisect are those that FAIL at BAD and PASS at GOOD;
   the others failing at BAD are listed as "not bisected" with the reason. None: stop.
3. Feed every cached evaluation of a commit in the range to the bisection (a rerun, a kill -9
   then rerun, or a wider range reuses them), then keep ``slots`` evaluations in flight: ask
   ``Bisection.next_probes`` for commits not already in flight, start them, and record each
   result in the cache *and* the bisection the moment it arrives.
4. Build the :class:`~harness.bisect.document.BisectDoc` (:mod:`harness.bisect.findings`).
5. With ``--megatron-lm``, follow every culprit that moved the pinned Megatron-LM into
   Megatron-LM (:mod:`harness.bisect.descend`): another pass of steps 1-4 whose commits are
   Megatron-LM commits, MB held at the culprit (:mod:`harness.bisect.axis`,
   :mod:`harness.bisect.coreeval`). ``--mb-at``/``--mb-held-src`` run that second level directly.

Retries (``retries=N``): each probed commit is evaluated 1+N times (attempts run in parallel
when slots allow), each attempt recorded separately so the bisection sees disagreement (FLAKY).
Commits known only from the cache keep the attempts they have.

Cluster executors (:mod:`harness.executors.slurm`): an outcome marked ``infrastructure`` (the
cluster lost the job past its retries) is a skip for that evaluation and is never cached;
in-flight evaluations a newer result made moot are cancelled (``Executor.cancel``); the jobs'
ids and log paths go to ``bisect.json``.

Disk: workspaces (``<cache>/workspaces/<repo>/trees/<sha>``) of the commits a run evaluated
are removed when it ends (an MB tree is ~20 MB; rebuilding one is a ``git archive``); the
suite run directories (``<cache>/runs/<sha>/<run-id>``: results.json, obtained values) are
kept, they hold the golden diffs the report shows for cached verdicts.

Each level of a descent runs the same :class:`~harness.bisect.leveldriver.LevelDriver` (the
in-flight set, cache writes and records in step); this module is the flow around it
(``_run_level``, ``_bisect``) and the partial record of an interrupted run.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from harness.bisect import confirm, descend, latestart
from harness.bisect.algorithm import Bisection, CaseStatus
from harness.bisect.axis import Axis
from harness.bisect.cache import VerdictCache
from harness.bisect.coreeval import core_evaluator, hold_mb
from harness.bisect.document import (
    BisectDoc,
    NotBisected,
)
from harness.bisect.evaluator import Evaluator, MBEvaluator
from harness.bisect.leveldriver import LevelDriver
from harness.bisect.options import BisectOptions, check_options
from harness.errors import UsageError
from harness.executors.local import Executor, LocalExecutor
from harness.records import casetimes
from harness.repository.gitrepo import open_repo
from harness.repository.pins import mlm_workspace
from harness.repository.workspaces import WorkspaceCache, workspace_dir_for


@dataclass
class BisectRun:
    """What :func:`run_bisection` hands back."""

    doc: BisectDoc
    exit_code: int  # 0 every bisected case FOUND, 1 otherwise
    message: str = ""  # why nothing was bisected, when that is the case
    bisection: Bisection | None = None


class BisectInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (made a KeyboardInterrupt by the command) during a bisection.

    Why it carries a record: every finished evaluation is already in the verdict cache, but the
    user (or a CI job killed by its time limit) also needs to see where the search stood:
    ``run.doc`` is marked ``partial``, every case still open keeps its last good commit and the
    range still to search, and a rerun resumes from the cache.
    """

    def __init__(self, run: BisectRun) -> None:
        super().__init__("bisect interrupted")
        self.run = run


def run_bisection(
    opts: BisectOptions,
    *,
    evaluator: Evaluator | None = None,
    executor: Executor | None = None,
    progress: TextIO | None = sys.stderr,
    held_evaluator: Callable[[BisectOptions], Evaluator] | None = None,
) -> BisectRun:
    """Bisect ``opts.good..opts.bad``; returns the bisect.json record and the exit code.

    With ``opts.megatron_lm`` (unless ``opts.descend`` is off) each culprit that moved the pinned
    Megatron-LM is then bisected in Megatron-LM (:mod:`harness.bisect.descend`), with the same
    executor; ``held_evaluator`` builds those second levels' evaluators (default: the real one).
    """
    check_options(opts)
    own_executor = executor is None
    executor = executor or LocalExecutor(opts.jobs)
    try:
        run = _run_level(opts, evaluator, executor, progress)
        if opts.megatron_lm is not None and opts.descend and run.bisection is not None:

            def second(level: BisectOptions) -> BisectDoc:
                return _run_level(level, held_evaluator(level) if held_evaluator else None, executor, progress).doc

            try:
                run.doc.descents = descend.descend(opts, run.doc, second, progress)
            except KeyboardInterrupt as stopped:  # the first level is whole; the descent did not finish
                run.doc.partial = True
                run.message = "interrupted while bisecting Megatron-LM behind a culprit; the first level is complete"
                raise BisectInterrupted(run) from stopped
        return run
    finally:
        if own_executor:
            executor.close()


def _run_level(
    opts: BisectOptions, evaluator: Evaluator | None, executor: Executor, progress: TextIO | None
) -> BisectRun:
    """One bisection: of MB's history, or (``opts.second_level``) of Megatron-LM's with MB held."""
    t0 = time.monotonic()
    repo = open_repo(opts.repo)
    good, bad = repo.check_range(opts.good, opts.bad)
    try:
        commits = repo.commits_between(good, bad, first_parent=opts.first_parent)
    except UsageError:  # a pin off Megatron-LM's first-parent chain: the second level walks around it
        if not (opts.second_level and opts.first_parent):
            raise
        opts = dataclasses.replace(opts, first_parent=False)
        commits = repo.commits_between(good, bad)
        _say(progress, f"{good[:12]} is not on the first-parent history of {bad[:12]}: walking --ancestry-path")
    if repo.is_dirty() and not opts.allow_dirty:
        _say(
            progress,
            f"warning: {repo.path} has uncommitted changes; only committed history is bisected "
            "(the repository is never modified; --allow-dirty silences this)",
        )
    cache_dir = Path(opts.cache_dir).expanduser()
    if opts.use_cache:
        cache_path = cache_dir / "verdicts.sqlite"
    else:  # a private cache: nothing stored earlier is read, the shared one is left alone
        cache_path = Path(opts.out_dir or cache_dir) / "verdicts-nocache.sqlite"
        if cache_path.exists():
            cache_path.unlink()
    hold = hold_mb(opts, cache_dir) if opts.second_level else None  # (MB held, its src/, release)
    held = hold[0] if hold else None
    ws = mlm_workspace(cache_dir, repo) if hold else WorkspaceCache(workspace_dir_for(cache_dir, repo), repo)
    cache: VerdictCache | None = None
    driver: LevelDriver | None = None
    try:
        if not (ws.has_commit(bad) and ws.has_commit(good)):
            ws.sync()  # once, here: evaluations running in parallel never fetch
        if evaluator is None:
            evaluator = (
                core_evaluator(opts, hold[0], hold[1], cache_dir)
                if hold
                else MBEvaluator(
                    repo.path,
                    ws.cache_dir,
                    cache_dir / "runs",
                    opts.suites,
                    opts.keyword,
                    opts.timeout_s,
                    opts.megatron_lm,
                    opts.fork_capacity,
                    opts.cases,
                    casetimes.in_cache(cache_dir),
                )
            )
        bind = getattr(executor, "bind", None)
        if bind is not None:  # a remote executor: do its jobs see the cache dir, which environment do they run?
            evaluator = bind(evaluator)
        cache = VerdictCache(cache_path)
        driver = LevelDriver(opts, repo, commits, evaluator, executor, cache, progress, Axis(held))
        where = f"Megatron-LM commits (Megatron-Bridge held at {held.label})" if held else "commits"
        driver.say(
            f"bisecting {len(commits)} {where} {good[:12]}..{bad[:12]} with {executor.slots} slot(s)"
            f"{f', {opts.retries} retries' if opts.retries else ''}; cache {cache_path}"
        )
        with driver.progress:
            try:
                run = _bisect(driver, ws, good, bad, t0)
            except BisectInterrupted:
                raise
            except KeyboardInterrupt as stopped:
                raise BisectInterrupted(_interrupted(driver, good, bad, t0)) from stopped
        if held:
            run.doc.pin_change = descend.pin_check(run.doc)
        return run
    finally:
        if cache is not None:
            cache.close()
        if hold:
            hold[2]()  # the MB tree held
        if driver is not None:  # workspaces are cheap to rebuild (git archive) and MB trees are ~20 MB each
            for sha in driver.evidence.evaluated | set(driver.evidence.cancelled):
                ws.cleanup(sha)


def _interrupted(driver: LevelDriver, good: str, bad: str, t0: float) -> BisectRun:
    """The record of a bisection stopped midway: what finished, each open case's range left."""
    bisection = driver.bisection
    if bisection is None:
        done = [e for e in (good, bad) if e in driver.evidence.attempts]
        message = (
            "interrupted before both endpoints were evaluated "
            f"({', '.join(e[:12] for e in done) or 'none'} done); nothing was bisected"
        )
    else:
        left = [o for o in bisection.outcomes().values() if o.status is CaseStatus.OPEN]
        message = f"interrupted: {len(left)} case(s) still open, each with the range left to search"
    doc = driver.document(good, bad, bisection, driver.not_bisected, time.monotonic() - t0)
    doc.partial = True
    return BisectRun(doc, 1, message, bisection)


def _say(progress: TextIO | None, text: str) -> None:
    if progress is not None:
        print(text, file=progress, flush=True)


def _bisect(driver: LevelDriver, ws: WorkspaceCache, good: str, bad: str, t0: float) -> BisectRun:
    """Endpoints, then the cases that fail at ``bad`` and pass at ``good``, bisected together."""
    opts, evidence = driver.opts, driver.evidence
    driver.load_cached(driver.commits)
    if evidence.cached_evaluations:
        driver.say(f"reusing {evidence.cached_evaluations} cached evaluation(s) of {len(evidence.attempts)} commit(s)")

    def endpoints(n: int) -> list[str]:
        busy = driver.in_progress()
        return [e for e in (good, bad) if e not in busy and driver.need(e) is not None][:n]

    driver.run(endpoints)
    selection = driver.select_cases(good, bad)
    cases, not_bisected = selection.cases, selection.not_bisected
    driver.not_bisected = not_bisected
    if selection.late:  # GOOD cannot run these: find where each starts running, bisect from there
        for start in latestart.find_starts(driver, good, selection.late):
            driver.late_starts.append(start)
            if start.bisected and start.runs_from:
                cases.append(start.case_id)
                driver.view.starts[start.case_id] = driver.index[start.runs_from]
            else:
                not_bisected.append(NotBisected(start.case_id, start.reason))
            driver.say(f"{start.case_id}: {start.reason}")
    if not cases:
        fails, passes = ("PASSes", "FAILs") if opts.find_fix else ("FAILs", "PASSes")
        if opts.changed and not opts.find_fix:
            fails = "FAILs or CHANGEs"
        msg = f"nothing to bisect: no case {fails} at {bad[:12]} and {passes} at {good[:12]}" + (
            f" ({len(not_bisected)} failing at bad but not passing at good)" if not_bisected else ""
        )
        return BisectRun(driver.document(good, bad, None, not_bisected, time.monotonic() - t0), 1, msg, None)
    bisection = Bisection(driver.commits, sorted(cases))
    driver.bisection = bisection
    for sha in driver.commits:  # endpoints first, then whatever the cache knows
        for evaluation in evidence.attempts.get(sha, []):
            driver.feed(sha, evaluation)
    left = driver.left()
    driver.say(
        f"{len(cases)} case(s) to bisect"
        + (f", {len(not_bisected)} not bisected" if not_bisected else "")
        + f": {left} (with {driver.executor.slots} evaluation(s) at a time)"
    )
    driver.progress.update(status=left)
    driver.run(driver.picker(bisection))
    if opts.confirm:
        blamed: dict[str, list[str]] = {}
        for outcome in bisection.outcomes().values():
            if outcome.status is CaseStatus.FOUND and outcome.culprit:
                blamed.setdefault(outcome.culprit, []).append(outcome.case_id)
        driver.confirmations = confirm.confirm_culprits(driver, ws, bad, blamed)
    doc = driver.document(good, bad, bisection, not_bisected, time.monotonic() - t0)
    ok = all(o.status is CaseStatus.FOUND for o in bisection.outcomes().values())
    return BisectRun(doc, 0 if ok else 1, "", bisection)
