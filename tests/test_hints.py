"""Every printed hint carries every option that decides the verdict, tested by running it (issue 23).

``reproduce:`` dropped ``--suites-dir``, ``--fixtures`` and ``--megatron-lm``: with a custom
``--fixtures`` the printed command reproduced another verdict. Here a run on a suites directory
and goldens of its own prints its hint, and the hint, run as printed, gives the same FAIL.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from harness.paths import ROOT
from harness.records.results import RunResult
from harness.records.verdict import Verdict

FAILING = """
import pytest
pytestmark = pytest.mark.import_group("full")
def test_rule():
    assert False, "a documented rule broke"
def test_fine():
    pass
"""


def _harness(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


def test_the_reproduce_hint_runs_as_printed_and_gives_the_same_verdict(tmp_path: Path):
    suites = tmp_path / "my-suites"
    suites.mkdir()
    for name in ("pytest.ini", "conftest.py", "__init__.py"):
        (suites / name).write_text((ROOT / "suites" / name).read_text())
    (suites / "test_mine.py").write_text(FAILING)
    fixtures = tmp_path / "my-fixtures"
    (fixtures / "mine").mkdir(parents=True)
    first = _harness(["run", "-q", "--suites-dir", str(suites), "--fixtures", str(fixtures), "--out", "o1"], tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    hints = {ln.split("reproduce: ", 1)[1] for ln in first.stdout.splitlines() if "reproduce: " in ln}
    (hint,) = hints  # the case's line and its defect's line (its quickest case) are the same command
    argv = shlex.split(hint)
    assert argv[0] == "harness" and "--suites-dir" in argv and "--fixtures" in argv
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = _harness([*argv[1:], "-q", "--out", "o2"], elsewhere)  # from another directory, as a person would
    assert again.returncode == 1, again.stdout + again.stderr
    (case,) = RunResult.load(elsewhere / "o2" / "results.json").cases
    assert case.case_id == "mine::test_rule" and case.verdict is Verdict.FAIL
    assert RunResult.load(tmp_path / "o1" / "results.json").hint_flags == argv[2:6]
