"""Child processes that never outlive the harness.

Suite processes run in their own session so a timeout can kill the whole group; but a new
session also means a ``kill -9`` of the harness would leave them running. On Linux the child
asks the kernel (``PR_SET_PDEATHSIG``) to be killed when its parent dies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1


def _session_and_death_signal() -> None:  # runs in the child, between fork and exec
    os.setsid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


def popen_owned(cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    """``Popen`` in a new session, killed with the parent (see module docstring)."""
    return subprocess.Popen(cmd, preexec_fn=_session_and_death_signal, **kwargs)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the child's whole process group and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
