"""One level of a bisection, driven: the probes in flight, the cache writes, the record.

Why one class: the in-flight set, the cache writes and the bisection's records must stay in
step (a result is cached first, then told to the bisection, then shown; a commit another
bisect stored meanwhile is adopted, not re-run; an evaluation a newer result made moot is
cancelled). The scheduling itself is :func:`harness.executors.local.schedule`, shared with the
SLURM shards; the flow around a level (endpoints, case selection, late starts, confirmation,
the descent) is :mod:`.driver`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from typing import TextIO

from harness.bisect import findings, needs, split
from harness.bisect.algorithm import Bisection, CaseStatus, max_steps
from harness.bisect.axis import Axis
from harness.bisect.cache import CacheKey, Evaluation, VerdictCache
from harness.bisect.document import (
    FIND_CHANGE,
    FIND_FIX,
    FIND_REGRESSION,
    BisectDoc,
    CacheNamespace,
    Confirmation,
    LateStart,
    NotBisected,
    ProbeCost,
    RangeDoc,
    SelectionDoc,
)
from harness.bisect.evaluator import Costed, Detailing, EvalOutcome, Evaluator, Narrowing, Selecting
from harness.bisect.options import BisectOptions
from harness.bisect.scope import Scope
from harness.bisect.view import CaseView, Selection, select_cases
from harness.executors.local import Executor, Handle, schedule
from harness.progress import Progress
from harness.repository.gitrepo import GitRepo


class LevelDriver:
    """One level of a bisection: its commits, evaluator, executor, cache and evidence, and the
    loop that keeps the executor busy with the bisection's probes (:class:`.level.Level` is
    what its helpers see of it)."""

    def __init__(
        self,
        opts: BisectOptions,
        repo: GitRepo,
        commits: list[str],
        evaluator: Evaluator,
        executor: Executor,
        cache: VerdictCache,
        progress: TextIO | None,
        axis: Axis,
    ) -> None:
        self.opts = opts
        self.axis = axis  # MB's history, or Megatron-LM's with MB held
        self.repo = repo
        self.commits = commits
        self.index = {c: i for i, c in enumerate(commits)}
        self.evaluator = evaluator
        self.executor = executor
        self.cache = cache
        self.progress = Progress(progress, "bisect")
        self.suite_key, self.env_key = evaluator.cache_namespace()
        self.evidence = findings.Evidence()
        self.bisection: Bisection | None = None
        self.view = CaseView(opts.find_fix, self.index, changed=opts.changed)  # what the bisection sees
        self.late_starts: list[LateStart] = []  # what was found for each case GOOD cannot run
        self.confirmations: list[Confirmation] = []  # --confirm: one per culprit commit
        self.not_bisected: list[NotBisected] = []  # known once both endpoints are in
        # what a whole evaluation runs (an endpoint), and whether a probe can run less (the open cases)
        self.whole = evaluator.scope if isinstance(evaluator, Selecting) else Scope()  # else: it runs all
        self.can_narrow = isinstance(evaluator, Narrowing)  # it can run less than its whole selection
        self.narrowable = opts.probe_open_cases and self.can_narrow  # intermediate probes run the open cases
        self.endpoints: set[str] = {commits[0], commits[-1]}
        # every suite of the whole selection -> its remembered seconds: an endpoint is cut by them
        self.suite_costs: dict[str, float | None] = (
            evaluator.suite_costs() if self.can_narrow and isinstance(evaluator, Costed) else {}
        )
        self._running: dict[Handle, tuple[str, int, Scope]] = {}  # handle -> (commit, depth, what it runs)
        self._queued: list[tuple[str, Scope]] = []  # attempts waiting for a slot (one entry per attempt)
        self._depth_done = 0  # longest chain of dependent evaluations finished so far
        self.rounds = 0

    # ------------------------------------------------------------ helpers

    def say(self, text: str) -> None:
        self.progress.log(text)

    def left(self) -> str:
        """ "12 commits left, about 3 steps" (steps: rounds of ``slots`` parallel evaluations)."""
        if self.bisection is None:
            return "checking the endpoints"
        n, widest = self.bisection.remaining()
        if not n:
            return "no commit left to probe"
        steps = max_steps(widest + 1, self.executor.slots)
        eta = findings.eta(self.evidence.costs, steps)
        return f"{n} commit{'s' if n != 1 else ''} left, about {steps} step{'s' if steps != 1 else ''}{eta}"

    def key(self, sha: str) -> CacheKey:
        return self.axis.key(sha, self.suite_key, self.env_key)

    def load_cached(self, shas: Sequence[str]) -> None:
        for sha in shas:
            found = self.cache.attempts(self.key(sha))
            if found:
                self.evidence.attempts[sha] = list(found)
                self.evidence.cached_evaluations += len(found)

    def in_progress(self) -> set[str]:
        return {sha for sha, _, _ in self._running.values()} | {sha for sha, _ in self._queued}

    def need(self, sha: str) -> tuple[Scope, int] | None:
        """What ``sha`` still lacks and how many attempts of it: an endpoint (or any commit, when
        probes cannot be narrowed) the whole selection, an intermediate probe the open cases whose
        interval holds it (harness.bisect.needs). None: the cache holds it all."""
        held, want = self.evidence.attempts.get(sha, []), 1 + self.opts.retries
        if self.bisection is None or sha in self.endpoints or not self.narrowable:
            return needs.missing_whole(held, self.whole, want, tuple(self.suite_costs) or None)
        return needs.missing_cases(held, self.bisection.cases_needing(sha), want)

    def feed(self, sha: str, evaluation: Evaluation) -> None:
        """Tell the bisection what ``evaluation`` ran: every case, or only a probe's cases."""
        if self.bisection is not None:
            whole = evaluation.scope.cases is None and evaluation.scope.suites is None
            # a probe ran the cases it was asked for, a part of an endpoint the cases of its suites
            ran = None if whole else [c for c in self.bisection.cases if evaluation.ran(c)]
            self.bisection.record(sha, self.view(sha, evaluation.verdicts), ran)

    def details(self, sha: str) -> findings.Details:
        """The case records of ``sha``, the newest of each: as its evaluations (this run's and the
        cache's) hold them, else, where they hold verdicts only (a cache of an older schema), as
        the evaluator's kept runs do."""
        found = {c: r for e in self.evidence.attempts.get(sha, []) for c, r in e.cases.items()}
        bare = not any(r.diff or r.violations or r.impacts for r in found.values())
        if bare and isinstance(self.evaluator, Detailing):
            kept = self.evidence.details
            if sha not in kept:
                kept[sha] = self.evaluator.details(sha)
            found = {**found, **kept[sha]}
        return found

    # ------------------------------------------------------------ scheduling

    def run(self, pick: Callable[[int], list[str]]) -> None:
        """Keep the executor's slots busy with commits from ``pick(n)`` until it has none
        and nothing is running; record every result as it arrives (:func:`schedule`)."""

        def refill(free: int) -> list[tuple[str, int, Scope]]:
            while True:
                if not self._queued:
                    fresh: list[tuple[float, str, Scope]] = []
                    for sha in pick(free):
                        if sha not in self.evidence.evaluated:  # stored by another bisect sharing the cache?
                            self.adopt(sha)
                        lacking = self.need(sha)
                        if lacking is None:
                            self.replay(sha)
                        else:
                            fresh += [(-cost, sha, part) for part, cost in self.parts(sha, lacking[0])] * lacking[1]
                    fresh.sort(key=lambda f: f[0])  # heaviest part first (stable: pick order otherwise)
                    self._queued += [(sha, part) for _, sha, part in fresh]
                taken = [(sha, self._depth_of(sha), scope) for sha, scope in self._queued[:free]]
                del self._queued[:free]
                if taken or self._running or (not self._queued and not pick(1)):
                    return taken  # (all picked commits were cached and nothing runs: pick again)

        def finished(item: tuple[str, int, Scope], handle: Handle) -> None:
            sha, depth, scope = item
            self.store(sha, handle.result(), scope)
            self._depth_done = max(self._depth_done, depth)
            self.rounds = max(self.rounds, depth)

        schedule(
            self.executor,
            lambda item: self.executor.submit(self._evaluator_for(item[2]), item[0]),
            refill,
            finished,
            running=self._running,
            after=self.drop_moot,
        )

    def _depth_of(self, sha: str) -> int:
        """The round an evaluation started now belongs to: the parts of the endpoints depend on
        nothing (round 1, however many rounds of slots they take), any other on what came before."""
        return 1 if self.bisection is None and sha in self.endpoints else self._depth_done + 1

    def parts(self, sha: str, scope: Scope) -> list[tuple[Scope, float]]:
        """What to run of ``scope`` at ``sha``, as (scope, estimated seconds): an endpoint's whole
        selection (or the suites it lacks) cut into one part per slot (:func:`.split.cut`), so that
        the two endpoints share the slots instead of the smaller one's slot waiting idle."""
        return split.cut(scope, self.suite_costs, self.executor.slots) if sha in self.endpoints else [(scope, 0.0)]

    def drop_moot(self) -> None:
        """Cancel in-flight evaluations of commits that no open case needs any more (k-ary
        speculation: a newer result settled the interval they were probing); on a cluster each
        holds a node. Commits with a recorded attempt keep their retries (flakiness checks)."""
        bisection = self.bisection
        if bisection is None:
            return
        probed = set(bisection.probes)

        def moot(sha: str) -> bool:
            return sha not in probed and not bisection.needs(sha)

        self._queued = [(sha, scope) for sha, scope in self._queued if not moot(sha)]
        for handle, (sha, _, _) in list(self._running.items()):
            if moot(sha) and self.executor.cancel(handle):
                del self._running[handle]
                self.evidence.cancelled.append(sha)
                self.say(f"cancelled {sha[:12]} #{self.index.get(sha, '?')}: no open case needs it any more")

    def _evaluator_for(self, scope: Scope) -> Evaluator:
        """The level's evaluator, narrowed to ``scope`` when it runs less than the whole selection."""
        if scope == self.whole or not isinstance(self.evaluator, Narrowing):
            return self.evaluator
        return self.evaluator.narrowed(scope)

    def store(self, sha: str, outcome: EvalOutcome, scope: Scope | None = None) -> None:
        """Cache first (durable), then tell the bisection, then the user."""
        ev = self.evidence
        scope = scope if scope is not None and self.can_narrow else self.whole  # what really ran
        if outcome.infrastructure:  # the cluster lost the job: a skip for this run, never a cached verdict
            stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            attempt = len(ev.attempts.get(sha, [])) + 1
            evaluation = Evaluation(self.key(sha), attempt, {}, outcome.duration_s, stamp, scope)
            ev.infrastructure.setdefault(sha, []).append(outcome.note)
        else:
            stored = self.cache.record(
                self.key(sha),
                outcome.cases,
                outcome.duration_s,
                up_to=self.opts.retries + 1,
                scope=scope,
            )
            if stored is None:  # another bisect sharing the cache stored this commit meanwhile
                self.adopt(sha)
                self.say(
                    f"{sha[:12]} #{self.index.get(sha, '?')}: stored meanwhile by another bisect; its verdicts used"
                )
                return
            evaluation = stored
            ev.new_evaluations += 1
        ev.evaluated.add(sha)
        if outcome.jobs:
            ev.jobs.setdefault(sha, []).extend(outcome.jobs)
        ev.attempts.setdefault(sha, []).append(evaluation)
        if outcome.note:
            ev.notes.setdefault(sha, []).append(outcome.note)
        self.feed(sha, evaluation)
        ev.costs.setdefault(sha, []).append(
            ProbeCost(
                scope.label(),
                len(evaluation.verdicts),
                round(outcome.duration_s, 2),
                sha in self.endpoints,
                outcome.core_pin,
            )
        )
        counts: dict[str, int] = {}
        for verdict in evaluation.verdicts.values():
            counts[verdict.value] = counts.get(verdict.value, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no verdicts"
        open_cases = ""
        if self.bisection is not None:
            n_open = sum(o.status is CaseStatus.OPEN for o in self.bisection.outcomes().values())
            open_cases = f"; {n_open} case(s) open"
        note = f" ({outcome.note[:160]})" if outcome.note else ""
        self.progress.step(
            f"[{ev.new_evaluations}] {sha[:12]} #{self.index.get(sha, '?')} attempt {evaluation.attempt}: "
            f"ran {scope.label()}: {summary} in {outcome.duration_s:.1f} s{open_cases}{note}",
            status=self.left(),
        )

    def adopt(self, sha: str) -> None:
        """Take the attempts another bisect sharing the cache stored for ``sha`` since we looked."""
        known = self.evidence.attempts.get(sha, [])
        for evaluation in self.cache.attempts(self.key(sha))[len(known) :]:
            self.evidence.attempts.setdefault(sha, []).append(evaluation)
            self.evidence.cached_evaluations += 1
            self.feed(sha, evaluation)

    def picker(self, bisection: Bisection) -> Callable[[int], list[str]]:
        """What :meth:`run` asks for: the bisection's next probes that are not already in flight."""

        def pick(n: int) -> list[str]:
            if bisection.done:
                return []
            busy = self.in_progress()
            return [c for c in bisection.next_probes(n + len(busy)) if c not in busy][:n]

        return pick

    def replay(self, sha: str) -> None:
        """A picked commit whose attempts are all cached: feed them to the bisection."""
        if self.bisection is not None and sha not in self.bisection.probes:
            for evaluation in self.evidence.attempts.get(sha, []):
                self.feed(sha, evaluation)

    # ------------------------------------------------------------ outcome

    def select_cases(self, good: str, bad: str) -> Selection:
        """The cases to bisect, from the endpoints' verdicts of this level's selection only (a
        cache shared with other selections holds other suites' and other ``-k``'s cases too)."""

        def mine(sha: str) -> list[Evaluation]:
            return [needs.in_selection(e, self.whole) for e in self.evidence.attempts.get(sha, [])]

        return select_cases(self.view, mine(good), mine(bad), good, bad, self.opts.bisect_untestable)

    def document(
        self, good: str, bad: str, bisection: Bisection | None, not_bisected: list[NotBisected], duration: float
    ) -> BisectDoc:
        """The bisect.json record of this run."""
        opts, ev = self.opts, self.evidence
        case_ids = list(bisection.cases) if bisection else []
        probes, attempts = findings.probe_tables(self.commits, ev.attempts, case_ids)
        outcomes = [bisection.outcome(c) for c in case_ids] if bisection else []
        cases = findings.case_docs(self.repo, outcomes, ev, bad, self.details, self.axis)
        started_late = {s.case_id: s.reason for s in self.late_starts if s.bisected}
        for case in cases:
            if case.case_id in started_late:
                case.notes.insert(0, started_late[case.case_id])
        return BisectDoc(
            range=RangeDoc(good, bad, len(self.commits), f"{opts.good}..{opts.bad}", opts.first_parent),
            mode=FIND_FIX if opts.find_fix else (FIND_CHANGE if opts.changed else FIND_REGRESSION),
            repo=str(self.repo.path),
            commits=findings.commit_table(self.repo, self.commits),
            probes=probes,
            attempts=attempts,
            cases=cases,
            not_bisected=not_bisected,
            late_starts=list(self.late_starts),
            confirmations=list(self.confirmations),
            notes={sha: list(notes) for sha, notes in ev.notes.items()},
            duration_s=round(duration, 2),
            evaluations=ev.evaluations,
            new_evaluations=ev.new_evaluations,
            cached_evaluations=ev.cached_evaluations,
            rounds=self.rounds,
            jobs=self.executor.slots,
            retries=opts.retries,
            selection=SelectionDoc(list(opts.suites) if opts.suites else None, opts.keyword),
            cache=CacheNamespace(self.suite_key, self.env_key),
            finished=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            infrastructure={sha: list(n) for sha, n in ev.infrastructure.items()},
            cancelled=list(ev.cancelled),
            cluster_jobs={sha: list(jobs) for sha, jobs in ev.jobs.items()},
            held=self.axis.held,
            probe_costs={sha: list(c) for sha, c in ev.costs.items()},
        )
