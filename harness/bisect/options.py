"""What ``harness bisect`` is asked to do (:class:`BisectOptions`), and which options cannot go together.

One record for both levels of a bisection: MB's history (``repo`` a Megatron-Bridge repository,
optionally with ``megatron_lm``), or Megatron-LM's with MB held fixed (``mb_at`` of ``mb_repo``,
or ``mb_held_src``; ``repo`` then a Megatron-LM repository). The descent from the first level to the
second (:mod:`harness.bisect.descend`) derives the second level's options from the first's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness import paths
from harness.errors import UsageError


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
    changed: bool = False  # bisect golden changes too: CHANGED counts as bad (never labelled a regression)
    strict_good: bool = False  # a case GOOD cannot run is not bisected from where it starts running
    confirm: bool = False  # revert each culprit on top of BAD in a private workspace and re-run its cases
    # warm fork servers alive at once (per megatron-core and import mode); 0: none; None: 2 per
    # evaluation that runs at once, plus one pair (see fork_capacity)
    fork_servers: int | None = None
    # also bisect cases UNTESTABLE at BAD that PASS at GOOD: the first commit where they stop passing
    bisect_untestable: bool = False
    # with megatron_lm: bisect Megatron-LM between the pins behind each culprit that moved the pin
    descend: bool = True
    mlm_first_parent: bool = True  # that second level walks Megatron-LM's first-parent chain
    # the second level directly: ``repo`` is Megatron-LM, MB held at ``mb_at`` of ``mb_repo`` or at ``mb_held_src``
    mb_at: str | None = None
    mb_repo: Path | None = None
    mb_held_src: Path | None = None
    cases: tuple[str, ...] | None = None  # re-run only these cases (what the second level re-runs)
    # intermediate probes run only the cases still open (the endpoints run the whole selection)
    probe_open_cases: bool = True

    @property
    def fork_capacity(self) -> int:
        """Fork servers kept warm: ``--fork-servers``, else a light and a full server for each
        evaluation that runs at once and one pair more. Why: a probe runs its light group, then its
        full group, each through its pin's server; with fewer servers than that, two probes at
        two pins evict each other's servers and every probe pays their start-up again (about
        25 s with a pinned Megatron-LM tree), which was most of a long bisection's time."""
        return self.fork_servers if self.fork_servers is not None else 2 * (self.jobs + 1)

    @property
    def second_level(self) -> bool:
        """MB held fixed and ``repo`` a Megatron-LM repository."""
        return self.mb_at is not None or self.mb_held_src is not None


def check_options(opts: BisectOptions) -> None:
    """One-line usage errors for options that cannot work together."""
    if opts.jobs < 1:
        raise UsageError("-j must be at least 1")
    if opts.retries < 0:
        raise UsageError("--retries must be 0 or more")
    if opts.find_fix and opts.bisect_untestable:
        raise UsageError("--bisect-untestable looks for a regression; it cannot be combined with --find-fix")
    if opts.mb_at is not None and opts.mb_held_src is not None:
        raise UsageError("hold Megatron-Bridge at --mb-at SHA (with --mb-repo) or at --mb-held-src PATH, not both")
    if opts.mb_at is not None and opts.mb_repo is None:
        raise UsageError("--mb-at needs --mb-repo PATH (the Megatron-Bridge repository holding that commit)")
    if opts.mb_repo is not None and opts.mb_at is None:
        raise UsageError("--mb-repo names the repository of --mb-at SHA; give --mb-at too")
    if opts.second_level and opts.megatron_lm is not None:
        raise UsageError(
            "--mb-at/--mb-held-src bisect --repo as Megatron-LM with Megatron-Bridge held; "
            "--megatron-lm is for bisecting Megatron-Bridge"
        )
    if opts.second_level and opts.confirm:
        raise UsageError("--confirm reverts Megatron-Bridge culprits; it does not apply with --mb-at/--mb-held-src")
