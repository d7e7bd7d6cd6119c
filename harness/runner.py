"""Runs the suites against a target in a subprocess and reads the verdicts back as data.

The subprocess is pytest with :mod:`harness.plugin`, the target's ``PYTHONPATH`` and the CPU
stand-ins; its verdict file (not its text output) is the result. The process runs in its own
session so a timeout kills the whole group; a timeout or a crash before any verdict makes
every selected case UNTESTABLE with the reason (a bisect then skips that commit).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from harness import target as target_mod
from harness.atomicio import read_versioned_json
from harness.errors import CorruptFile, UsageError
from harness.results import CaseResult, RunResult
from harness.target import HARNESS_ROOT, Target
from harness.verdict import Verdict

SUITES_DIR = HARNESS_ROOT / "suites"
FIXTURES_DIR = HARNESS_ROOT / "fixtures"


UPSTREAM = "upstream"  # MB's own packing tests, replayed from the target's tree (harness.upstream)


def golden_suites() -> list[str]:
    return sorted(p.stem[5:] for p in SUITES_DIR.glob("test_*.py"))


def available_suites() -> list[str]:
    return golden_suites() + [UPSTREAM]


def suite_files(names: list[str] | None) -> list[Path]:
    """Golden suite names (``packing_algorithms``...) to files; unknown names are a usage error.

    ``None`` means every golden suite. The ``upstream`` suite has no file here; it is run by
    :mod:`harness.upstream` (see :func:`run_suites`).
    """
    known = available_suites()
    if not names:
        return [SUITES_DIR / f"test_{n}.py" for n in golden_suites()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [SUITES_DIR / f"test_{n}.py" for n in names if n != UPSTREAM]


@dataclass
class RunOptions:
    suites: list[str] | None = None
    keyword: str | None = None
    timeout_s: float = 1800.0
    jobs: int = 1
    record: bool = False
    obtained_dir: Path | None = None
    fixtures_dir: Path = FIXTURES_DIR
    extra_pytest: list[str] = field(default_factory=list)


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def _pytest_cmd(files: list[Path], opts: RunOptions, cases_file: Path, obtained: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", *map(str, files), "-p", "harness.plugin", "-p", "no:cacheprovider",
           "-q", "--no-header", "-rN", "--color=no", "-W", "ignore",
           "--rootdir", str(HARNESS_ROOT), "-c", str(HARNESS_ROOT / "suites" / "pytest.ini"),
           "--harness-results", str(cases_file), "--harness-obtained", str(obtained),
           "--harness-fixtures", str(opts.fixtures_dir)]
    if opts.record:
        cmd.append("--harness-record")
    if opts.keyword:
        cmd += ["-k", opts.keyword]
    if opts.jobs > 1:
        cmd += ["-n", str(opts.jobs)]
    return cmd + opts.extra_pytest


def _stream(proc: subprocess.Popen, sink: TextIO | None, deadline: float) -> tuple[bool, str]:
    """Copy the child's output to ``sink`` live; return (timed_out, tail of the output)."""
    tail: list[str] = []
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    buf = b""
    while True:
        if time.monotonic() > deadline:
            _kill_group(proc)
            return True, "".join(tail)
        chunk = proc.stdout.read(65536) if proc.stdout else b""
        if chunk:
            buf += chunk
            text = chunk.decode("utf-8", "replace")
            if sink is not None:
                sink.write(text)
                sink.flush()
            tail.append(text)
            tail = tail[-200:]
        elif proc.poll() is not None:
            return False, "".join(tail)
        else:
            time.sleep(0.1)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_suites(tgt: Target, opts: RunOptions, out_dir: Path, progress: TextIO | None = sys.stderr) -> RunResult:
    """Run the selected suites against ``tgt``; everything lands under ``out_dir``."""
    files = suite_files(opts.suites)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not files:  # only the upstream suite was asked for
        return _run_upstream_only(tgt, opts, out_dir)
    cases_file = out_dir / "cases.json"
    if cases_file.exists():
        cases_file.unlink()
    obtained = opts.obtained_dir or out_dir / "obtained"
    standins_log = out_dir / "standins.log"
    standins_log.write_text("")
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.monotonic()
    proc = subprocess.Popen(_pytest_cmd(files, opts, cases_file, obtained), cwd=HARNESS_ROOT,
                            env=tgt.env(standins_log), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out, tail = _stream(proc, progress, t0 + opts.timeout_s)
    duration = time.monotonic() - t0
    cases, notes = _collect(cases_file, files, timed_out, proc.returncode, tail, opts.timeout_s)
    if opts.suites and UPSTREAM in opts.suites:
        up_cases, up_notes = _upstream(tgt, opts, out_dir)
        cases += up_cases
        notes += up_notes
        duration = time.monotonic() - t0
    result = RunResult(
        run_id=out_dir.name, target=_target_doc(tgt), versions=_target_versions(tgt), machine=target_mod.machine(),
        import_mode="full", standins=sorted(set(filter(None, standins_log.read_text().splitlines()))),
        started=started.strftime("%Y-%m-%dT%H:%M:%SZ"), duration_s=round(duration, 2), cases=cases, notes=notes)
    result.save(out_dir / "results.json")
    return result


def _upstream(tgt: Target, opts: RunOptions, out_dir: Path) -> tuple[list[CaseResult], list[str]]:
    from harness.upstream import run_upstream

    return run_upstream(tgt, opts, out_dir / "upstream")


def _run_upstream_only(tgt: Target, opts: RunOptions, out_dir: Path) -> RunResult:
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.monotonic()
    cases, notes = _upstream(tgt, opts, out_dir)
    result = RunResult(
        run_id=out_dir.name, target=_target_doc(tgt), versions=_target_versions(tgt), machine=target_mod.machine(),
        import_mode="upstream", standins=[], started=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=round(time.monotonic() - t0, 2), cases=cases, notes=notes)
    result.save(out_dir / "results.json")
    return result


def _collect(cases_file: Path, files: list[Path], timed_out: bool, rc: int | None, tail: str,
             timeout_s: float) -> tuple[list[CaseResult], list[str]]:
    notes: list[str] = []
    if timed_out:
        reason = f"timeout: the suite process ran past {timeout_s:.0f} s and was killed"
        return [_whole_suite(f, Verdict.UNTESTABLE, reason) for f in files], [reason]
    try:
        doc = read_versioned_json(cases_file, "harness-cases", 1)
    except (FileNotFoundError, CorruptFile):
        reason = f"the suite process exited with code {rc} before reporting verdicts: {_last_lines(tail)}"
        return [_whole_suite(f, Verdict.ERROR, reason) for f in files], [reason]
    if rc not in (0, 1):
        notes.append(f"pytest exited with code {rc}: {_last_lines(tail)}")
    cases = [CaseResult.from_json(c) for c in doc["cases"]]
    if not cases:
        notes.append("no case was selected")
    return cases, notes


def _last_lines(text: str, n: int = 6) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-1500:]


def _whole_suite(file: Path, verdict: Verdict, reason: str) -> CaseResult:
    suite = file.stem[5:]
    return CaseResult(case_id=f"{suite}::*", suite=suite, verdict=verdict, message=reason)


def _target_doc(tgt: Target) -> dict[str, object]:
    if tgt.src is None:
        loc = target_mod.mb_location()
        return {"kind": "installed", "path": str(loc) if loc else None, "commit": None}
    return {"kind": "source", "path": str(tgt.src), "commit": tgt.commit}


def _target_versions(tgt: Target) -> dict[str, str]:
    """Versions as the child sees them (the target's MB may differ from the installed one)."""
    code = "import json; from harness.target import versions; print(json.dumps(versions()))"
    try:
        out = subprocess.run([sys.executable, "-c", code], env=tgt.env(), capture_output=True, text=True,
                             timeout=120, cwd=HARNESS_ROOT)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError, OSError):
        return {"megatron-bridge": "unknown"}


def temp_out_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="harness-run-"))


ProgressFn = Callable[[str], None]
