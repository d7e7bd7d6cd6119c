"""Rows of the matrix where the evaluated MB itself misbehaves: its import hangs, exhausts its
memory, writes without end, leaves a child behind or is killed. Each runs ``harness run
--mb-src`` on a copy of the installed MB whose packing algorithms module does it at import,
with the light suite (a few seconds); the run must finish and name the fault in its results.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.faults.lab import Lab, Observed, Outcome, Proc, pid_alive

HANG = "import time as _t\n_t.sleep(10**6)"
# The address-space limit is set just above what the process already maps, then 4 GiB asked for.
MEMORY = (
    "import resource as _r\n"
    "_vm = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024\n"
    "_r.setrlimit(_r.RLIMIT_AS, (_vm + (256 << 20), _r.getrlimit(_r.RLIMIT_AS)[1]))\n"
    "_hog = bytearray(4 << 30)"
)
# Without end, not without limit: ~10 MB/s, so a captured copy never fills the CI disk.
ENDLESS = (
    "import sys as _s, time as _t\n"
    "while True:\n    _s.stdout.write('x' * 1000 + '\\n')\n    _s.stdout.flush()\n    _t.sleep(0.0001)"
)
ORPHAN = (
    "import subprocess as _sp, pathlib as _p\n"
    "_child = _sp.Popen(['sleep', '600'])\n"
    "_p.Path(__file__).with_name('orphan.pid').write_text(str(_child.pid))"
)
SUICIDE = "import os as _o, signal as _sg\n_o.kill(_o.getpid(), _sg.SIGKILL)"


def _degraded(proc: Proc, out: Path, needle: str) -> Observed:
    """DEGRADED when the run ended as a run (exit 0/1, no traceback), results.json loads and
    every case names the fault (``needle`` in its message)."""
    if proc.rc not in (0, 1) or "Traceback" in proc.err:
        return Observed(Outcome.LOST, proc.wall_s, f"rc={proc.rc}: {proc.err[-400:]}")
    try:
        cases = json.loads((out / "results.json").read_text())["cases"]
    except (OSError, ValueError, KeyError) as exc:
        return Observed(Outcome.LOST, proc.wall_s, f"no readable results.json: {exc}")
    named = [c for c in cases if needle.lower() in (c.get("message") or "").lower()]
    if not cases or len(named) != len(cases):
        got = sorted({(c["verdict"], (c.get("message") or "")[:80]) for c in cases})
        return Observed(Outcome.LOST, proc.wall_s, f"{len(named)}/{len(cases)} cases name {needle!r}: {got}")
    verdicts = sorted({c["verdict"] for c in cases})
    return Observed(
        Outcome.DEGRADED, proc.wall_s, f"{len(cases)} cases {'/'.join(verdicts)}: {named[0]['message'][:90]}"
    )


def _run(lab: Lab, name: str, code: str, *extra: str) -> tuple[Proc, Path, Path]:
    where = lab.fresh(name)
    src = lab.mb_tree(where, code)
    out = where / "out"
    return lab.run_light(src, out, *extra), out, src


def hanging_import(lab: Lab) -> Observed:
    proc, out, _ = _run(lab, "hang", HANG, "--timeout", "4")
    return _degraded(proc, out, "ran past 4 s")


def memory_exhausted(lab: Lab) -> Observed:
    proc, out, _ = _run(lab, "memory", MEMORY)
    return _degraded(proc, out, "MemoryError")


def endless_stdout(lab: Lab) -> Observed:
    proc, out, _ = _run(lab, "stdout", ENDLESS, "--timeout", "4")
    return _degraded(proc, out, "ran past 4 s")


def child_killed(lab: Lab) -> Observed:
    proc, out, _ = _run(lab, "suicide", SUICIDE)
    return _degraded(proc, out, "exited with code -9")


def orphan_child(lab: Lab) -> Observed:
    """The import starts ``sleep 600`` and returns: the run must finish (not wait on the child's
    pipes) and leave no process of the evaluated MB running."""
    proc, _out, src = _run(lab, "orphan", ORPHAN)
    pid_file = src / "megatron" / "bridge" / "data" / "packing" / "orphan.pid"
    if not pid_file.exists():
        return Observed(Outcome.LOST, proc.wall_s, "the injected import never ran")
    pid = int(pid_file.read_text())
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        return Observed(Outcome.LOST, proc.wall_s, f"the MB's child {pid} outlived the run")
    if proc.rc not in (0, 1) or "Traceback" in proc.err:
        return Observed(Outcome.LOST, proc.wall_s, f"rc={proc.rc}: {proc.err[-400:]}")
    return Observed(Outcome.UNAFFECTED, proc.wall_s, "run finished, the left-behind child was killed")
