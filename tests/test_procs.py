"""harness.procs: suite processes get their own session and die with the harness (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.paths import ROOT
from harness.procs import kill_group, popen_owned


def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie nobody reaps (the kernel killed it)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state == "Z"


def test_child_runs_the_command_in_its_own_session_with_the_given_env() -> None:
    started: list[subprocess.Popen] = []
    code = "import os; print(os.getppid(), os.getsid(0), os.getpid(), os.environ['HARNESS_PROBE'])"

    def start() -> None:  # bisect starts suites from worker threads
        started.append(
            popen_owned(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ, "HARNESS_PROBE": "yes"}
            )
        )

    worker = threading.Thread(target=start)
    worker.start()
    worker.join()
    (proc,) = started
    ppid, sid, pid, probe = proc.communicate(timeout=60)[0].decode().split()
    assert int(ppid) == os.getpid() and int(pid) == proc.pid, "the command itself is the child, not a launcher"
    assert int(sid) == proc.pid, "session leader: a timeout kills the whole group"
    assert probe == "yes"


def test_kill_group_ends_the_child_and_what_it_started() -> None:
    proc = popen_owned(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE)
    grandchild = int(proc.stdout.readline())
    kill_group(proc)
    deadline = time.monotonic() + 10
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.returncode == -signal.SIGKILL and _gone(grandchild)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux only")
def test_child_dies_when_the_harness_is_killed() -> None:
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from harness.procs import popen_owned; "
        "print(popen_owned(['sleep', '300']).pid, flush=True); time.sleep(300)"
    )
    harness = subprocess.Popen([sys.executable, "-c", code, str(ROOT)], stdout=subprocess.PIPE)
    child = int(harness.stdout.readline())
    assert not _gone(child)
    harness.kill()
    harness.wait()
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _gone(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the suite process outlived a kill -9 of the harness")
