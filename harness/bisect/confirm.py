"""``--confirm``: check each culprit by reverting it alone on top of BAD and re-running its cases.

Why: a bisection blames a commit from indirect evidence, a transition between two probes. A
flaky neighbour, a non-monotonic history or a commit that only exposed an older fault can make
that transition point at the wrong commit. Reverting the culprit on the newest code and seeing
its cases pass again is direct evidence.

Where: a private workspace under the bisection's workspace directory (``confirm/``): a copy of
BAD's tree (the paths the workspaces hold: ``src``, ``tests``, ``pyproject.toml``) with the
culprit's own diff, limited to those paths and binary-safe, applied in reverse by ``git apply
-R`` on the plain directory (git's repository discovery is stopped above it). The user's
repository and the shared per-commit trees are never touched; the copy is removed afterwards.
With ``--megatron-lm`` the reverted tree runs with BAD's pinned megatron-core, or, when the
culprit itself moved the pin, with its parent's (when BAD still pins what the culprit pinned).

Outcome per culprit (:class:`~harness.bisect.document.Confirmation`), from each blamed case's
verdict with the culprit reverted:

* **confirmed**: every case passes again (with ``--find-fix``: fails again), or still fails but
  differently from BAD (``changed``: a later commit touched it too);
* **not confirmed**: a case fails exactly as at BAD, with what was seen;
* **not checkable**: the revert does not apply on BAD (later commits changed the same lines),
  the pin moved again after the culprit, the cases cannot run on the reverted tree, or the
  evaluator cannot run a tree that is no commit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.bisect.document import Confirmation, ConfirmStatus
from harness.bisect.evaluator import TreeEvaluating
from harness.bisect.scope import suite_of
from harness.errors import GitError
from harness.records.verdict import Verdict, settle
from harness.repository.pins import SUBMODULE
from harness.repository.workspaces import WorkspaceCache

if TYPE_CHECKING:
    from harness.bisect.evaluator import EvalOutcome
    from harness.bisect.levelprotocol import Level


def confirm_culprits(driver: Level, ws: WorkspaceCache, bad: str, blamed: dict[str, list[str]]) -> list[Confirmation]:
    """One confirmation per culprit commit (``blamed``: culprit -> the cases it was blamed for)."""
    out = []
    for culprit, cases in blamed.items():
        driver.say(f"confirming {culprit[:12]}: reverting it on top of {bad[:12]} and re-running {len(cases)} case(s)")
        found = _confirm(driver, ws, bad, culprit, sorted(cases))
        driver.say(f"  {found.status.value.replace('_', ' ')}: {found.detail}")
        out.append(found)
    return out


def _confirm(driver: Level, ws: WorkspaceCache, bad: str, culprit: str, cases: list[str]) -> Confirmation:
    def unchecked(why: str) -> Confirmation:
        return Confirmation(culprit, ConfirmStatus.NOT_CHECKABLE, {}, why)

    if not isinstance(driver.evaluator, TreeEvaluating):
        return unchecked("this evaluator cannot run a tree that is no commit")
    evaluate = driver.evaluator.evaluate_tree
    pin_of = _pin_source(driver, bad, culprit)
    if pin_of is None:
        return unchecked("the culprit moved the Megatron-LM pin and a later commit moved it again")
    parent = tempfile.mkdtemp(prefix=f"{culprit[:12]}-on-{bad[:12]}-", dir=_confirm_dir(ws))
    try:
        tree = Path(parent) / "tree"
        shutil.copytree(ws.materialize(bad), tree, symlinks=True)
        conflict = _revert(driver, ws, culprit, tree)
        if conflict:
            return unchecked(f"the revert does not apply on {bad[:12]}: {conflict}")
        suites = sorted({suite_of(c) for c in cases})
        outcome: EvalOutcome = evaluate(tree / "src", f"confirm-{culprit[:12]}-on-{bad[:12]}", pin_of, suites)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return _judge(driver, bad, culprit, cases, outcome)


def _confirm_dir(ws: WorkspaceCache) -> Path:
    where = ws.cache_dir / "confirm"
    where.mkdir(parents=True, exist_ok=True)
    return where


def _pin_source(driver: Level, bad: str, culprit: str) -> str | None:
    """The MB commit whose pinned megatron-core the reverted tree runs with (None: no consistent one)."""
    if driver.opts.megatron_lm is None:
        return bad
    repo = driver.repo
    parents = repo.parents(culprit)
    before = repo.submodule_pin(parents[0], SUBMODULE) if parents else None
    moved = repo.submodule_pin(culprit, SUBMODULE)
    if moved == before:
        return bad
    return parents[0] if repo.submodule_pin(bad, SUBMODULE) == moved else None


def _revert(driver: Level, ws: WorkspaceCache, culprit: str, tree: Path) -> str:
    """Apply the culprit's diff in reverse inside ``tree``; '' when it applied, else git's reason."""
    try:
        patch = driver.repo.patch(culprit, ws.paths)
    except GitError as exc:
        return str(exc)
    if not patch.strip():
        return ""  # the culprit changes nothing the evaluation reads: BAD itself is re-run
    patch_file = tree.parent / "culprit.patch"
    patch_file.write_text(patch, encoding="utf-8")
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))  # never find a repository above the copy
    proc = subprocess.run(
        ["git", "apply", "-R", "--whitespace=nowarn", str(patch_file)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode == 0:
        return ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return "; ".join(lines[:2]) or f"git apply exited {proc.returncode}"


def _judge(driver: Level, bad: str, culprit: str, cases: Sequence[str], outcome: EvalOutcome) -> Confirmation:
    """Compare each case with the culprit reverted to what BAD gave."""
    expect = Verdict.FAIL if driver.opts.find_fix else Verdict.PASS
    at_bad = driver.evidence.attempts.get(bad, [])
    seen: dict[str, str] = {}
    details: list[str] = []
    for case in cases:
        after = outcome.verdicts.get(case)
        before = settle(e.verdicts.get(case) for e in at_bad)
        before_msg = next((e.messages[case] for e in reversed(at_bad) if e.messages.get(case)), "")
        after_msg = outcome.messages.get(case, "")
        if after is expect:
            seen[case] = after.value
        elif after is not None and after is before:
            seen[case] = "same" if after_msg == before_msg else "changed"
            if seen[case] == "same":
                details.append(f"{case} still {after.value} as at {bad[:12]}: {_first_line(after_msg)}")
        else:
            seen[case] = after.value if after else "not run"
            details.append(f"{case} {seen[case]} with the revert: {_first_line(after_msg or outcome.note)}")
    values = set(seen.values())
    if "same" in values:
        status = ConfirmStatus.NOT_CONFIRMED
    elif values <= {expect.value, "changed"}:
        status = ConfirmStatus.CONFIRMED
        changed = sorted(c for c, v in seen.items() if v == "changed")
        also = f" ({len(changed)} still failing, differently: a later commit changed them too)" if changed else ""
        details = [f"reverting it on {bad[:12]} makes {_count(cases)} {expect.value}{also}"]
    else:
        status = ConfirmStatus.NOT_CHECKABLE
    return Confirmation(culprit, status, seen, "; ".join(details))


def _count(cases: Sequence[str]) -> str:
    return "its case" if len(cases) == 1 else f"its {len(cases)} cases"


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:300]
