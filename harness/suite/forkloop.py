"""The fork server's loop (``python -m harness.suite.forkloop``): import once, fork per run.

Why apart from :mod:`harness.suiterun.forkserver` (the client and the pool): this is what runs in
the server process and in the runs it forks, and nothing of the client's threads or pool is
wanted there.

Protocol: one JSON request per line on the server's stdin ``{"id", "argv", "env", "cwd", "log"}``;
the server answers ``{"id", "pid"}`` when the child starts and ``{"id", "rc"}`` when it ends. A
request ``{"id", "spawn": {"env", "requests", "answers"}}`` forks a full-import server from this
(light-import) one instead (:func:`become_server`), answered ``{"id", "pid"}``.
"""

from __future__ import annotations

import gc
import json
import os
import select
import sys

from harness.contract import ForkAnswer, ForkRequest, ForkSpawn
from harness.suite.preload import preload


def _child(req: ForkRequest) -> int:
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


def become_server(spec: ForkSpawn) -> int:
    """In a child forked by a light-import server: become the full-import server of the same
    megatron-core, talking over the two named pipes the client made (``spec``).

    Why: the light server already holds torch, megatron-core and the rest of :data:`PRELOAD`; a
    full server forked from it imports only what a full import adds (:data:`PRELOAD_FULL`), about
    half of a full server's start from scratch, and a bisection starts one pair per pinned
    Megatron-LM tree it reaches. Its own session, not tied to the light server's life (the pool
    may stop that one first): it ends when the client closes its request pipe, as a server
    started as a process ends when its stdin closes.
    """
    os.setsid()
    os.environ.clear()
    os.environ.update(spec["env"])
    from harness.suite.standins import light

    light.uninstall()  # the light server's finder: a full server imports MB's packages as they are
    requests = os.open(spec["requests"], os.O_RDONLY)  # the client opens its end meanwhile
    answers = os.open(spec["answers"], os.O_WRONLY)
    os.dup2(requests, 0)
    os.dup2(answers, 1)
    os.close(requests)
    os.close(answers)
    serve()
    return 0


def _answer(msg: ForkAnswer) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def serve() -> None:
    """Server loop (``python -m harness.suite.forkloop``): fork per request, report each exit."""
    preload()
    # What the server imported stays for every child: out of the collector's sight, each child's
    # collections (pytest's own at session end, Python's generational ones during a case) skip
    # torch's and transformers' object graphs instead of walking them again and again, and the
    # pages holding them stay shared (a collection writes to every object it visits).
    gc.freeze()
    _answer({"ready": True})
    fd = sys.stdin.fileno()
    buf = b""
    children: dict[int, int] = {}  # pid -> request id
    spawned: set[int] = set()  # servers forked from this one (reaped here, never reported)
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
                req: ForkRequest = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        code = become_server(req["spawn"]) if "spawn" in req else _child(req)
                    finally:
                        sys.stdout.flush()
                        sys.stderr.flush()
                        os._exit(code)
                if "spawn" in req:
                    spawned.add(pid)
                else:
                    children[pid] = req["id"]
                _answer({"id": req["id"], "pid": pid})
        while children or spawned:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            spawned.discard(pid)
            if pid in children:
                _answer({"id": children.pop(pid), "rc": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
