"""A fake evaluator for executor tests that also misbehaves on demand, as cluster jobs do.

It reads ``state.json`` from the materialised tree of a history built by
``tests.test_bisect_command._fake_history`` (which cases fail there, whether the commit is
broken) and, for the commits it is told about, dies by SIGKILL, has its own SLURM job
cancelled, raises, or sleeps first. Every call appends the commit to ``counter``, so a test
can tell how many times each commit really ran. It lives in its own small module because
cluster jobs unpickle it: the job imports ``tests.scripted_eval`` (the repository root on
``PYTHONPATH``), nothing heavier.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.bisect.evaluator import EvalOutcome
from harness.records.verdict import Verdict
from harness.repository.workspaces import WorkspaceCache


@dataclass(frozen=True)
class ScriptedEvaluator:
    repo: Path
    workspace_dir: Path
    counter: Path
    cases: tuple[str, ...] = ("s::a", "s::b", "s::c")
    kill: tuple[str, ...] = ()  # SIGKILL itself on every attempt
    kill_once: tuple[str, ...] = ()  # SIGKILL itself on the first attempt only
    scancel: tuple[str, ...] = ()  # scancel its own SLURM job on every attempt
    boom: tuple[str, ...] = ()  # raise (a broken job environment)
    slow: tuple[tuple[str, float], ...] = ()  # (sha, seconds) to sleep before answering
    require_prepared: bool = False  # fail unless the driver materialised the commit (cluster runs)
    env_var: str = ""  # when set, the cache namespace names this variable's value where it is computed

    def cache_namespace(self) -> tuple[str, str]:
        where = f":{os.environ.get(self.env_var, 'unset')}" if self.env_var else ""
        return "scripted-suite", "scripted-env" + where

    def prepare(self, sha: str) -> None:
        WorkspaceCache(self.workspace_dir, self.repo).materialize(sha)

    def __call__(self, sha: str) -> EvalOutcome:
        t0 = time.monotonic()
        before = self.counter.read_text().split() if self.counter.exists() else []
        with open(self.counter, "a") as fh:
            fh.write(sha + "\n")
        if sha in self.kill or (sha in self.kill_once and sha not in before):
            os.kill(os.getpid(), signal.SIGKILL)
        if sha in self.scancel:
            subprocess.run(["scancel", os.environ["SLURM_JOB_ID"]], check=True)
            time.sleep(120)  # the scheduler ends the job long before this
        if sha in self.boom:
            raise RuntimeError(f"scripted failure at {sha[:12]}")
        time.sleep(dict(self.slow).get(sha, 0.0))
        tree = WorkspaceCache.prepared(self.workspace_dir, sha)
        if tree is None:
            assert not self.require_prepared, "the driver materialises the commit before submitting"
            tree = WorkspaceCache(self.workspace_dir, self.repo).materialize(sha)
        state = json.loads((tree / "src" / "megatron" / "bridge" / "state.json").read_text())
        if state["broken"]:
            return EvalOutcome.of(dict.fromkeys(self.cases, Verdict.UNTESTABLE), note="import error")
        out = {c: Verdict.FAIL if c in state["fail"] else Verdict.PASS for c in self.cases}
        return EvalOutcome.of(out, {c: f"{c} {v.value}" for c, v in out.items()}, duration_s=time.monotonic() - t0)

    def runs(self) -> list[str]:
        """Every commit evaluated so far, in order, retries repeated."""
        return self.counter.read_text().split() if self.counter.exists() else []
