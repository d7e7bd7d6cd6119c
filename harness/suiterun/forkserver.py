"""Fork servers for suite runs: import torch and megatron-core (and, for the full import, MB's
third-party dependencies) once, fork per run.

Why: a bisect evaluates many MB commits with the same environment. With light import, what is
left of a suite process's start-up is mostly ``import torch`` and ``import megatron.core``
(about 4 s with the installed megatron-core, 20 s and more with a pinned Megatron-LM tree),
paid again for every commit (for the full import also MB's third-party dependencies). A server
(``python -m harness.suiterun.forkserver``, started with the group's import mode and, for
``--megatron-lm``, the pinned tree on its path) imports them once (:mod:`harness.suiterun.preload`);
every run is a ``fork()`` of it that puts the target's ``src`` first on ``sys.path`` and
calls ``pytest.main``. Megatron-Bridge itself is never imported in a server, so each child
sees only its own commit's MB.

One server per megatron-core (the installed one, or one pinned Megatron-LM tree) and import mode: pins change
rarely along MB's history, so one warm server serves many commits. :class:`ServerPool` keeps
at most ``capacity`` servers alive (each holds torch and megatron-core, several hundred MB),
evicting the least recently used idle one; when every server is busy with another tree the
caller runs a plain subprocess instead. A server runs several children at once (bisect ``-j``).

Protocol: one JSON request per line on the server's stdin ``{"id", "argv", "env", "cwd", "log"}``;
the server answers ``{"id", "pid"}`` when the child starts and ``{"id", "rc"}`` when it ends.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.suiterun.preload import preload

START_TIMEOUT_S = 300.0
DEFAULT_CAPACITY = 2  # servers alive at once (harness bisect --fork-servers)


class ForkServerError(RuntimeError):
    """A server did not start or stopped answering; the caller falls back to a plain subprocess."""


# ------------------------------------------------------------------------------ server side


def _child(req: dict[str, Any]) -> int:
    """In the forked child: become the suite process of ``req`` and run pytest."""
    from harness.procs import detach_and_die_with_parent

    detach_and_die_with_parent()
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # never read the server's request pipe
    os.close(null)
    os.environ.clear()
    os.environ.update(req["env"])
    front = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in front if p not in sys.path[: len(front)]]
    import importlib

    importlib.invalidate_caches()
    os.chdir(req["cwd"])
    import pytest

    return int(pytest.main(req["argv"]))


def _answer(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def serve() -> None:
    """Server loop (``python -m harness.suiterun.forkserver``): fork per request, report each exit."""
    preload()
    # What the server imported stays for every child: out of the collector's sight, each child's
    # collections (pytest's own at session end, Python's generational ones during a case) skip
    # torch's and transformers' object graphs instead of walking them again and again, and the
    # pages holding them stay shared (a collection writes to every object it visits).
    gc.freeze()
    _answer({"ready": True})
    fd = sys.stdin.fileno()
    buf = b""
    children: dict[int, Any] = {}  # pid -> request id
    while True:
        readable, _, _ = select.select([fd], [], [], 0.05)
        if readable:
            chunk = os.read(fd, 65536)
            if not chunk:
                return  # the client is gone; children die with us (parent-death signal)
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
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
                children[pid] = req["id"]
                _answer({"id": req["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid in children:
                _answer({"id": children.pop(pid), "rc": os.waitstatus_to_exitcode(status)})


# ------------------------------------------------------------------------------ client side


class ForkServer:
    """One running server; thread-safe (runs from several threads go through it at once)."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        from harness.procs import popen_owned

        try:
            self.proc = popen_owned(
                [sys.executable, "-m", "harness.suiterun.forkserver"],
                env=env,
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError as exc:  # no process at all (too many open files, no memory...)
            raise ForkServerError(f"the fork server could not be started: {exc}") from None
        if not self._ready(time.monotonic() + START_TIMEOUT_S):
            self.close()
            raise ForkServerError("the fork server did not start")
        self._lock = threading.Lock()
        self._waiters: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._next_id = 0
        threading.Thread(target=self._dispatch, name="harness-forkserver-reader", daemon=True).start()

    def _ready(self, deadline: float) -> bool:
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                line = self.proc.stdout.readline()
                try:
                    return bool(line) and bool(json.loads(line).get("ready"))
                except json.JSONDecodeError:
                    return False
        return False

    def _dispatch(self) -> None:
        """Route each answer to the run waiting for it; on EOF wake every waiter."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self._lock:
                waiter = self._waiters.get(msg.get("id"))
            if waiter is not None:
                waiter.put(msg)
        with self._lock:
            for waiter in self._waiters.values():
                waiter.put({"gone": True})

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: Path, timeout_s: float
    ) -> tuple[int | None, bool]:
        """Run ``pytest argv`` in a fork; returns (exit code, timed out)."""
        assert self.proc.stdin is not None
        answers: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            self._waiters[rid] = answers
            try:
                self.proc.stdin.write(
                    json.dumps({"id": rid, "argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}) + "\n"
                )
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                del self._waiters[rid]
                raise ForkServerError(f"the fork server is gone ({exc})") from None
        deadline = time.monotonic() + timeout_s
        try:
            started = self._get(answers, deadline)
            if not started or "pid" not in started:
                raise ForkServerError("the fork server stopped answering")
            done = self._get(answers, deadline)
            if done is None:  # timeout: kill the run's process group, then collect its status
                _kill_group(started["pid"])
                done = self._get(answers, time.monotonic() + 60)
                return (done or {}).get("rc"), True
            if "rc" not in done:
                raise ForkServerError("the fork server stopped while a run was in flight")
            _kill_group(started["pid"])  # whatever the run started and left running dies with it
            return done["rc"], False
        finally:
            with self._lock:
                self._waiters.pop(rid, None)

    @staticmethod
    def _get(answers: queue.Queue[dict[str, Any]], deadline: float) -> dict[str, Any] | None:
        try:
            return answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def close(self) -> None:
        from harness.procs import kill_group

        if self.proc.poll() is None:
            kill_group(self.proc)


class PoolFull(ForkServerError):
    """Every live server is busy with another megatron-core and no more may start."""


@dataclass
class _Entry:
    server: ForkServer | None = None
    users: int = 0  # runs holding a lease on this server
    starting: threading.Lock = field(default_factory=threading.Lock)


class ServerPool:
    """At most ``capacity`` warm servers, one per megatron-core key, least recently used evicted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()

    def keys(self) -> list[str]:
        """Keys of the servers alive (or starting), least recently used first."""
        with self._lock:
            return list(self._entries)

    @contextlib.contextmanager
    def lease(self, key: str, env: dict[str, str], cwd: Path, capacity: int) -> Iterator[ForkServer]:
        """The server for ``key`` (started with ``env`` when needed), held for one run.

        Raises :class:`PoolFull` when ``capacity`` servers are alive and all busy, and
        :class:`ForkServerError` when the server cannot start.
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._make_room(capacity)
                entry = self._entries[key] = _Entry()
            self._entries.move_to_end(key)
            entry.users += 1
        try:
            with entry.starting:
                if entry.server is None or not entry.server.alive():
                    entry.server = ForkServer(env, cwd)
            yield entry.server
        finally:
            with self._lock:
                entry.users -= 1
                if (
                    entry.users == 0
                    and (entry.server is None or not entry.server.alive())
                    and self._entries.get(key) is entry
                ):
                    del self._entries[key]

    def _make_room(self, capacity: int) -> None:
        while len(self._entries) >= max(1, capacity):
            idle = next((k for k, e in self._entries.items() if e.users == 0), None)
            if idle is None:
                raise PoolFull(f"{len(self._entries)} fork server(s) alive, all busy (limit {capacity})")
            entry = self._entries.pop(idle)
            if entry.server is not None:
                entry.server.close()

    def close(self) -> None:
        with self._lock:
            entries, self._entries = list(self._entries.values()), collections.OrderedDict()
        for entry in entries:
            if entry.server is not None:
                entry.server.close()


POOL = ServerPool()


if __name__ == "__main__":
    serve()


def _kill_group(pid: int) -> None:
    """SIGKILL the process group of a forked run (its own session: the run and what it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
