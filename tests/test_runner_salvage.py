"""Verdicts of a suite process that left no verdict file (killed at its time limit, or died),
recovered from the plugin's live event log (harness.caselog), on throw-away suites (no MB)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from harness.bisect.status import Mark
from harness.bisect.view import mark_of
from harness.caselog import emit, read_log, start_log
from harness.paths import ROOT
from harness.procs import popen_owned
from harness.suiterun import launch, salvage

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
        "harness.suite.plugin",
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
    timed_out, tail = launch.stream(proc, None, time.monotonic() + limit_s)
    assert not results.exists(), "the process was stopped before writing its verdict file"
    outcome = launch.ChildExit(proc.returncode, timed_out, tail, limit_s)
    return salvage.collect(results, events, [suite], outcome, group=None)


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
    outcome = launch.ChildExit(None, True, "", 30)
    cases, _ = salvage.collect(tmp_path / "none.json", tmp_path / "e.jsonl", [Path("test_demo.py")], outcome, "light")
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


BROKEN_LIGHT = """
import pytest
pytestmark = pytest.mark.import_group("light")
import no_such_module_anywhere  # noqa: F401
def test_x():
    pass
"""
FINE_LIGHT = """
import pytest
pytestmark = pytest.mark.import_group("light")
def test_z():
    pass
"""
FINE_FULL = """
import pytest
pytestmark = pytest.mark.import_group("full")
def test_y():
    pass
"""


def _suites_dir(tmp_path: Path) -> Path:
    """A throwaway suites directory with the real suites' pytest.ini, conftest and package."""
    suites = tmp_path / "suites"
    suites.mkdir()
    for name in ("pytest.ini", "conftest.py", "__init__.py"):
        (suites / name).write_text((ROOT / "suites" / name).read_text())
    return suites


def harness_run(tmp_path: Path, suites: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``harness run -q`` of ``suites`` with empty fixtures, out of any ``HARNESS_*`` of the caller
    (plus ``env``); the process and its ``--out``."""
    (tmp_path / "fixtures").mkdir(exist_ok=True)
    out = tmp_path / "out"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "-q", "--suites-dir", str(suites)]
        + ["--fixtures", str(tmp_path / "fixtures"), "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean, **env},
    )
    return proc, out


def test_a_group_that_fails_to_collect_is_an_error_never_dropped(tmp_path: Path):
    """Issue 23: one light suite that fails to import stopped its whole import group, and the run
    exited 0 with the other group's cases. Now every suite file of that group stands as an ERROR
    (the collection error, for the file that had it) and the run exits 1."""
    suites = _suites_dir(tmp_path)
    (suites / "test_a.py").write_text(BROKEN_LIGHT)
    (suites / "test_c.py").write_text(FINE_LIGHT)
    (suites / "test_b.py").write_text(FINE_FULL)
    proc, out = harness_run(tmp_path, suites)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    from harness.records.results import RunResult
    from harness.records.verdict import Verdict

    verdicts = {c.case_id: (c.verdict, c.message) for c in RunResult.load(out / "results.json").cases}
    assert verdicts["b::test_y"][0] is Verdict.PASS
    a, c = verdicts["a::*[light import]"], verdicts["c::*[light import]"]
    assert a[0] is c[0] is Verdict.ERROR
    assert "No module named 'no_such_module_anywhere'" in a[1]
    assert "not collected" in c[1]


def test_a_crash_inside_mb_is_mbs_failure_and_bisectable(tmp_path: Path):
    """Issue 23: a suite process that died of a signal left the running case ERROR (never
    bisected). faulthandler's stack says whose code was running: an os.abort() injected into a
    copy of MB's get_packed_seq_params is MB's crash, a FAIL with impact crash naming the site."""
    import pytest

    from harness.commands import mutate
    from harness.mutations import Edit, Fault, installed_package_dir
    from harness.records.verdict import Verdict

    try:
        pkg = installed_package_dir()
    except Exception:
        pytest.skip("megatron.bridge is not installed here")
    search = "def get_packed_seq_params(batch: dict[str, PackedMetadataValue]) -> PackedSeqParams:\n"
    if search not in (pkg / "training/utils/packed_seq_utils.py").read_text():
        pytest.skip("this MB's get_packed_seq_params has another signature")
    abort = Fault(
        "abort_in_get_packed_seq_params",
        (Edit("training/utils/packed_seq_utils.py", search, search + "    import os\n\n    os.abort()\n"),),
        ("packed_seq_params",),
        "MB aborts the process while building packed params",
        layer="params",
    )
    result = mutate.run_copy(
        abort, tmp_path / "run", ["packed_seq_params"], timeout=300, pkg=pkg, keyword="3seq-2sentinels-argmin"
    )
    assert result is not None
    (case,) = [c for c in result.cases if c.case_id.endswith("[3seq-2sentinels-argmin]")]
    assert case.verdict is Verdict.FAIL, (case.verdict, case.message, result.notes)
    assert case.message.startswith("broken: crash: the suite process died (Aborted)"), case.message
    assert "packed_seq_utils.py" in case.message and "get_packed_seq_params" in case.message
    assert case.impacts == ["crash"]
    assert mark_of(case.verdict) is Mark.BAD  # bad for a bisection, not a skip


def test_a_crash_is_mbs_only_when_the_innermost_project_frame_is(tmp_path: Path):
    from harness.suiterun.fatal import mb_crash

    mb, harness = str(tmp_path / "mb"), str(tmp_path / "h")
    dump = (
        "collected 3 items\nFatal Python error: Segmentation fault\n\n"
        'Thread 0x00007f01 (most recent call first):\n  File "{h}/other.py", line 1 in idle\n\n'
        "Current thread 0x00007f00 (most recent call first):\n"
        '  File "/usr/lib/python3/site-packages/torch/x.py", line 9 in op\n'
        '  File "{inner}", line 5 in build\n'
        '  File "{h}/suites/test_x.py", line 3 in test_x\n'
    )
    crash = mb_crash(dump.format(h=harness, inner=f"{mb}/bridge/y.py"), (mb,), (harness,))
    assert crash is not None and crash.what == "Segmentation fault" and crash.site.endswith("y.py:5 in build")
    assert mb_crash(dump.format(h=harness, inner=f"{harness}/adapters/z.py"), (mb,), (harness,)) is None
    assert mb_crash("no fatal error here", (mb,), (harness,)) is None


SLOW_LIGHT = """
import time
import pytest
pytestmark = pytest.mark.import_group("light")
def test_quick():
    pass
def test_slow():
    time.sleep(120)
"""


def test_an_interrupted_run_writes_what_finished_marked_partial(tmp_path: Path):
    """Issue 23: SIGTERM (a CI time limit) or Ctrl-C left only the event log. Now results.json,
    junit.xml and report.html are written for what finished, marked partial, and the run exits 130."""
    import json
    import signal

    suites = _suites_dir(tmp_path)
    (suites / "test_a.py").write_text(SLOW_LIGHT)
    (suites / "test_b.py").write_text(FINE_FULL)
    (tmp_path / "fixtures").mkdir()
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    argv = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "--suites-dir",
        str(suites),
        "--fixtures",
        str(tmp_path / "fixtures"),
    ]
    proc = subprocess.Popen(
        [*argv, "-q", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    events = out / "cases-light.events.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and '"case_id": "a::test_slow"' not in (
        events.read_text() if events.exists() else ""
    ):
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    from harness.records.results import RunResult
    from harness.records.verdict import Verdict

    result = RunResult.load(out / "results.json")
    assert result.partial and any("partial: interrupted" in n for n in result.notes)
    verdicts = {c.case_id: (c.verdict, c.message) for c in result.cases}
    assert verdicts["a::test_quick"][0] is Verdict.PASS
    assert verdicts["a::test_slow"] == (Verdict.UNTESTABLE, "not run: the run was interrupted")
    assert verdicts["b::*[full import]"][0] is Verdict.UNTESTABLE  # the group never started
    assert (out / "junit.xml").is_file() and (out / "report.html").is_file()
    assert "PARTIAL" in stdout and json.loads((out / "results.json").read_text())
