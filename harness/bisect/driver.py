"""The bisect driver: git range -> evaluations (cached, parallel, retried) -> culprits.

Glue between the pure pieces: :mod:`harness.gitrepo` (read-only range and metadata,
private workspaces), an *evaluator* (one commit -> one verdict per case; for MB that is
materialise + :func:`harness.runner.run_suites`), an :class:`~harness.bisect.executor.Executor`
(where evaluations run), :class:`~harness.bisect.cache.VerdictCache` (every attempt kept,
one transaction each) and :class:`~harness.bisect.algorithm.Bisection` (what to probe next).

Flow:

1. Resolve and validate GOOD..BAD (unknown ref, not an ancestor, empty range: UsageError),
   list the candidate commits (``--ancestry-path``, or ``--first-parent``).
2. Evaluate both endpoints. The cases to bisect are those that FAIL at BAD and PASS at GOOD;
   the others failing at BAD are listed as "not bisected" with the reason. None: stop.
3. Feed every cached evaluation of a commit in the range to the bisection (a rerun, a kill -9
   then rerun, or a wider range reuses them), then keep ``slots`` evaluations in flight: ask
   ``Bisection.next_probes`` for commits not already in flight, start them, and record each
   result in the cache *and* the bisection the moment it arrives.
4. Build the ``bisect.json`` document (the shape :func:`harness.report.render.render_bisect_report`
   reads) with commit metadata, probes, per-case outcome, culprit diff and golden diff.

Retries (``retries=N``): each probed commit is evaluated 1+N times (attempts run in parallel
when slots allow), each attempt recorded separately so the bisection sees disagreement (FLAKY).
Commits known only from the cache keep the attempts they have.

Cache key: (commit, suite key, env key). The suite key hashes the harness ``suites/``,
``fixtures/`` and ``harness/adapters`` *and the selection* (``--suite``, ``-k``): a run that
selected fewer cases must not be reused for one that needs more. The env key is the Python,
torch and megatron-core versions. A commit without ``src/megatron/bridge`` (or without any
of the archived paths) is recorded with no verdicts: a skip for every case.

Disk: workspaces (``<cache>/workspaces/<repo>/trees/<sha>``) of the commits a run evaluated
are removed when it ends (an MB tree is ~20 MB; rebuilding one is a ``git archive``); the
suite run directories (``<cache>/runs/<sha>/<run-id>``: results.json, obtained values) are
kept, they hold the golden diffs the report shows for cached verdicts.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata as md
import json
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from harness.bisect.algorithm import Bisection, CaseOutcome, CaseStatus
from harness.bisect.cache import CacheKey, Evaluation, VerdictCache, suite_hash
from harness.bisect.executor import Executor, Handle, LocalExecutor
from harness import paths
from harness.errors import CorruptFile, GitError, UsageError
from harness.gitrepo import GitRepo, WorkspaceCache, open_repo
from harness.verdict import Verdict, is_flaky, settle

BISECT_KIND = "harness-bisect"
BISECT_SCHEMA = 1
MAX_DIFF_CHARS = 200_000


# ------------------------------------------------------------------------------ evaluators


@dataclass
class EvalOutcome:
    """One evaluation of one commit, as an evaluator returns it (picklable)."""

    verdicts: dict[str, Verdict]
    messages: dict[str, str] = field(default_factory=dict)
    details: dict[str, dict[str, str]] = field(default_factory=dict)  # case -> {"diff", "source"}
    duration_s: float = 0.0
    note: str = ""  # why there are no verdicts, timeouts...


class Evaluator(Protocol):
    """Evaluates one commit. Must be picklable when used with a remote executor."""

    def __call__(self, sha: str) -> EvalOutcome: ...

    def cache_namespace(self) -> tuple[str, str]:
        """(suite key, env key) of the cache entries this evaluator's verdicts belong to."""
        ...


def env_key() -> str:
    """Versions that decide a verdict besides MB itself and the harness suites."""
    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "none"
    return f"python={platform.python_version()};torch={version('torch')};megatron-core={version('megatron-core')}"


def selection_key(content_hash: str, suites: Sequence[str] | None, keyword: str | None) -> str:
    doc = json.dumps({"content": content_hash, "suites": sorted(suites) if suites else None, "k": keyword},
                     sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()


@dataclass(frozen=True)
class MBEvaluator:
    """Materialise a commit of the user's MB repository and run the golden suites on it."""

    repo_path: Path
    workspace_dir: Path
    runs_dir: Path
    suites: tuple[str, ...] | None = None
    keyword: str | None = None
    timeout_s: float = 1800.0
    megatron_lm: Path | None = None  # use the megatron-core each MB commit pins (harness.pins)

    def cache_namespace(self) -> tuple[str, str]:
        pkg = paths.PACKAGE
        # everything that decides a verdict: suites, goldens, adapters, CPU stand-ins, the
        # plugin's classification, golden comparison and the upstream selection
        content = suite_hash([paths.SUITES_DIR, paths.FIXTURES_DIR, pkg / "adapters", pkg / "standins", pkg / "golden",
                              pkg / "plugin.py", pkg / "upstream"])
        env = env_key() + ("+megatron-core-pinned-by-mb" if self.megatron_lm else "")
        return selection_key(content, self.suites, self.keyword), env

    def __call__(self, sha: str) -> EvalOutcome:
        from harness import runner
        from harness.target import Target

        t0 = time.monotonic()
        try:
            tree = WorkspaceCache(self.workspace_dir, self.repo_path).materialize(sha)
        except GitError as exc:
            return EvalOutcome({}, duration_s=time.monotonic() - t0, note=f"cannot materialise: {exc}")
        src = tree / "src"
        if not (src / "megatron" / "bridge").is_dir():
            return EvalOutcome({}, duration_s=time.monotonic() - t0,
                               note="no src/megatron/bridge at this commit: skipped for every case")
        pinned = None
        if self.megatron_lm is not None:
            from harness.pins import pinned_core

            try:
                pinned = pinned_core(open_repo(self.repo_path), sha, self.megatron_lm, self.runs_dir.parent)
            except GitError as exc:
                return EvalOutcome({}, duration_s=time.monotonic() - t0,
                                   note=f"pinned megatron-core unavailable: {exc}: skipped for every case")
        # light-import cases go through a per-thread fork server: torch and megatron-core are
        # imported once per bisect instead of once per commit (not with a per-commit pinned core)
        opts = runner.RunOptions(suites=list(self.suites) if self.suites else None, keyword=self.keyword,
                                 timeout_s=self.timeout_s, fork_server=pinned is None)
        tgt = Target(src=src, commit=sha, core=pinned.path if pinned else None, core_pin=pinned.pin if pinned else None)
        result = runner.run_suites(tgt, opts, self.runs_dir / sha / runner.new_run_id(), progress=None)
        return EvalOutcome(
            verdicts={c.case_id: c.verdict for c in result.cases},
            messages={c.case_id: c.message for c in result.cases},
            details={c.case_id: {"diff": c.diff or c.message, "source": c.source} for c in result.cases},
            duration_s=time.monotonic() - t0,
            note="; ".join(result.notes),
        )

    def details(self, sha: str) -> dict[str, dict[str, str]]:
        """Golden diffs of the newest kept run of ``sha`` (for verdicts that came from the cache)."""
        from harness.results import RunResult

        for path in sorted((self.runs_dir / sha).glob("*/results.json"), reverse=True):
            try:
                run = RunResult.load(path)
            except (CorruptFile, OSError, ValueError, KeyError, TypeError):
                continue
            return {c.case_id: {"diff": c.diff or c.message, "source": c.source} for c in run.cases}
        return {}


# ------------------------------------------------------------------------------ options


def workspace_dir_for(cache_dir: Path, repo: GitRepo) -> Path:
    """One mirror + trees per user repository, so one cache dir can serve several repos."""
    key = hashlib.sha256(str(Path(repo.git_dir).resolve()).encode()).hexdigest()[:16]
    return cache_dir / "workspaces" / key


@dataclass
class BisectOptions:
    repo: Path
    good: str
    bad: str
    first_parent: bool = False
    jobs: int = 1
    retries: int = 0
    timeout_s: float = 1800.0
    use_cache: bool = True
    cache_dir: Path = field(default_factory=paths.cache_dir)
    suites: tuple[str, ...] | None = None
    keyword: str | None = None
    out_dir: Path | None = None
    allow_dirty: bool = False
    megatron_lm: Path | None = None  # a Megatron-LM repository: use the megatron-core each commit pins
    find_fix: bool = False  # bisect for the first commit where failing cases PASS (git bisect's old/new terms)


@dataclass
class BisectRun:
    """What :func:`run_bisection` hands back."""

    doc: dict[str, Any]  # the bisect.json payload
    exit_code: int  # 0 every bisected case FOUND, 1 otherwise
    message: str = ""  # why nothing was bisected, when that is the case
    bisection: Bisection | None = None


# ------------------------------------------------------------------------------ driver


class _Driver:
    def __init__(self, opts: BisectOptions, repo: GitRepo, commits: list[str], evaluator: Evaluator,
                 executor: Executor, cache: VerdictCache, progress: TextIO | None) -> None:
        self.opts = opts
        self.repo = repo
        self.commits = commits
        self.index = {c: i for i, c in enumerate(commits)}
        self.evaluator = evaluator
        self.executor = executor
        self.cache = cache
        self.progress = progress
        self.suite_key, self.env_key = evaluator.cache_namespace()
        self.attempts: dict[str, list[Evaluation]] = {}  # commit -> attempts (cached + new)
        self.details: dict[str, dict[str, dict[str, str]]] = {}
        self.notes: dict[str, list[str]] = {}
        self.new_evaluations = 0
        self.cached_evaluations = 0
        self.evaluated: set[str] = set()  # commits evaluated (not just read from the cache) by this run
        self.bisection: Bisection | None = None
        self._running: dict[Handle, tuple[str, int]] = {}  # handle -> (commit, depth)
        self._queued: list[str] = []  # attempts waiting for a slot (one entry per attempt)
        self._depth_done = 0  # longest chain of dependent evaluations finished so far
        self.rounds = 0

    # ------------------------------------------------------------ helpers

    def say(self, text: str) -> None:
        if self.progress is not None:
            print(text, file=self.progress, flush=True)

    def view(self, verdicts: Mapping[str, Verdict]) -> dict[str, Verdict]:
        """Verdicts as the bisection sees them: with --find-fix, PASS and FAIL swap roles, so the
        "first bad" commit the algorithm finds is the first commit where a failing case passes.
        The cache and the report keep the real verdicts."""
        if not self.opts.find_fix:
            return dict(verdicts)
        swap = {Verdict.PASS: Verdict.FAIL, Verdict.FAIL: Verdict.PASS}
        return {c: swap.get(v, v) for c, v in verdicts.items()}

    def key(self, sha: str) -> CacheKey:
        return CacheKey(sha, self.suite_key, self.env_key)

    def load_cached(self, shas: Sequence[str]) -> None:
        for sha in shas:
            found = self.cache.attempts(self.key(sha))
            if found:
                self.attempts[sha] = list(found)
                self.cached_evaluations += len(found)

    def in_progress(self) -> set[str]:
        return {sha for sha, _ in self._running.values()} | set(self._queued)

    def want_attempts(self, sha: str) -> int:
        """Attempts still to run for a newly probed commit (cached ones count)."""
        return max(0, 1 + self.opts.retries - len(self.attempts.get(sha, [])))

    # ------------------------------------------------------------ scheduling

    def run(self, pick: Callable[[int], list[str]]) -> None:
        """Keep the executor's slots busy with commits from ``pick(n)`` until it has none
        and nothing is running; record every result as it arrives."""
        while True:
            free = self.executor.slots - len(self._running)
            if free > 0 and not self._queued:
                for sha in pick(free):
                    self._queued += [sha] * self.want_attempts(sha)
                    if not self.want_attempts(sha):
                        self.replay(sha)
            while self._queued and len(self._running) < self.executor.slots:
                sha = self._queued.pop(0)
                depth = self._depth_done + 1
                self._running[self.executor.submit(self.evaluator, sha)] = (sha, depth)
            if not self._running:
                if self._queued:
                    continue
                if not pick(1):
                    return
                continue
            for handle in self.executor.wait_any(list(self._running)):
                sha, depth = self._running.pop(handle)
                self.store(sha, handle.result())
                self._depth_done = max(self._depth_done, depth)
                self.rounds = max(self.rounds, depth)

    def store(self, sha: str, outcome: EvalOutcome) -> None:
        """Cache first (durable), then tell the bisection, then the user."""
        ev = self.cache.record(self.key(sha), outcome.verdicts, outcome.messages, outcome.duration_s)
        self.new_evaluations += 1
        self.evaluated.add(sha)
        self.attempts.setdefault(sha, []).append(ev)
        if outcome.details:
            self.details[sha] = outcome.details
        if outcome.note:
            self.notes.setdefault(sha, []).append(outcome.note)
        if self.bisection is not None:
            self.bisection.record(sha, self.view(ev.verdicts))
        counts: dict[str, int] = {}
        for v in ev.verdicts.values():
            counts[v.value] = counts.get(v.value, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no verdicts"
        open_cases = ""
        if self.bisection is not None:
            n_open = sum(o.status is CaseStatus.OPEN for o in self.bisection.outcomes().values())
            open_cases = f"; {n_open} case(s) open"
        note = f" ({outcome.note[:160]})" if outcome.note else ""
        self.say(f"[{self.new_evaluations}] {sha[:12]} #{self.index.get(sha, '?')} attempt {ev.attempt}: "
                 f"{summary} in {outcome.duration_s:.1f} s{open_cases}{note}")

    def replay(self, sha: str) -> None:
        """A picked commit whose attempts are all cached: feed them to the bisection."""
        if self.bisection is not None and sha not in self.bisection.probes:
            for ev in self.attempts.get(sha, []):
                self.bisection.record(sha, self.view(ev.verdicts))


def _commit_meta(repo: GitRepo, shas: Sequence[str]) -> dict[str, dict[str, str]]:
    """sha -> subject/author/date for many commits with few git calls (read-only ``show -s``)."""
    meta: dict[str, dict[str, str]] = {}
    for i in range(0, len(shas), 400):
        chunk = list(shas[i:i + 400])
        raw = repo.git("show", "-s", "--no-show-signature", "--format=%H%x00%s%x00%an%x00%aI%x01", *chunk)
        for rec in raw.stdout.decode("utf-8", "replace").split("\x01"):
            fields = rec.strip("\n").split("\x00")
            if len(fields) == 4:
                meta[fields[0]] = {"sha": fields[0], "subject": fields[1], "author": fields[2], "date": fields[3]}
    return meta


def _combined(values: list[Verdict | None]) -> str:
    """One verdict value per (commit, case) for the report's probe table."""
    if is_flaky(values):
        return "flaky"
    settled = settle(values)
    return settled.value if settled else Verdict.UNTESTABLE.value


def run_bisection(opts: BisectOptions, *, evaluator: Evaluator | None = None, executor: Executor | None = None,
                  progress: TextIO | None = sys.stderr) -> BisectRun:
    """Bisect ``opts.good..opts.bad``; returns the bisect.json payload and the exit code."""
    t0 = time.monotonic()
    if opts.jobs < 1:
        raise UsageError("-j must be at least 1")
    if opts.retries < 0:
        raise UsageError("--retries must be 0 or more")
    repo = open_repo(opts.repo)
    good, bad = repo.check_range(opts.good, opts.bad)
    commits = repo.commits_between(good, bad, first_parent=opts.first_parent)
    if repo.is_dirty() and not opts.allow_dirty and progress is not None:
        print(f"warning: {repo.path} has uncommitted changes; only committed history is bisected "
              "(the repository is never modified; --allow-dirty silences this)", file=progress)
    cache_dir = Path(opts.cache_dir).expanduser()
    ws_dir = workspace_dir_for(cache_dir, repo)
    ws = WorkspaceCache(ws_dir, repo)
    if not (ws.has_commit(bad) and ws.has_commit(good)):
        ws.sync()  # once, here: evaluations running in parallel never fetch
    if evaluator is None:
        evaluator = MBEvaluator(repo.path, ws_dir, cache_dir / "runs", opts.suites, opts.keyword, opts.timeout_s,
                                opts.megatron_lm)
    if opts.use_cache:
        cache_path = cache_dir / "verdicts.sqlite"
    else:  # a private cache: nothing stored earlier is read, the shared one is left alone
        cache_path = Path(opts.out_dir or cache_dir) / "verdicts-nocache.sqlite"
        if cache_path.exists():
            cache_path.unlink()
    own_executor = executor is None
    executor = executor or LocalExecutor(opts.jobs)
    cache = VerdictCache(cache_path)
    d: _Driver | None = None
    try:
        d = _Driver(opts, repo, commits, evaluator, executor, cache, progress)
        d.say(f"bisecting {len(commits)} commits {good[:12]}..{bad[:12]} with {executor.slots} slot(s)"
              f"{f', {opts.retries} retries' if opts.retries else ''}; cache {cache_path}")
        d.load_cached(commits)
        if d.cached_evaluations:
            d.say(f"reusing {d.cached_evaluations} cached evaluation(s) of {len(d.attempts)} commit(s)")
        endpoints = [good, bad]
        d.run(lambda n: [e for e in endpoints if e not in d.in_progress()
                         and len(d.attempts.get(e, [])) < 1 + opts.retries][:n])
        cases, not_bisected = _select_cases(d, good, bad)
        if not cases:
            fails, passes = ("PASSes", "FAILs") if opts.find_fix else ("FAILs", "PASSes")
            msg = (f"nothing to bisect: no case {fails} at {bad[:12]} and {passes} at {good[:12]}"
                   + (f" ({len(not_bisected)} failing at bad but not passing at good)" if not_bisected else ""))
            doc = _document(d, good, bad, None, not_bisected, time.monotonic() - t0)
            return BisectRun(doc, 1, msg, None)
        b = Bisection(commits, cases)
        d.bisection = b
        for sha in commits:  # endpoints first, then whatever the cache knows
            for ev in d.attempts.get(sha, []):
                b.record(sha, d.view(ev.verdicts))
        d.say(f"{len(cases)} case(s) to bisect" + (f", {len(not_bisected)} not bisected" if not_bisected else ""))

        def pick(n: int) -> list[str]:
            if b.done:
                return []
            busy = d.in_progress()
            return [c for c in b.next_probes(n + len(busy)) if c not in busy][:n]

        d.run(pick)
        doc = _document(d, good, bad, b, not_bisected, time.monotonic() - t0)
        ok = all(o.status is CaseStatus.FOUND for o in b.outcomes().values())
        return BisectRun(doc, 0 if ok else 1, "", b)
    finally:
        cache.close()
        if own_executor:
            executor.close()
        if d is not None:  # workspaces are cheap to rebuild (git archive) and MB trees are ~20 MB each
            for sha in d.evaluated:
                ws.cleanup(sha)


def _select_cases(d: _Driver, good: str, bad: str) -> tuple[list[str], list[dict[str, str]]]:
    """Cases that FAIL at bad and PASS at good; the other bad failures with the reason."""
    at_bad: dict[str, set[Verdict]] = {}
    at_good: dict[str, set[Verdict]] = {}
    for ev in d.attempts.get(bad, []):
        for c, v in d.view(ev.verdicts).items():
            at_bad.setdefault(c, set()).add(v)
    for ev in d.attempts.get(good, []):
        for c, v in d.view(ev.verdicts).items():
            at_good.setdefault(c, set()).add(v)
    cases, skipped = [], []
    for case in sorted(c for c, vs in at_bad.items() if Verdict.FAIL in vs):
        seen = at_good.get(case, set())
        if Verdict.PASS in seen:
            cases.append(case)
        else:
            if d.opts.find_fix and Verdict.FAIL in seen:
                continue  # really passes at both ends: nothing was fixed, nothing to report
            why = "fails at good too" if Verdict.FAIL in seen else (
                f"{'/'.join(sorted(v.value for v in seen))} at good" if seen else "not run at good")
            skipped.append({"case_id": case, "reason": why})
    return cases, skipped


def _document(d: _Driver, good: str, bad: str, b: Bisection | None, not_bisected: list[dict[str, str]],
              duration: float) -> dict[str, Any]:
    """The bisect.json payload (the shape render_bisect_report reads, plus extras)."""
    meta = _commit_meta(d.repo, d.commits)
    commits = [meta.get(c, {"sha": c, "subject": "", "author": "", "date": ""}) for c in d.commits]
    case_ids = list(b.cases) if b else []
    probes: dict[str, dict[str, str]] = {}
    attempts: dict[str, list[dict[str, str]]] = {}
    for sha in d.commits:
        evs = d.attempts.get(sha)
        if not evs:
            continue
        ids = sorted({c for ev in evs for c in ev.verdicts} | set(case_ids))
        probes[sha] = {c: _combined([ev.verdicts.get(c) for ev in evs]) for c in ids}
        attempts[sha] = [{c: v.value for c, v in sorted(ev.verdicts.items())} for ev in evs]
    cases = []
    culprit_cache: dict[str, dict[str, Any]] = {}
    for case_id in case_ids:
        o = b.outcome(case_id) if b else None
        assert o is not None
        cases.append(_case_doc(d, o, culprit_cache, bad))
    return {
        "mode": "find-fix" if d.opts.find_fix else "find-regression",
        "range": {"good": good, "bad": bad, "n_commits": len(d.commits),
                  "given": f"{d.opts.good}..{d.opts.bad}", "first_parent": d.opts.first_parent},
        "repo": str(d.repo.path),
        "commits": commits,
        "probes": probes,
        "attempts": attempts,
        "cases": cases,
        "not_bisected": not_bisected,
        "notes": {sha: notes for sha, notes in d.notes.items()},
        "duration_s": round(duration, 2),
        "evaluations": sum(len(a) for a in d.attempts.values()),
        "new_evaluations": d.new_evaluations,
        "cached_evaluations": d.cached_evaluations,
        "rounds": d.rounds,
        "jobs": d.executor.slots,
        "retries": d.opts.retries,
        "selection": {"suites": list(d.opts.suites) if d.opts.suites else None, "keyword": d.opts.keyword},
        "cache": {"suite_key": d.suite_key, "env_key": d.env_key},
        "finished": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _details(d: _Driver, sha: str) -> dict[str, dict[str, str]]:
    if sha not in d.details and hasattr(d.evaluator, "details"):
        d.details[sha] = d.evaluator.details(sha)  # type: ignore[attr-defined]
    return d.details.get(sha, {})


# Paths whose changes can affect packing behaviour (the culprit's diff is limited to these; the
# full file list is still shown). Patterns are git pathspecs relative to the repository root.
PACKING_PATHSPECS: tuple[str, ...] = (
    "src/megatron/bridge/data/packing", "src/megatron/bridge/data/datasets/packed_sequence.py",
    "src/megatron/bridge/data/datasets/packing_utils.py", "src/megatron/bridge/data/datasets/packed_parquet.py",
    "src/megatron/bridge/data/datasets/sft.py", "src/megatron/bridge/data/datasets/utils.py",
    "src/megatron/bridge/data/sequence_batching.py", "src/megatron/bridge/training/utils/packed_seq_utils.py",
    "src/megatron/bridge/training/gpt_step.py", "src/megatron/bridge/training/vlm_step.py",
    "src/megatron/bridge/training/config.py", "src/megatron/bridge/data/builders",
)


def _packing_diff(d: _Driver, sha: str) -> tuple[str, str]:
    """(diff limited to packing-related files, scope note); the whole src/ diff when none is touched."""
    diff = d.repo.diff(sha, PACKING_PATHSPECS)
    scope = "packing-related files"
    if not diff.strip():
        diff, scope = d.repo.diff(sha, ("src",)), "all of src/ (no packing-related file changed)"
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n... diff truncated at {MAX_DIFF_CHARS} characters\n"
    return diff, scope


def _case_doc(d: _Driver, o: CaseOutcome, culprit_cache: dict[str, dict[str, Any]], bad: str) -> dict[str, Any]:
    culprit = None
    if o.status is CaseStatus.FOUND and o.culprit:
        if o.culprit not in culprit_cache:
            info = d.repo.commit_info(o.culprit, "src")
            diff, scope = _packing_diff(d, o.culprit)
            culprit_cache[o.culprit] = {"sha": info.sha, "subject": info.subject, "author": info.author,
                                        "email": info.email, "date": info.date, "files": list(info.files),
                                        "diff": diff, "diff_scope": scope}
        culprit = culprit_cache[o.culprit]
    where = o.culprit or bad
    detail = _details(d, where).get(o.case_id) or _details(d, bad).get(o.case_id) or {}
    message = ""
    for ev in reversed(d.attempts.get(where, [])):
        if o.case_id in ev.messages and ev.messages[o.case_id]:
            message = ev.messages[o.case_id]
            break
    return {
        "case_id": o.case_id,
        "status": o.status.value,
        "culprit": culprit,
        "last_good": o.last_good,
        "candidates": list(o.candidates),
        "flaky_commits": list(o.flaky_commits),
        "evaluations": o.evaluations,
        "notes": list(o.notes),
        "golden_diff": detail.get("diff") or message,
        "source": detail.get("source") or "golden",
    }


# ------------------------------------------------------------------------------ outputs


def write_outputs(doc: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """bisect.json (atomic, versioned) and report.html in ``out_dir``."""
    from harness.atomicio import write_versioned_json
    from harness.report.render import render_bisect_report

    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "bisect.json"
    write_versioned_json(json_path, BISECT_KIND, BISECT_SCHEMA, doc)
    report = render_bisect_report(doc, out_dir / "report.html")
    return json_path, Path(report)


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The terminal summary: one line per case, then one block per culprit commit."""
    rng = doc["range"]
    lines = [f"bisected {rng.get('given', '')} ({rng['n_commits']} commits, {rng['good'][:12]}..{rng['bad'][:12]}): "
             f"{doc['evaluations']} evaluations ({doc['new_evaluations']} new, {doc['cached_evaluations']} cached), "
             f"{len(doc['probes'])} commits probed, {doc['rounds']} rounds, {doc['duration_s']:.1f} s"]
    by_sha = {c["sha"]: c for c in doc["commits"]}
    first = "first fixed" if doc.get("mode") == "find-fix" else "first bad"
    cases = doc["cases"]
    width = min(max((len(c["case_id"]) for c in cases), default=10), 90)
    for c in cases:
        st = c["status"]
        if st == "found":
            what = f"{first} {c['culprit']['sha'][:12]}"
        elif st == "ambiguous":
            what = f"{first} is one of " + ", ".join(s[:12] for s in c["candidates"])
        elif st == "flaky":
            what = "flaky at " + ", ".join(s[:12] for s in c["flaky_commits"])
        else:
            what = "; ".join(c["notes"]) or st
        lines.append(f"  {c['case_id']:<{width}}  {st:<14} {what}  [{c['evaluations']} evaluations]")
    for nb in doc.get("not_bisected", []):
        lines.append(f"  {nb['case_id']:<{width}}  {'not bisected':<14} {nb['reason']}")
    culprits: dict[str, list[str]] = {}
    for c in cases:
        if c["culprit"]:
            culprits.setdefault(c["culprit"]["sha"], []).append(c["case_id"])
    for sha, ids in culprits.items():
        cul = next(c["culprit"] for c in cases if c["culprit"] and c["culprit"]["sha"] == sha)
        lines += ["", f"{first} commit {sha[:12]}  {cul['subject']}",
                  f"  author: {cul['author']} <{cul.get('email', '')}>   date: {cul['date']}",
                  "  files under src/: " + (", ".join(cul["files"]) or "(none)"),
                  f"  cases ({len(ids)}): " + ", ".join(ids[:6]) + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")]
    for c in cases:
        if c["status"] == "ambiguous":
            lines += ["", f"{c['case_id']}: the {first} commit is one of (all but the last were skipped):"]
            lines += [f"  {s[:12]}  {by_sha.get(s, {}).get('subject', '')}" for s in c["candidates"]]
    return lines
