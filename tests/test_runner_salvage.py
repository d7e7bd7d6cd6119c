"""Verdicts of a suite process that left no verdict file (killed at its time limit, or died),
recovered from the plugin's live event log (harness.caselog), on throw-away suites (no MB)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from harness import runner
from harness.caselog import emit, read_log, start_log
from harness.paths import ROOT
from harness.procs import popen_owned

SUITE = """
import os, time

def test_first():
    pass

def test_hangs():
    if os.environ.get("DEMO_MODE") == "hang":
        time.sleep(10 ** 6)
    os._exit(3)  # the process dies in this case

def test_never_reached():
    pass
"""


def _suite_run(tmp_path: Path, mode: str, limit_s: float) -> tuple[list, list[str]]:
    suite = tmp_path / "test_demo.py"
    suite.write_text(SUITE)
    results, events = tmp_path / "cases.json", tmp_path / "cases.events.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(suite),
        "-p",
        "harness.plugin",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tmp_path),
        "--harness-results",
        str(results),
        "--harness-events",
        str(events),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DEMO_MODE": mode}
    proc = popen_owned(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    timed_out, tail = runner._stream(proc, None, time.monotonic() + limit_s)
    assert not results.exists(), "the process was stopped before writing its verdict file"
    outcome = runner._Outcome(proc.returncode, timed_out, tail, limit_s)
    return runner._collect(results, events, [suite], outcome, group=None)


def test_killed_at_timeout_blames_the_running_case_and_keeps_the_others(tmp_path: Path) -> None:
    cases, notes = _suite_run(tmp_path, "hang", limit_s=8)
    by_id = {c.case_id: c for c in cases}
    assert by_id["demo::test_first"].verdict.value == "pass", "a finished case keeps its verdict"
    hung = by_id["demo::test_hangs"]
    assert hung.verdict.value == "fail" and hung.message.startswith("broken: timeout:"), hung.message
    assert by_id["demo::test_never_reached"].verdict.value == "untestable"
    assert "not run" in by_id["demo::test_never_reached"].message
    assert any("demo::test_hangs" in n for n in notes)


def test_process_dying_in_a_case_is_an_error_for_that_case_only(tmp_path: Path) -> None:
    cases, _ = _suite_run(tmp_path, "die", limit_s=120)
    verdicts = {c.case_id: c.verdict.value for c in cases}
    assert verdicts == {
        "demo::test_first": "pass",
        "demo::test_hangs": "error",
        "demo::test_never_reached": "untestable",
    }


def test_nothing_collected_is_one_error_per_suite(tmp_path: Path) -> None:
    start_log(tmp_path / "e.jsonl")
    outcome = runner._Outcome(None, True, "", 30)
    cases, _ = runner._collect(tmp_path / "none.json", tmp_path / "e.jsonl", [Path("test_demo.py")], outcome, "light")
    assert [(c.case_id, c.verdict.value) for c in cases] == [("demo::*[light import]", "error")]
    assert "before any case was collected" in cases[0].message


def test_event_log_ignores_a_cut_line_and_a_foreign_file(tmp_path: Path) -> None:
    log = tmp_path / "e.jsonl"
    start_log(log)
    emit(log, ev="collected", cases=[["s::a", "s"], ["s::b", "s"]])
    emit(log, ev="start", case_id="s::a")
    with open(log, "a") as fh:
        fh.write('{"ev": "done", "case": {"case_id": "s::a", "verd')  # killed mid-write
    got = read_log(log)
    assert got.in_flight == ["s::a"] and got.not_started == ["s::b"] and not got.done
    (tmp_path / "other.jsonl").write_text(
        '{"kind": "something-else", "schema_version": 1}\n{"ev": "start", "case_id": "x"}\n'
    )
    assert read_log(tmp_path / "other.jsonl").started == []
