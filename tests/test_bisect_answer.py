"""The bisect answer says why, not only who (issue 24, item 1): per culprit the broken invariants
with their training impact, one concrete violation, the MB frame of a raise, a command that
reproduces the failure at the culprit and the pass at its parent (run here), and links."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.bisect.driver import BisectOptions, run_bisection
from harness.bisect.evaluator import EvalOutcome
from harness.records.verdict import Verdict
from harness.report.bisectanswer import pr_url
from harness.report.terminal import bisect_summary_lines
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import workspace_dir_for
from tests.test_bisect_command import (
    SUITES,
    MBRepo,
    StateEvaluator,
    _fake_history,
    bisect,
    load,
    mb_repo,  # noqa: F401  (the fixtures, module-scoped here too)
    shared_cache,  # noqa: F401
)

VIOLATION = "logical-boundaries [trains-padding]: row 0, position 5: expected 5, got 6"


@dataclass(frozen=True)
class WhyEvaluator(StateEvaluator):
    """Failing cases come with the records a suite process writes of them: violations, impacts."""

    def __call__(self, sha: str) -> EvalOutcome:
        out = super().__call__(sha)
        broken = {"invariant": "logical-boundaries", "impact": "trains-padding", "row": 0, "position": 5}
        for c, r in out.cases.items():
            if r.verdict is Verdict.FAIL:
                out.cases[c] = dataclasses.replace(
                    r,
                    diff="invariant failure",
                    impacts=["trains-padding"],
                    violations=[{**broken, "expected": 5, "got": 6}] * 4,
                )
        return out


def test_the_culprit_block_says_why_with_an_example_reproduce_commands_and_links(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 16, {"s::a": 9})
    ev = WhyEvaluator(repo, workspace_dir_for(tmp_path / "cache", open_repo(repo)))
    run = run_bisection(
        BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=tmp_path / "cache"), evaluator=ev, progress=None
    )
    doc = run.doc
    doc.repo_url, doc.hint_flags = "https://github.com/NVIDIA-NeMo/Megatron-Bridge", ["--megatron-lm", "/mlm"]
    doc.cases[0].culprit.subject = "Simplify cu_seqlens (#1234)"  # type: ignore[union-attr]
    text = "\n".join(bisect_summary_lines(doc))
    assert "why: logical-boundaries x4 [trains-padding]" in text
    assert f"e.g. s::a: {VIOLATION}" in text
    assert doc.cases[0].kind == "invariant" and "golden" not in text.split("why:")[1].split("\n")[0]
    assert f"git -C /tmp/mb-{shas[9][:12]} checkout -q {shas[9]} && harness run --mb-src /tmp/mb-{shas[9][:12]}" in text
    assert "--megatron-lm /mlm --suite s -k a" in text
    assert f"checkout -q {shas[8]}" in text.split("parent (passes):")[1].split("\n")[0]
    assert (
        f"/commit/{shas[9]}" in text
        and "pull request: https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/1234" in text
    )


def test_pull_request_of_a_subject() -> None:
    base = "https://github.com/o/r"
    assert pr_url(base, "Fix packing (#2048)") == f"{base}/pull/2048"
    assert pr_url(base, "Fix packing") == "" and pr_url("", "Fix (#1)") == ""


@pytest.mark.slow
def test_the_printed_reproduce_commands_fail_at_the_culprit_and_pass_at_its_parent(
    mb_repo: MBRepo,  # noqa: F811
    shared_cache: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    proc = bisect(mb_repo, "good..bad", *SUITES, out=tmp_path / "out", cache=shared_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fails = next(ln for ln in proc.stdout.splitlines() if "reproduce (fails):" in ln).split(": ", 1)[1]
    passes = next(ln for ln in proc.stdout.splitlines() if "parent (passes):" in ln).split(": ", 1)[1].strip()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command, want in ((fails, 1), (passes, 0)):
        command = command.replace("/tmp/mb-", f"{tmp_path}/mb-")
        ran = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900)
        assert ran.returncode == want, f"{command}\n{ran.stdout[-3000:]}\n{ran.stderr[-2000:]}"
    doc = load(tmp_path / "out")
    assert all(c["kind"] != "golden" for c in doc["cases"] if c["broken"]), "an invariant failure is never golden"
