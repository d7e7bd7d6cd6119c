"""``harness`` as users run it, with the MB under test scripted: ``python -m tests.faults.scripted_cli ARGS``.

Everything the harness does around an evaluation is real (argument parsing, the one-line error
handling of :func:`harness.cli.main`, the private mirror, ``git archive`` workspaces, the SQLite
verdict cache, ``bisect.json`` and the report); only the MB evaluation is replaced by reading
``state.json`` from the materialised tree of a history built by
``tests.test_bisect_command._fake_history``, so one evaluation costs milliseconds instead of an
MB import. That is the MB being swapped, not the harness: the evaluator is the documented
extension point of :func:`harness.bisect.driver.run_bisection`.

Environment knobs (faults to inject from outside the process):

* ``FAULTS_COUNTER``: a file each evaluation appends its commit to *before* working (a test
  waits on it to kill the driver mid-evaluation, and counts repeats after a resume);
* ``FAULTS_EVAL_SLEEP``: seconds every evaluation sleeps (a window to kill the driver in);
* ``FAULTS_MESSAGE_BYTES``: length of every case message (a big report, for a full disk).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import cli
from harness.bisect import driver
from harness.bisect.evaluator import EvalOutcome
from harness.records.verdict import Verdict
from harness.repository.workspaces import WorkspaceCache

CASES = ("s::a", "s::b", "s::c")


@dataclass(frozen=True)
class StateMB:
    """Verdicts from ``state.json`` of the materialised tree (see the module docstring)."""

    repo_path: Path
    workspace_dir: Path

    def cache_namespace(self) -> tuple[str, str]:
        return "scripted-suite", "scripted-env"

    def __call__(self, sha: str) -> EvalOutcome:
        counter = os.environ.get("FAULTS_COUNTER")
        if counter:
            with open(counter, "a") as fh:
                fh.write(sha + "\n")
        time.sleep(float(os.environ.get("FAULTS_EVAL_SLEEP", "0")))
        tree = WorkspaceCache(self.workspace_dir, self.repo_path).materialize(sha)
        state_file = tree / "src" / "megatron" / "bridge" / "state.json"
        if not state_file.exists():
            return EvalOutcome.of({}, note="no src/megatron/bridge")
        state = json.loads(state_file.read_text())
        out = {c: Verdict.FAIL if c in state["fail"] else Verdict.PASS for c in CASES}
        pad = "x" * int(os.environ.get("FAULTS_MESSAGE_BYTES", "0"))
        return EvalOutcome.of(out, {c: f"{c} {v.value} {pad}" for c, v in out.items()})


def state_mb(repo_path: Path, workspace_dir: Path, *_options: object, **_named: object) -> StateMB:
    """Called where the driver builds its MB evaluator (same leading arguments; the suite
    options it passes mean nothing to a scripted MB)."""
    return StateMB(repo_path, workspace_dir)


if __name__ == "__main__":
    driver.MBEvaluator = state_mb  # type: ignore[misc,assignment]
    sys.exit(cli.main(sys.argv[1:]))
