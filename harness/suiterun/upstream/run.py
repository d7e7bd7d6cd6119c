"""The ``upstream`` suite: MB's own packing tests, run from the target's tree.

For a target that is an MB source checkout (``Target.src`` = ``<tree>/src``, tests in
``<tree>/tests``), the selection (:mod:`harness.suiterun.upstream.selection`) is resolved by probing the
tree, then run in one pytest subprocess with cwd = tree root, the target's environment (its
``src`` first, the CPU stand-ins) and the tree root on ``PYTHONPATH`` (MB's tests import
helpers as ``tests.``). Per-test outcomes come back as data, written by the child-side plugin
(:mod:`harness.suite.upstream_plugin`) and turned into verdicts by
:mod:`harness.suiterun.upstream.outcomes`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.contract import VERSIONS_FILE, Env
from harness.procs import kill_group, popen_owned
from harness.records.results import CaseResult
from harness.records.verdict import Verdict
from harness.suiterun.upstream.outcomes import SUITE, PytestRun, case_results
from harness.suiterun.upstream.selection import Resolved, describe, load_selection, resolve
from harness.target import Target

NO_CHECKOUT = "upstream suite needs an MB source checkout (--mb-src)"


def run_upstream(tgt: Target, out_dir: Path, *, timeout_s: float = 1800.0) -> tuple[list[CaseResult], list[str]]:
    """Run MB's packing selection from ``tgt``'s tree; return (cases, notes).

    The selection is MB's own, never narrowed by ``-k``; MB's pytest is killed after
    ``timeout_s``. Output and events go under ``out_dir``.
    """
    if tgt.src is None:
        return [CaseResult(f"{SUITE}::*", SUITE, Verdict.UNTESTABLE, message=NO_CHECKOUT, source=SUITE)], [NO_CHECKOUT]
    tree = Path(tgt.src).resolve().parent
    if not (tree / "tests").is_dir():
        msg = f"upstream suite: {tree} has no tests/ directory (MB's tests live in <checkout>/tests)"
        return [CaseResult(f"{SUITE}::*", SUITE, Verdict.UNTESTABLE, message=msg, source=SUITE)], [msg]
    selection = load_selection()
    resolved = resolve(tree, selection)
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = [describe(r) for r in resolved]
    runnable = [r for r in resolved if r.variant is not None]
    run = PytestRun()
    if runnable:
        run = _run_pytest(tgt, tree, runnable, timeout_s, out_dir)
        notes += run.notes
    return case_results(resolved, run, selection.count_rule), notes


def child_env(tgt: Target, tree: Path, out_dir: Path | None = None) -> dict[str, str]:
    """The target's environment with the tree root right after its ``src`` (``tests.`` imports);
    the child writes the versions it imports into ``out_dir`` (harness.contract)."""
    env = tgt.env()
    if out_dir is not None:
        env[Env.VERSIONS_FILE] = str(out_dir / VERSIONS_FILE)
    parts = env["PYTHONPATH"].split(os.pathsep)
    src = str(tgt.src)
    at = parts.index(src) + 1 if src in parts else 0
    env["PYTHONPATH"] = os.pathsep.join(parts[:at] + [str(tree)] + parts[at:])
    return env


def build_command(tree: Path, runnable: list[Resolved], spec: Path, events: Path) -> list[str]:
    files = sorted({r.variant.file for r in runnable if r.variant})
    return [
        sys.executable,
        "-m",
        "pytest",
        *files,
        "--rootdir",
        str(tree),
        "-p",
        "no:cacheprovider",
        "-p",
        "harness.suite.upstream_plugin",
        "--harness-upstream-spec",
        str(spec),
        "--harness-upstream-events",
        str(events),
        "--continue-on-collection-errors",
        "-q",
        "--color=no",
        "-rN",
    ]


def _run_pytest(tgt: Target, tree: Path, runnable: list[Resolved], timeout_s: float, out_dir: Path) -> PytestRun:
    spec = out_dir / "spec.json"
    events = out_dir / "events.jsonl"
    log = out_dir / "pytest.log"
    spec.write_text(
        json.dumps(
            {
                "entries": [
                    {"name": r.entry.name, "file": r.variant.file, "k": r.variant.k} for r in runnable if r.variant
                ]
            },
            indent=1,
        )
    )
    if events.exists():
        events.unlink()
    cmd = build_command(tree, runnable, spec, events)
    run = PytestRun()
    t0 = time.monotonic()
    with log.open("wb") as sink:
        proc = popen_owned(
            cmd,
            cwd=tree,
            env=child_env(tgt, tree, out_dir),
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            run.rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            kill_group(proc)
            run.rc = proc.returncode
    run.duration_s = time.monotonic() - t0
    run.events = read_events(events)
    run.tail = _last_lines(log.read_text(encoding="utf-8", errors="replace"))
    if run.timed_out:
        run.notes.append(f"upstream: timeout: MB's pytest ran past {timeout_s:.0f} s and was killed; log {log}")
    elif run.rc not in (0, 1, 5):
        run.notes.append(f"upstream: MB's pytest exited with code {run.rc}: {run.tail} (log {log})")
    run.notes.append(f"upstream: {len(run.events)} events in {run.duration_s:.1f} s; log {log}")
    return run


def read_events(path: Path) -> list[dict[str, object]]:
    """Events written so far; a line cut by a kill is ignored."""
    out: list[dict[str, object]] = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _last_lines(text: str, n: int = 8) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not set(ln.strip()) <= set("=-_ ")]
    return " | ".join(lines[-n:])[-1500:]
