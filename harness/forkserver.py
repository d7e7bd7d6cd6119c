"""A fork server for light-import suite runs: import torch and megatron-core once, fork per run.

Why: a bisect evaluates many MB commits with the same environment. With light import, what is
left of a suite process's start-up is mostly ``import torch`` and ``import megatron.core``
(about 4 s here), paid again for every commit. The server (``python -m harness.forkserver``,
started with the light-import environment) imports them once; every run is a ``fork()`` of it
that puts the target's ``src`` first on ``sys.path`` and calls ``pytest.main``. Megatron-Bridge
itself is never imported in the server, so each child sees only its own commit's MB.

Protocol: one JSON request per line on the server's stdin ``{"argv", "env", "cwd", "log"}``;
the server answers ``{"pid": N}`` when the child starts and ``{"rc": N}`` when it ends. One
run at a time per server; :class:`ForkServer` is the client (one per thread).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PRELOAD = (
    "torch",
    "megatron.core",
    "megatron.core.packed_seq_params",
    "numpy",
    "pytest",
    "harness.plugin",
    "harness.golden.compare",
)


def _child(req: dict[str, Any]) -> int:
    """In the forked child: become the suite process of ``req`` and run pytest."""
    from harness.procs import detach_and_die_with_parent

    detach_and_die_with_parent()
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(req["env"])
    front = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in front if p not in sys.path[: len(front)]]
    import importlib

    importlib.invalidate_caches()
    os.chdir(req["cwd"])
    import pytest

    return int(pytest.main(req["argv"]))


def serve() -> None:
    """Server loop (``python -m harness.forkserver``)."""
    for name in PRELOAD:
        __import__(name)
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(req)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        out.write(json.dumps({"rc": rc}) + "\n")
        out.flush()


class ForkServer:
    """Client side: start the server once, then run pytest invocations through it."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        from harness.procs import popen_owned

        self.proc = popen_owned(
            [sys.executable, "-m", "harness.forkserver"],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = self._read(time.monotonic() + 300)
        if not ready or not ready.get("ready"):
            self.close()
            raise RuntimeError("the fork server did not start")

    def _read(self, deadline: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                line = self.proc.stdout.readline()
                return json.loads(line) if line else None

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: Path, timeout_s: float
    ) -> tuple[int | None, bool]:
        """Run ``pytest argv`` in a fork; returns (exit code, timed out)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        started = self._read(deadline)
        if not started or "pid" not in started:
            raise RuntimeError("the fork server stopped answering")
        done = self._read(deadline)
        if done is None:  # timeout: kill the run's process group, then collect its status
            try:
                os.killpg(started["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            done = self._read(time.monotonic() + 60)
            return (done or {}).get("rc"), True
        return done.get("rc"), False

    def close(self) -> None:
        from harness.procs import kill_group

        if self.proc.poll() is None:
            kill_group(self.proc)


_local = threading.local()


def server_for(env: dict[str, str], cwd: Path) -> ForkServer:
    """This thread's server, started on first use (environment fixed at start: light import)."""
    srv = getattr(_local, "server", None)
    if srv is None or srv.proc.poll() is not None:
        srv = ForkServer(env, cwd)
        _local.server = srv
    return srv


if __name__ == "__main__":
    serve()
