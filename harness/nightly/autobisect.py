"""The nightly's automatic bisection: which cases regressed, over which range, with which command.

Why apart from the command: deciding what to bisect is the nightly's logic (a case green last
night, passed, changed or fixed as ``harness bisect`` defines good, that fails or cannot run
tonight), independent of argument parsing and printing, and it is what the two-night tests
exercise. The bisection runs as a ``harness bisect`` subprocess in the nightly's own
environment (:class:`BisectEnv`), so a crash there cannot lose the night's results.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from harness.errors import HarnessError
from harness.records.commit import Commit
from harness.records.trend import Trend, TrendChange
from harness.records.verdict import Verdict

if TYPE_CHECKING:
    from harness.repository import gitrepo

BISECT_DIR = "bisect"
#: Address of the bisect report as seen from DIR/trend.html.
BISECT_LINK = f"{BISECT_DIR}/report.html"


@dataclass
class BisectPlan:
    """What the nightly decided about bisecting: a command, or the one-line reason not to."""

    cases: list[TrendChange]
    command: list[str] | None = None
    reason: str = ""
    # defect id -> its regressed cases, the first the one the bisection probes (its quickest)
    defects: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    repo: Path | None = None  # where the bisection runs, for the checks at each culprit
    env: BisectEnv | None = None


# what ``harness bisect`` counts as good (harness.bisect.view.mark_of): every invariant held
GOOD_BEFORE = frozenset({Verdict.PASS.value, Verdict.CHANGED.value, Verdict.FIXED.value})


def regressions(tr: Trend) -> list[TrendChange]:
    """Newly failing or newly untestable cases that were green in the previous nightly: passed,
    changed or fixed, as ``harness bisect`` defines good (only those have a good end; a case that
    was changed last night and fails tonight is a regression like any other). A case gone from
    tonight's run has no verdict to bisect at the bad end: it fails the night and is listed, and
    its suite's ERROR says why."""
    from harness.nightly.history import GONE

    return [
        c for c in tr["newly_failing"] + tr["newly_untestable"] if c["previous"] in GOOD_BEFORE and c["current"] != GONE
    ]


@dataclass(frozen=True)
class BisectEnv:
    """What the nightly ran with that its bisection must run with too: a bisection in another
    environment (another megatron-core, a shorter time limit) can blame the wrong commit."""

    timeout_s: float = 1800.0
    jobs: int = 1
    megatron_lm: Path | None = None  # each commit with the megatron-core it pins
    cache_dir: Path | None = None
    executor: tuple[str, ...] = ()  # --executor and its flags: evaluations run where the suites ran
    repo_url: str = ""  # --repo-url: the bisect report links commits like the night's report

    def flags(self) -> list[str]:
        flags = ["--timeout", f"{self.timeout_s:g}", "-j", str(self.jobs)]
        if self.megatron_lm is not None:
            flags += ["--megatron-lm", str(Path(self.megatron_lm).expanduser().resolve())]
        if self.cache_dir is not None:
            flags += ["--cache-dir", str(self.cache_dir)]
        flags += ["--repo-url", self.repo_url] if self.repo_url else []
        return flags + list(self.executor)


def bisect_command(
    good: str,
    bad: str,
    repo: Path,
    out_dir: Path,
    suites: list[str],
    env: BisectEnv = BisectEnv(),
    untestable: bool = False,
    confirm: bool = True,
    cases: list[str] | None = None,
) -> list[str]:
    """The ``harness bisect`` command line (through this interpreter, not an installed script),
    in the nightly's environment (``env``);
    ``untestable``: some regressions are cases that became untestable (``--bisect-untestable``);
    ``confirm``: check each culprit by reverting it on top of ``bad`` (``--confirm``)."""
    cmd = [sys.executable, "-m", "harness", "bisect", f"{good}..{bad}", "--repo", str(repo), "--out", str(out_dir)]
    cmd += env.flags()
    for suite in suites:
        cmd += ["--suite", suite]
    for case in cases or ():
        cmd += ["--case", case]
    return cmd + (["--bisect-untestable"] if untestable else []) + (["--confirm"] if confirm else [])


def by_defect(cases: list[TrendChange], defect_of: dict[str, str], seconds: dict[str, float]) -> dict[str, list[str]]:
    """The regressed cases grouped by tonight's defects (:mod:`harness.report.defects`; a case in
    none is its own), each group led by its quickest case: the one its bisection probes."""
    groups: dict[str, list[str]] = {}
    for c in cases:
        groups.setdefault(defect_of.get(c["case_id"], c["case_id"]), []).append(c["case_id"])
    return {d: sorted(ids, key=lambda i: (seconds.get(i, math.inf), i)) for d, ids in groups.items()}


def _clean_commit(commit: str) -> tuple[str, bool]:
    found = Commit.parse(commit)
    return (found.sha, found.dirty) if found else (commit, False)


def plan_bisect(
    tr: Trend,
    repo: gitrepo.GitRepo | None,
    out_dir: Path,
    env: BisectEnv = BisectEnv(),
    confirm: bool = True,
    tonight: Any = None,
) -> BisectPlan:
    """Decide whether the two latest nightlies give a range to bisect the regressions in; with
    ``tonight`` (the night's RunResult), one bisection target per defect: its quickest case."""
    cases = regressions(tr)
    if len(tr["runs"]) < 2:
        return BisectPlan(cases, reason="no previous nightly in the history")
    if not cases:
        return BisectPlan(
            cases,
            reason="nothing that was green in the previous nightly (pass, changed or fixed) fails or is untestable now",
        )
    if repo is None:
        return BisectPlan(cases, reason="no --repo to bisect in")
    prev_raw, this_raw = tr["runs"][-2]["commit"], tr["runs"][-1]["commit"]
    prev, _ = _clean_commit(prev_raw)
    this, dirty = _clean_commit(this_raw)
    try:
        good = repo.resolve(prev)
    except HarnessError:
        return BisectPlan(cases, reason=f"the previous nightly's commit {prev_raw!r} is not a commit in {repo.path}")
    try:
        bad = repo.resolve(this)
    except HarnessError:
        return BisectPlan(cases, reason=f"this nightly's commit {this_raw!r} is not a commit in {repo.path}")
    if good == bad:
        return BisectPlan(
            cases,
            reason=f"both nightlies tested {good[:12]}{' (this one with local changes)' if dirty else ''}: "
            "nothing to bisect (flaky case or a change outside MB)",
        )
    if not repo.is_ancestor(good, bad):
        return BisectPlan(cases, reason=f"the previous nightly's commit {good[:12]} is not an ancestor of {bad[:12]}")
    untestable = any(c["current"] == Verdict.UNTESTABLE.value for c in cases)
    defects: dict[str, list[str]] = {}
    probe: list[str] | None = None
    if tonight is not None:
        from harness.report.defects import defects as group_defects
        from harness.report.defects import of_case

        seconds = {c.case_id: c.duration_s for c in tonight.cases}
        defects = by_defect(cases, of_case(group_defects(tonight)), seconds)
        probe = [ids[0] for ids in defects.values()]
    chosen = set(probe) if probe is not None else {c["case_id"] for c in cases}
    suites = sorted({c["suite"] for c in cases if c["case_id"] in chosen})
    return BisectPlan(
        cases,
        command=bisect_command(prev, this, repo.path, out_dir, suites, env, untestable, confirm, probe),
        reason="this nightly's tree had local changes; bisecting its commit" if dirty else "",
        defects=defects,
        repo=repo.path,
        env=env,
    )


def execute(plan: BisectPlan, out_dir: Path, out: TextIO) -> dict[str, str]:
    """Run the planned bisection; links case_id -> report for the trend page (none on failure)."""
    if plan.command is None:
        print(f"auto-bisect: no bisect: {plan.reason}", file=out)
        return {}
    if plan.reason:
        print(f"auto-bisect: note: {plan.reason}", file=out)
    if plan.defects:
        print(
            f"auto-bisect: {len(plan.cases)} regression(s) of {len(plan.defects)} defect(s), one case bisected each: "
            + "; ".join(f"{d}: {ids[0]} (+{len(ids) - 1})" for d, ids in plan.defects.items()),
            file=out,
        )
    print(f"auto-bisect: {len(plan.cases)} regression(s): {shlex.join(plan.command)}", file=out, flush=True)
    report = out_dir / "report.html"
    if report.exists():
        os.unlink(report)  # a stale report from an earlier night must not be linked
    try:
        proc = subprocess.run(plan.command, stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        print(f"auto-bisect: could not start harness bisect: {exc}", file=out)
        return {}
    meaning = {0: "every culprit found", 1: "not every culprit found", 2: "usage or environment error"}
    print(
        f"auto-bisect: harness bisect exited {proc.returncode} "
        f"({meaning.get(proc.returncode, 'crashed')}); report: {report if report.exists() else 'none written'}",
        file=out,
    )
    if not report.exists():
        return {}
    if any(len(ids) > 1 for ids in plan.defects.values()):
        check_at_culprits(plan, out_dir, out)
    return {c["case_id"]: BISECT_LINK for c in plan.cases}


def check_at_culprits(plan: BisectPlan, out_dir: Path, out: TextIO) -> None:
    """Each defect's other cases at its lead's culprit (:mod:`harness.nightly.refine`)."""
    from harness.bisect.scope import suite_of
    from harness.nightly.refine import refine

    repo, env = plan.repo, plan.env or BisectEnv()
    assert repo is not None

    def check(parent: str, culprit: str, cases: list[str], where: Path) -> subprocess.CompletedProcess[str]:
        suites = sorted({suite_of(c) for c in cases})
        cmd = bisect_command(parent, culprit, repo, where, suites, env, confirm=False, cases=cases)
        return subprocess.run(cmd + ["-q"], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)

    refine(plan.defects, out_dir / "bisect.json", check, out_dir, out)
