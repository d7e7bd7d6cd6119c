"""Evaluating one commit: the evaluator protocol and the MB evaluator.

An evaluator turns a commit sha into one verdict per case (:class:`~harness.executors.outcome.EvalOutcome`,
the record the executors carry back; re-exported here). The driver
never knows how: the MB evaluator materialises the commit from the private mirror and runs the
golden suites on it (:func:`harness.suiterun.runner.run_suites`); tests and benchmarks pass scripted
ones. Evaluators run wherever the executor puts them (a thread, a cluster job), so they and
their outcomes are plain picklable dataclasses and never touch the verdict cache.

Cache key: (commit, suite key, env key), and the Megatron-LM commit at the second level of a
bisection (:mod:`harness.bisect.axis`). The suite key hashes the harness ``suites/``,
``fixtures/`` and the suite process's code (suite package, ground floor); verdicts are stored per case, and what
each evaluation ran (a whole selection, or the open cases of a probe) is its
:class:`~harness.bisect.scope.Scope`, so a run that selected fewer cases is never taken for one
that needs more, and a later one runs only what is missing (:meth:`MBEvaluator.narrowed`).
The env key is the Python, torch and megatron-core versions. A commit
without ``src/megatron/bridge`` (or without any of the archived paths) is recorded with no
verdicts: a skip for every case. The second level's evaluator (MB held, Megatron-LM commits
walked) is :class:`~harness.bisect.coreeval.CoreEvaluator`, built on :meth:`MBEvaluator.evaluate`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata as md
import json
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from harness import paths
from harness.bisect.closure import closure_hash, suite_hash, suite_process_files
from harness.bisect.scope import Scope, suite_of
from harness.errors import CorruptFile, GitError
from harness.executors.outcome import EvalOutcome
from harness.records.results import CaseResult, RunResult
from harness.repository.gitrepo import open_repo
from harness.repository.pins import PinnedCore, pinned_core
from harness.repository.workspaces import WorkspaceCache


class Evaluator(Protocol):
    """Evaluates one commit. Must be picklable when used with a remote executor."""

    def __call__(self, sha: str) -> EvalOutcome: ...

    def cache_namespace(self) -> tuple[str, str]:
        """(suite key, env key) of the cache entries this evaluator's verdicts belong to."""
        ...


# What an evaluator may also do, declared (the level driver asks ``isinstance``, never probes names):


@runtime_checkable
class Selecting(Protocol):
    """It runs a selection (suites, ``-k``, listed cases): what an endpoint runs whole."""

    @property
    def scope(self) -> Scope: ...


@runtime_checkable
class Narrowing(Protocol):
    """It can run less than its whole selection: the suites an endpoint lacks, a probe's open cases."""

    def narrowed(self, scope: Scope) -> Evaluator: ...


@runtime_checkable
class Costed(Protocol):
    """It knows what its suites cost (:meth:`MBEvaluator.suite_costs`): an endpoint can be cut in parts."""

    def suite_costs(self) -> dict[str, float | None]: ...


@runtime_checkable
class TreeEvaluating(Protocol):
    """It can run a tree that is no commit (``--confirm``: BAD with the culprit reverted)."""

    def evaluate_tree(self, src: Path, label: str, pin_of: str, suites: Sequence[str] | None = None) -> EvalOutcome: ...


@runtime_checkable
class Detailing(Protocol):
    """It keeps the case records of the commits it ran (for verdicts a cache of an older schema
    stored without them)."""

    def details(self, sha: str) -> dict[str, CaseResult]: ...


def env_key() -> str:
    """Versions that decide a verdict besides MB itself and the harness suites."""

    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "none"

    return f"python={platform.python_version()};torch={version('torch')};megatron-core={version('megatron-core')}"


def selection_key(
    content_hash: str, suites: Sequence[str] | None, keyword: str | None, cases: Sequence[str] | None = None
) -> str:
    selection: dict[str, object] = {"content": content_hash, "suites": sorted(suites) if suites else None, "k": keyword}
    if cases is not None:  # only when given: keys of runs that selected by suite and -k stay what they were
        selection["cases"] = sorted(cases)
    return hashlib.sha256(json.dumps(selection, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class MBEvaluator:
    """Materialise a commit of the user's MB repository and run the golden suites on it."""

    repo_path: Path
    workspace_dir: Path
    runs_dir: Path
    suites: tuple[str, ...] | None = None
    keyword: str | None = None
    timeout_s: float = 1800.0
    megatron_lm: Path | None = None  # use the megatron-core each MB commit pins (harness.repository.pins)
    fork_servers: int = 2  # warm fork servers alive at once, one per megatron-core (0: plain subprocesses)
    cases: tuple[str, ...] | None = None  # run only these cases (the second level re-runs the blamed ones)
    case_times: Path | None = None  # where runs remember their case times (harness.records.casetimes)

    def cache_namespace(self) -> tuple[str, str]:
        pkg = paths.PACKAGE
        # everything that decides a verdict: the suites and goldens, and the suite process's own
        # code (the suite package, the ground floor and the suites: harness.bisect.closure), plus
        # the upstream selection
        code = closure_hash(suite_process_files())
        content = (
            suite_hash([paths.suites_dir(), paths.fixtures_dir(), pkg / "suiterun" / "upstream" / "selection.json"])
            + code
        )
        env = env_key() + ("+megatron-core-pinned-by-mb" if self.megatron_lm else "")
        # verdicts are cached per (commit, case): the selection is recorded per evaluation (its
        # Scope), not in the key; the key is the one the default selection always had
        return selection_key(content, None, None), env

    @property
    def scope(self) -> Scope:
        """The whole selection of this evaluator: what an endpoint of a bisection runs."""
        return Scope(self.suites, self.keyword, self.cases)

    def narrowed(self, scope: Scope) -> MBEvaluator:
        """This evaluator running only ``scope`` (the suites an endpoint still lacks, or the open
        cases of a probe: only their suite files are run, only those cases selected)."""
        if scope.cases is not None:
            suites = tuple(sorted({suite_of(c) for c in scope.cases}))
            return dataclasses.replace(self, suites=suites, cases=tuple(scope.cases))
        return dataclasses.replace(self, suites=scope.suites if scope.suites is not None else self.suites)

    def suite_costs(self) -> dict[str, float | None]:
        """Every suite of the whole selection -> the seconds its cases took when they last ran
        (None: not remembered); what an endpoint is cut by (:mod:`harness.bisect.split`). Empty
        for a selection of listed cases, which is never cut."""
        if self.cases is not None:
            return {}
        from harness.records import casetimes
        from harness.suiterun.plan import golden_suites

        seconds: dict[str, float] = {}
        for t in casetimes.load(self.case_times).values():
            seconds[t.suite] = seconds.get(t.suite, 0.0) + t.seconds
        return {s: seconds.get(s) for s in (self.suites or golden_suites())}

    def prepare(self, sha: str) -> None:
        """Materialise ``sha`` in the driver, before a remote executor submits its job: the job
        then finds the tree on the shared cache directory and never reads the user's repository."""
        with contextlib.suppress(GitError):  # the evaluation itself reports it ("cannot materialise")
            WorkspaceCache(self.workspace_dir, self.repo_path).materialize(sha)

    def __call__(self, sha: str) -> EvalOutcome:
        t0 = time.monotonic()
        try:
            tree = WorkspaceCache.prepared(self.workspace_dir, sha) or WorkspaceCache(
                self.workspace_dir, self.repo_path
            ).materialize(sha)
        except GitError as exc:
            return EvalOutcome({}, duration_s=time.monotonic() - t0, note=f"cannot materialise: {exc}")
        return self._pinned(tree / "src", sha, sha, self.suites, t0)

    def evaluate_tree(self, src: Path, label: str, pin_of: str, suites: Sequence[str] | None = None) -> EvalOutcome:
        """Run the suites on a tree that is no commit (``--confirm``: BAD with the culprit reverted).

        ``label`` names the run (its directory under the runs dir, the results' commit field);
        ``pin_of`` is the MB commit whose pinned megatron-core to use with ``--megatron-lm``;
        ``suites`` narrows the selection (the same ``-k`` applies).
        """
        return self._pinned(src, label, pin_of, tuple(suites) if suites else self.suites, time.monotonic())

    def _pinned(self, src: Path, label: str, pin_of: str, suites: tuple[str, ...] | None, t0: float) -> EvalOutcome:
        """Evaluate with the megatron-core MB commit ``pin_of`` pins (``--megatron-lm``), else the installed one."""
        pinned = None
        if self.megatron_lm is not None and (src / "megatron" / "bridge").is_dir():
            try:
                pinned = pinned_core(open_repo(self.repo_path), pin_of, self.megatron_lm, self.runs_dir.parent)
            except GitError as exc:
                return EvalOutcome(
                    {},
                    duration_s=time.monotonic() - t0,
                    note=f"pinned megatron-core unavailable: {exc}: skipped for every case",
                )
        return self.evaluate(src, label, pinned, suites, t0)

    def evaluate(
        self,
        src: Path,
        label: str,
        core: PinnedCore | None,
        suites: tuple[str, ...] | None,
        t0: float,
        core_varies: bool = False,
    ) -> EvalOutcome:
        """Run the suites on MB tree ``src`` with megatron-core ``core`` (None: the installed one).

        ``core_varies``: the second level of a bisection, MB held and ``core`` the Megatron-LM
        commit walked (a megatron-core that does not import with this MB is then untestable).
        """
        from harness.suiterun import runner
        from harness.target import Target

        if not (src / "megatron" / "bridge").is_dir():
            return EvalOutcome(
                {},
                duration_s=time.monotonic() - t0,
                note="no src/megatron/bridge at this commit: skipped for every case",
            )
        # light-import cases go through the fork server of their megatron-core (installed, or the
        # pinned tree): torch and megatron-core are imported once per core, not once per commit
        opts = runner.RunOptions(
            suites=list(suites) if suites else None,
            keyword=self.keyword,
            timeout_s=self.timeout_s,
            fork_servers=self.fork_servers,
            cases=list(self.cases) if self.cases is not None else None,
            case_times=self.case_times,
        )
        tgt = Target(
            src=src,
            commit=label,
            core=core.path if core else None,
            core_pin=core.pin if core else None,
            core_varies=core_varies,
            repo=Path(self.repo_path),
        )
        result = runner.run_suites(tgt, opts, self.runs_dir / label / runner.new_run_id(), progress=None)
        cases = [c for c in result.cases if self.cases is None or c.case_id in self.cases]  # upstream runs whole
        return EvalOutcome(
            {c.case_id: c for c in cases},
            duration_s=time.monotonic() - t0,
            note="; ".join(result.notes),
            core_pin=(core.pin or "") if core else "",
        )

    def details(self, sha: str) -> dict[str, CaseResult]:
        """The case records of the newest kept run of ``sha``."""
        return self.details_of(sha)

    def details_of(self, label: str) -> dict[str, CaseResult]:
        """The case records of the newest kept run named ``label`` (its directory under the runs dir)."""
        for path in sorted((self.runs_dir / label).glob("*/results.json"), reverse=True):
            try:
                run = RunResult.load(path)
            except (CorruptFile, OSError, ValueError, KeyError, TypeError):
                continue
            return {c.case_id: c for c in run.cases}
        return {}
