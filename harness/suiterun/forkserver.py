"""Fork servers for suite runs: import torch and megatron-core (and, for the full import, MB's
third-party dependencies) once, fork per run.

Why: a bisect evaluates many MB commits with the same environment. With light import, what is
left of a suite process's start-up is mostly ``import torch`` and ``import megatron.core``
(about 4 s with the installed megatron-core, 20 s and more with a pinned Megatron-LM tree),
paid again for every commit (for the full import also MB's third-party dependencies). A server
(:mod:`harness.suite.forkloop`, started with the group's import mode and, for
``--megatron-lm``, the pinned tree on its path) imports them once (:mod:`harness.suite.preload`);
every run is a ``fork()`` of it that puts the target's ``src`` first on ``sys.path`` and
calls ``pytest.main``. Megatron-Bridge itself is never imported in a server, so each child
sees only its own commit's MB.

One server per megatron-core (the installed one, or one pinned Megatron-LM tree) and import mode: pins change
rarely along MB's history, so one warm server serves many commits. :class:`ServerPool` keeps
at most ``capacity`` servers alive (each holds torch and megatron-core, several hundred MB),
evicting the least recently used idle one; when every server is busy with another tree the
caller runs a plain subprocess instead. A server runs several children at once (bisect ``-j``).

A full-import server starts forked from the warm light-import server of the same megatron-core
when there is one (it imports only what a full import adds), else from scratch.

This module is the client side and the pool; the server loop and its protocol are
:mod:`harness.suite.forkloop`.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.contract import ForkAnswer, ForkRequest, ForkSpawn

START_TIMEOUT_S = 300.0
DEFAULT_CAPACITY = 2  # servers alive at once (harness bisect --fork-servers)


class ForkServerError(RuntimeError):
    """A server did not start or stopped answering; the caller falls back to a plain subprocess."""


# ------------------------------------------------------------------------------ client side


class ForkServer:
    """One running server; thread-safe (runs from several threads go through it at once).

    Started as a process (``python -m harness.suite.forkloop``), or, with ``parent``, forked
    from a running light-import server of the same megatron-core
    (:func:`harness.suite.forkloop.become_server`), talking over two named pipes instead of the
    process's stdin and stdout.
    """

    def __init__(self, env: dict[str, str], cwd: Path, parent: ForkServer | None = None) -> None:
        from harness.procs import popen_owned

        self.proc: subprocess.Popen[str] | None = None
        self._pipes: Path | None = None
        self._eof = False
        deadline = time.monotonic() + START_TIMEOUT_S
        if parent is None:
            try:
                self.proc = popen_owned(
                    [sys.executable, "-m", "harness.suite.forkloop"],
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            except OSError as exc:  # no process at all (too many open files, no memory...)
                raise ForkServerError(f"the fork server could not be started: {exc}") from None
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.pid = self.proc.pid
            self._in, self._out = self.proc.stdin, self.proc.stdout
        else:
            self._pipes = Path(tempfile.mkdtemp(prefix="harness-forkserver-"))
            requests, answers = self._pipes / "requests", self._pipes / "answers"
            os.mkfifo(requests)
            os.mkfifo(answers)
            out_fd = os.open(answers, os.O_RDONLY | os.O_NONBLOCK)  # never blocks: the child writes later
            try:
                self.pid = parent.spawn(env, requests, answers, deadline)
                in_fd = _open_writer(requests, deadline, self.pid)
            except BaseException:
                os.close(out_fd)
                self.close()
                raise
            os.set_blocking(out_fd, True)
            self._in, self._out = os.fdopen(in_fd, "w"), os.fdopen(out_fd, "r")
        if not self._ready(deadline):
            self.close()
            raise ForkServerError("the fork server did not start")
        self._lock = threading.Lock()
        self._waiters: dict[int, queue.Queue[ForkAnswer]] = {}
        self._next_id = 0
        threading.Thread(target=self._dispatch, name="harness-forkserver-reader", daemon=True).start()

    def spawn(self, env: dict[str, str], requests: Path, answers: Path, deadline: float) -> int:
        """Fork a full-import server from this one (see :func:`harness.suite.forkloop.become_server`); its pid."""
        spec: ForkSpawn = {"env": env, "requests": str(requests), "answers": str(answers)}
        started = self._request({"spawn": spec}, deadline)
        if started is None or "pid" not in started:
            raise ForkServerError("the light fork server did not fork a full one")
        return int(started["pid"])

    def _ready(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._out], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                line = self._out.readline()
                try:
                    return bool(line) and bool(json.loads(line).get("ready"))
                except json.JSONDecodeError:
                    return False
        return False

    def _dispatch(self) -> None:
        """Route each answer to the run waiting for it; on EOF wake every waiter."""
        for line in self._out:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self._lock:
                waiter = self._waiters.get(msg.get("id"))
            if waiter is not None:
                waiter.put(msg)
        with self._lock:
            self._eof = True
            for waiter in self._waiters.values():
                waiter.put({"gone": True})

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return not self._eof

    def _send(self, body: ForkRequest) -> tuple[int, queue.Queue[ForkAnswer]]:
        """Send one request; (its id, the queue its answers arrive on). Raises when the server is gone."""
        answers: queue.Queue[ForkAnswer] = queue.Queue()
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            self._waiters[rid] = answers
            try:
                self._in.write(json.dumps({"id": rid, **body}) + "\n")
                self._in.flush()
            except (BrokenPipeError, OSError) as exc:
                del self._waiters[rid]
                raise ForkServerError(f"the fork server is gone ({exc})") from None
        return rid, answers

    def _request(self, body: ForkRequest, deadline: float) -> ForkAnswer | None:
        """Send one request; its first answer (None by ``deadline``)."""
        rid, answers = self._send(body)
        try:
            return self._get(answers, deadline)
        finally:
            with self._lock:
                self._waiters.pop(rid, None)

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: Path, timeout_s: float
    ) -> tuple[int | None, bool]:
        """Run ``pytest argv`` in a fork; returns (exit code, timed out)."""
        rid, answers = self._send({"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)})
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
    def _get(answers: queue.Queue[ForkAnswer], deadline: float) -> ForkAnswer | None:
        try:
            return answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def close(self) -> None:
        from harness.procs import kill_group

        if self.proc is not None:
            if self.proc.poll() is None:
                kill_group(self.proc)
            return
        for stream in (getattr(self, "_in", None), getattr(self, "_out", None)):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        if getattr(self, "pid", None):
            _kill_group(self.pid)  # its own session: the server and every run it forked
        if self._pipes is not None:
            shutil.rmtree(self._pipes, ignore_errors=True)


def _open_writer(fifo: Path, deadline: float, pid: int) -> int:
    """The write end of ``fifo`` once process ``pid`` has opened it for reading (by ``deadline``)."""
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            gone = False
            try:
                os.kill(pid, 0)
            except OSError:
                gone = True
            if exc.errno != errno.ENXIO or gone or time.monotonic() > deadline:  # ENXIO: no reader yet
                raise ForkServerError(f"the forked full-import server never opened its pipe ({exc})") from None
            time.sleep(0.01)
            continue
        os.set_blocking(fd, True)
        return fd


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
    def lease(
        self, key: str, env: dict[str, str], cwd: Path, capacity: int, parent: str | None = None
    ) -> Iterator[ForkServer]:
        """The server for ``key`` (started with ``env`` when needed), held for one run.

        ``parent``: the key of the light-import server of the same megatron-core; when it is alive,
        a server this lease starts is forked from it (:func:`harness.suite.forkloop.become_server`)
        instead of started from scratch. Raises :class:`PoolFull` when ``capacity`` servers are alive and all busy, and
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
                    entry.server = self._start(env, cwd, parent)
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

    def _start(self, env: dict[str, str], cwd: Path, parent: str | None) -> ForkServer:
        """A new server: forked from the live server under ``parent``, else started from scratch."""
        if parent is not None:
            with self._lock:
                held = self._entries.get(parent)
                server = held.server if held is not None else None
            if server is not None and server.alive():
                with contextlib.suppress(ForkServerError):  # it went away meanwhile: from scratch
                    return ForkServer(env, cwd, parent=server)
        return ForkServer(env, cwd)

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


def _kill_group(pid: int) -> None:
    """SIGKILL the process group of a forked run (its own session: the run and what it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
