"""Where suites, goldens and reports are: the checkout's or the installed package's, a one-line
error when they are missing, reports under the current directory, and no green run that
checked nothing. (The installed-wheel layout end to end: tests/test_wheel.py.)"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli, paths
from harness.commands import _args
from harness.paths import mb_location
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report.terminal import print_nothing_ran
from harness.suiterun import runner


def test_a_checkout_uses_its_own_suites_and_goldens() -> None:
    assert paths.suites_dir() == paths.ROOT / "suites"
    assert paths.fixtures_dir() == paths.ROOT / "fixtures"
    assert "packing_algorithms" in runner.golden_suites()
    assert not paths.is_bundled(paths.fixtures_dir())
    assert paths.is_bundled(paths.BUNDLED / "fixtures" / "x" / "y.json")


def test_roots_from_the_environment_reach_suite_processes(tmp_path: Path, monkeypatch) -> None:
    suites = tmp_path / "mine" / "suites"
    shutil.copytree(paths.ROOT / "suites", suites, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv(paths.SUITES_ENV, str(suites))
    assert paths.suites_dir() == suites
    assert runner.suite_files(["cp_constraints"]) == [suites / "test_cp_constraints.py"]
    assert str(suites.parent) in runner.Target().pythonpath().split(":"), "import suites finds this copy"


def one_line(capsys, argv: list[str], rc: int) -> str:
    assert cli.main(argv) == rc
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_no_suites_is_a_one_line_error_not_a_green_run(tmp_path: Path, capsys, monkeypatch) -> None:
    """What an installed wheel without its data did: zero suites, exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    line = one_line(capsys, ["run", "--suites-dir", str(tmp_path / "empty"), "--out", str(tmp_path / "o")], 2)
    assert line.startswith("harness: error: no golden suites (test_*.py) in ") and "--suites-dir" in line
    for argv in (["nightly"], ["bisect", "a..b", "--repo", str(tmp_path)]):
        assert "no golden suites" in one_line(capsys, argv + ["--suites-dir", str(tmp_path / "empty")], 2)


def test_missing_goldens_are_a_one_line_error(tmp_path: Path, capsys) -> None:
    line = one_line(capsys, ["fixtures", "verify", "--fixtures", str(tmp_path / "nowhere")], 2)
    assert line.startswith("harness: error: no goldens: ") and "nowhere does not exist" in line
    line = one_line(capsys, ["run", "--fixtures", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")], 2)
    assert "no goldens" in line


def test_verify_fails_when_it_found_no_golden(tmp_path: Path, capsys) -> None:
    """'0 golden file(s) ok' used to exit 0."""
    (tmp_path / "fixtures" / "some_suite").mkdir(parents=True)
    assert cli.main(["fixtures", "verify", "--fixtures", str(tmp_path / "fixtures")]) == 1
    captured = capsys.readouterr()
    assert "0 golden file(s) ok" in captured.out
    assert captured.err.strip() == f"harness: no golden files under {tmp_path / 'fixtures'}: nothing verified"


def test_verify_counts_the_checkouts_goldens(capsys) -> None:
    assert cli.main(["fixtures", "verify"]) == 0
    root = paths.fixtures_dir()
    n = len([p for p in root.rglob("*.json") if p.name != "known_failures.json" and "explored" not in p.parts])
    assert n > 50 and f"{n} golden file(s) ok, 0 corrupt" in capsys.readouterr().out


def test_recording_into_the_installed_goldens_is_refused(capsys, monkeypatch) -> None:
    monkeypatch.setenv(paths.FIXTURES_ENV, str(paths.BUNDLED / "fixtures"))
    line = one_line(capsys, ["fixtures", "record", "--yes"], 2)
    assert "installed with the harness" in line and "--fixtures DIR" in line


def test_reports_go_under_the_current_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _args.out_dir(argparse.Namespace(out=None), "run-1") == tmp_path / "reports" / "run-1"
    assert paths.default_history() == tmp_path / "reports" / "history.parquet"


def result(*verdicts: Verdict, notes: list[str] | None = None) -> RunResult:
    cases = [CaseResult(f"s::c{i}", "s", v, message=f"why {v.value}") for i, v in enumerate(verdicts)]
    return RunResult("r", {}, {}, Machine(), "full", cases=cases, notes=notes or [])


@pytest.mark.parametrize(
    "run, line",
    [
        (result(notes=["no case was selected"]), "harness: no case ran: no case was selected"),
        (
            result(Verdict.UNTESTABLE, Verdict.UNTESTABLE),
            "harness: no case ran: all 2 selected case(s) are untestable here (most often: why untestable)",
        ),
    ],
    ids=["nothing-selected", "all-untestable"],
)
def test_a_run_that_checked_nothing_fails_with_one_line(run: RunResult, line: str) -> None:
    assert run.exit_code() == 1 and run.exit_code(allow_changed=True) == 1
    err = io.StringIO()
    print_nothing_ran(run, err)
    assert err.getvalue() == line + "\n"


def test_untestable_cases_beside_checked_ones_still_pass() -> None:
    run = result(Verdict.PASS, Verdict.UNTESTABLE)
    err = io.StringIO()
    print_nothing_ran(run, err)
    assert run.exit_code() == 0 and err.getvalue() == ""


@pytest.mark.skipif(mb_location() is None, reason="no megatron.bridge installed (run scripts/setup.sh)")
def test_harness_run_that_selected_nothing_exits_1_with_one_line(tmp_path: Path) -> None:
    """End to end: ``harness run -k`` matching no case once printed an all-zero table and exited 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--suite", "packing_algorithms", "-k", "no_such_case_here", "-q"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(paths.ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == ["harness: no case ran: no case was selected"], proc.stderr
    (results,) = (tmp_path / "reports").glob("*/results.json")
    assert RunResult.load(results).cases == []


def test_verify_reads_saved_explored_cases_as_their_own_kind(tmp_path, capsys) -> None:
    """Saved explored cases sit beside the goldens: verify reads them as explored records, not as
    goldens, and a corrupt one is reported like a corrupt golden."""
    import shutil

    root = tmp_path / "fixtures"
    shutil.copytree(paths.fixtures_dir(), root)
    assert cli.main(["fixtures", "verify", "--fixtures", str(root)]) == 0
    assert "saved explored case(s)" in capsys.readouterr().out
    (root / "explored" / "explored-broken.json").write_text('{"kind": "harness-golden"}')
    assert cli.main(["fixtures", "verify", "--fixtures", str(root)]) == 1
    assert "corrupt:" in capsys.readouterr().out
