"""Starting one suite process and watching it end: argv, environment, streaming, fork server.

The child is pytest with :mod:`harness.suite.plugin`, the target's ``PYTHONPATH`` and the
CPU stand-ins; what it is told to write (its CasesFile, event log, versions, stand-ins log) is
named by :mod:`harness.contract`. It runs in its own session so that a timeout kills
the whole process group, and so that Ctrl-C reaches only the driver, which then kills it.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from harness import contract, paths
from harness.contract import Env, Flag
from harness.procs import kill_group, popen_owned
from harness.progress import CaseFeed
from harness.suiterun.plan import Group, RunOptions
from harness.target import Target


@dataclass(frozen=True)
class ChildExit:
    """How a suite process ended."""

    rc: int | None
    timed_out: bool
    tail: str  # the end of its output
    timeout_s: float


def pytest_argv(files: list[Path], opts: RunOptions, cases_file: Path, obtained: Path) -> list[str]:
    """The child's command line (``python -m pytest ...``): pytest's own output is quiet, the
    verdicts come back as data (``--harness-results``), never parsed from text."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, files),
        "-p",
        "harness.suite.plugin",
        "-p",
        "harness.suite.standins.light",
        "-p",
        "no:cacheprovider",
        # their reports are warnings, ignored here anyway (-W ignore); their gc.collect() at the end
        # of every session walks torch's whole heap (half a second a process)
        "-p",
        "no:unraisableexception",
        "-p",
        "no:threadexception",
        # third-party plugins the suites never use: Hypothesis's imports (and pytest rewrites) all of
        # hypothesis at every session's end, about 1.5 s a process; the exploration calls
        # Hypothesis itself and needs no plugin
        "-p",
        "no:hypothesispytest",
        "-p",
        "no:anyio",
        "-p",
        "no:hydra_pytest",
        "-v" if opts.verbose else "-q",
        "--no-header",
        "--tb=short" if opts.verbose else "--tb=no",
        "-rN",
        "--color=no",
        "-W",
        "ignore",
        "--rootdir",
        str(paths.suites_dir().parent),
        "-c",
        str(paths.suites_dir() / "pytest.ini"),
        Flag.RESULTS,
        str(cases_file),
        Flag.OBTAINED,
        str(obtained),
        Flag.FIXTURES,
        str(opts.fixtures_dir),
        Flag.EVENTS,
        str(contract.events_file(cases_file)),
    ]
    if opts.record:
        cmd.append(Flag.RECORD)
    if opts.keyword:
        cmd += ["-k", opts.keyword]
    if opts.cases is not None:
        listed = cases_file.parent / contract.SELECTED_CASES
        listed.write_text(json.dumps(sorted(opts.cases)), encoding="utf-8")
        cmd += [Flag.CASES, str(listed)]
    if opts.jobs > 1:
        cmd += ["-n", str(opts.jobs)]
    return [str(c) for c in cmd] + opts.extra_pytest


def child_env(tgt: Target, run_dir: Path, group: Group) -> dict[str, str]:
    """The child's environment: the target's, the run directory's shared files, its group."""
    env = tgt.env(run_dir / contract.STANDINS_LOG)
    env[Env.IMPORT_MODE] = group.import_mode
    if group.name:
        env[Env.IMPORT_GROUP] = group.name
    else:
        env.pop(Env.IMPORT_GROUP, None)
    return env


def stream(
    proc: subprocess.Popen, sink: TextIO | CaseFeed | None, deadline: float, tick: Callable[[], object] = lambda: None
) -> tuple[bool, str]:
    """Copy the child's output to ``sink`` live, calling ``tick`` between reads (progress);
    return (timed_out, tail of the output)."""
    tail: list[str] = []
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    while True:
        if time.monotonic() > deadline:
            kill_group(proc)
            return True, "".join(tail)
        chunk = proc.stdout.read(65536) if proc.stdout else b""
        if chunk:
            text = chunk.decode("utf-8", "replace")
            if sink is not None:
                sink.write(text)
                sink.flush()
            tail.append(text)
            tail = tail[-200:]
        elif proc.poll() is not None:
            kill_group(proc)  # whatever the suite process started and left running dies with it
            return False, "".join(tail)
        else:
            tick()
            time.sleep(0.1)


def run_forked(
    tgt: Target, cmd: list[str], env: dict[str, str], log: Path, timeout_s: float, capacity: int, mode: str = "light"
) -> tuple[tuple[int | None, bool, str] | None, str]:
    """A group through the fork server of the target's megatron-core (the installed one, or the
    pinned Megatron-LM tree; servers never have an MB on their path) and of its import ``mode``
    (a full-import server also holds MB's third-party dependencies: one server per both).

    Returns ((exit code, timed out, output tail), "") or (None, why) when no server could take
    the run: the caller then runs a plain subprocess and says so.
    """
    from harness.suiterun.forkserver import POOL, ForkServerError

    core = Target(core=tgt.core, core_pin=tgt.core_pin)
    server_env = core.env()
    server_env[Env.IMPORT_MODE] = mode
    core_name = tgt.core or "installed megatron-core"
    key = f"{core_name} ({mode} import)"
    # a full-import server forks from the light one of the same megatron-core when that one is warm
    parent = f"{core_name} (light import)" if mode == "full" else None
    try:
        with POOL.lease(key, server_env, paths.ROOT, capacity, parent) as server:
            rc, timed_out = server.run(cmd[3:], env, paths.suites_dir().parent, log, timeout_s)
    except ForkServerError as exc:
        return None, str(exc)
    try:
        tail = log.read_text(errors="replace")[-20000:]
    except OSError:
        tail = ""
    return (rc, timed_out, tail), ""


def run_child(
    tgt: Target,
    opts: RunOptions,
    group: Group,
    run_dir: Path,
    cases_file: Path,
    obtained: Path,
    remaining_s: float,
    feed: CaseFeed,
) -> tuple[ChildExit, list[str]]:
    """Run one group's suite process to its end (or the time limit); its exit and notes."""
    notes: list[str] = []
    env = child_env(tgt, run_dir, group)
    cmd = pytest_argv(group.files, opts, cases_file, obtained)
    forked = None
    if opts.fork_servers > 0 and group.import_mode in ("light", "full"):
        log = contract.pytest_log(run_dir, group.name)
        forked, why_not = run_forked(tgt, cmd, env, log, remaining_s, opts.fork_servers, group.import_mode)
        if why_not:
            notes.append(f"fork server unavailable ({why_not}): ran as a plain subprocess")
    if forked is not None:
        rc, timed_out, tail = forked
    else:
        proc = popen_owned(
            cmd,
            cwd=paths.suites_dir().parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            events = contract.events_file(cases_file)
            timed_out, tail = stream(
                proc, feed.sink, time.monotonic() + remaining_s, functools.partial(feed.poll, events)
            )
        except KeyboardInterrupt:
            kill_group(proc)  # its own session: Ctrl-C reached only us
            raise
        rc = proc.returncode
    return ChildExit(rc, timed_out, tail, opts.timeout_s), notes
