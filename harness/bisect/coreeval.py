"""The second level's evaluator: MB held at one tree, the megatron-core of one Megatron-LM commit after another.

The MB tree is the culprit's (``--mb-at SHA`` of ``--mb-repo``, materialised privately like any
bisected commit) or a source tree (``--mb-held-src``); each Megatron-LM commit's ``megatron/`` tree
comes from the same private mirror the pinned trees of the first level use
(:func:`harness.repository.pins.core_at`), so the pins both levels share are extracted once. Each
evaluation is :meth:`MBEvaluator.evaluate` with that core marked as varying: a megatron-core
that does not import with the MB held is untestable for the cases it stops (a skip), while what
it does once imported is judged like any code under test.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.bisect.closure import suite_hash
from harness.bisect.document import HeldMB
from harness.bisect.evaluator import EvalOutcome, MBEvaluator
from harness.bisect.options import BisectOptions
from harness.bisect.scope import Scope
from harness.errors import GitError, UsageError
from harness.records import casetimes
from harness.records.results import CaseResult
from harness.repository.gitrepo import open_repo
from harness.repository.pins import core_at
from harness.repository.workspaces import WorkspaceCache, workspace_dir_for
from harness.target import Target


@dataclass(frozen=True)
class CoreEvaluator:
    """Evaluate Megatron-LM commits under one MB tree (picklable, like :class:`MBEvaluator`)."""

    mb: MBEvaluator  # suites, cases, -k, timeout, runs dir, fork servers
    held: str  # HeldMB.sha: the MB commit, or the source tree's content id
    mb_src: Path  # src/ of the MB held
    mlm_repo: Path
    cache_dir: Path

    def cache_namespace(self) -> tuple[str, str]:
        return self.mb.cache_namespace()

    @property
    def scope(self) -> Scope:
        return self.mb.scope

    def narrowed(self, scope: Scope) -> CoreEvaluator:
        return dataclasses.replace(self, mb=self.mb.narrowed(scope))

    def suite_costs(self) -> dict[str, float | None]:
        return self.mb.suite_costs()

    def label(self, sha: str) -> str:
        """The run's name (its directory under the runs dir, the results' commit field)."""
        return f"{self.held[:12]}-mlm-{sha[:12]}"

    def __call__(self, sha: str) -> EvalOutcome:
        t0 = time.monotonic()
        try:
            core = core_at(self.mlm_repo, sha, self.cache_dir)
        except (GitError, UsageError) as exc:
            return EvalOutcome(
                {}, duration_s=time.monotonic() - t0, note=f"megatron-core unavailable: {exc}: skipped for every case"
            )
        return self.mb.evaluate(self.mb_src, self.label(sha), core, self.mb.suites, t0, core_varies=True)

    def details(self, sha: str) -> dict[str, CaseResult]:
        return self.mb.details_of(self.label(sha))


def hold_mb(opts: BisectOptions, cache_dir: Path) -> tuple[HeldMB, Path, Callable[[], None]]:
    """(the MB held, its src/ directory, how to remove what was materialised for it)."""
    if opts.mb_held_src is not None:
        src = Target.from_args(str(opts.mb_held_src)).src
        assert src is not None  # from_args raises a UsageError for a tree without megatron/bridge
        return HeldMB(f"tree-{suite_hash([src])[:40]}", src=str(src)), src, lambda: None
    if opts.mb_at is None or opts.mb_repo is None:
        raise UsageError("the second level needs --mb-at SHA with --mb-repo PATH, or --mb-held-src PATH")
    repo = open_repo(opts.mb_repo)
    sha = repo.resolve(opts.mb_at)
    ws = WorkspaceCache(workspace_dir_for(cache_dir, repo), repo)
    if not ws.has_commit(sha):
        ws.sync()
    src = ws.materialize(sha) / "src"
    if not (src / "megatron" / "bridge").is_dir():
        raise UsageError(f"--mb-at {opts.mb_at}: {repo.path} has no src/megatron/bridge at {sha[:12]}")
    subject = repo.commit_summaries([sha])[sha].subject
    return HeldMB(sha, repo=str(repo.path), subject=subject), src, lambda: ws.cleanup(sha)


def core_evaluator(opts: BisectOptions, held: HeldMB, src: Path, cache_dir: Path) -> CoreEvaluator:
    mb = MBEvaluator(
        Path(held.repo or held.src),
        cache_dir,  # unused: the MB tree is given, never materialised per evaluation
        cache_dir / "runs",
        opts.suites,
        opts.keyword,
        opts.timeout_s,
        None,
        opts.fork_capacity,
        opts.cases,
        casetimes.in_cache(cache_dir),
    )
    return CoreEvaluator(mb, held.sha, src, Path(opts.repo), cache_dir)
