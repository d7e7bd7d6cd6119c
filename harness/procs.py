"""Child processes that never outlive the harness.

Suite processes run in their own session (``Popen(start_new_session=True)``) so a timeout can
kill the whole process group; but a new session also means a ``kill -9`` of the harness would
leave them running. On Linux the child therefore asks the kernel (``PR_SET_PDEATHSIG``) to be
killed when its parent dies. That request must be made by the child itself, and
``preexec_fn`` is not safe in a threaded parent (bisect starts suites from a thread pool), so
:func:`popen_owned` starts a tiny Python launcher (:func:`_exec_owned`) that makes the request
and then ``exec``s the real command: same pid, same session, the setting survives ``exec``.
:func:`detach_and_die_with_parent` does the same in a process forked without ``exec`` (the
fork server's children). This module is the one place that knows about it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

from harness.paths import ROOT

_PR_SET_PDEATHSIG = 1
_NEEDS_DEATH_SIGNAL = sys.platform.startswith("linux")
#: Run by ``python -S -E -B -c``: no site, no PYTHON* variables, no bytecode written, then harness from ROOT.
_LAUNCHER = "import sys; sys.path.insert(0, sys.argv[1]); from harness.procs import _exec_owned; _exec_owned()"


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere nothing)."""
    if not _NEEDS_DEATH_SIGNAL:
        return
    try:
        import ctypes  # only where a process is started: not on the CLI's start-up path

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def detach_and_die_with_parent() -> None:
    """In a forked child: its own session, and death with the parent."""
    os.setsid()
    die_with_parent()


def _exec_owned() -> None:
    """The launcher's body: ``argv`` is ``[-c, ROOT, PARENT_PID, *command]``."""
    parent, cmd = int(sys.argv[2]), sys.argv[3:]
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the request was made
        os._exit(1)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        print(f"harness: cannot run {cmd[0]}: {exc}", file=sys.stderr)
        os._exit(127)


def popen_owned(cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    """``Popen`` in a new session, killed with the parent (see module docstring)."""
    if _NEEDS_DEATH_SIGNAL:
        cmd = [sys.executable, "-S", "-E", "-B", "-c", _LAUNCHER, str(ROOT), str(os.getpid()), *cmd]
    return subprocess.Popen(cmd, start_new_session=True, **kwargs)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the child's whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
