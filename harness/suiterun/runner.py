"""Runs the suites against a target in a subprocess and reads the verdicts back as data.

The subprocess is pytest with :mod:`harness.suiterun.plugin`, the target's ``PYTHONPATH`` and the CPU
stand-ins; its verdict file (not its text output) is the result. The process runs in its own
session so a timeout kills the whole group.

When the process leaves no verdict file, its live event log (:mod:`harness.suiterun.caselog`) says how
far it got. Killed at the time limit: the case(s) it was running FAIL with ``broken: timeout``
(a hang is the commit's failure, bisectable; the kill at ``--timeout`` keeps a hung commit from
hanging a bisection), finished cases keep their verdicts, cases never started are UNTESTABLE
("not run"). Died on its own: the running case is an ERROR (a crash cannot be attributed), the
others as above. Nothing collected at all: one ERROR per suite (the harness's suite modules
never got as far as MB's code).

One module because launching pytest, streaming its output and salvaging a killed or crashed
process are one subprocess's life cycle: the salvage reads the files the launch told the
process to write (verdict file, event log) under the same options.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from harness import paths
from harness.errors import CorruptFile, UsageError
from harness.procs import kill_group, popen_owned
from harness.progress import CaseFeed
from harness.records.atomicio import read_versioned_json
from harness.records.machine import this_machine
from harness.records.provenance import of_run
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict, worst
from harness.suiterun.caselog import CaseLog, read_log
from harness.suiterun.fatal import mb_crash
from harness.suiterun.target import Target, mb_location

UPSTREAM = "upstream"  # MB's own packing tests, replayed from the target's tree (harness.upstream)


def golden_suites() -> list[str]:
    return sorted(p.stem[5:] for p in paths.suites_dir().glob("test_*.py"))


def available_suites() -> list[str]:
    return golden_suites() + [UPSTREAM]


def suite_files(names: list[str] | None) -> list[Path]:
    """Golden suite names (``packing_algorithms``...) to files; unknown names are a usage error.

    ``None`` means every golden suite. The ``upstream`` suite has no file here; it is run by
    :mod:`harness.upstream` (see :func:`run_suites`).
    """
    if names and set(names) <= {UPSTREAM}:
        return []
    suites = paths.require_suites()  # a one-line error, never a run of zero suites
    known = available_suites()
    if not names:
        return [suites / f"test_{n}.py" for n in golden_suites()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [suites / f"test_{n}.py" for n in names if n != UPSTREAM]


@dataclass
class RunOptions:
    suites: list[str] | None = None
    keyword: str | None = None
    timeout_s: float = 1800.0
    jobs: int = 1
    record: bool = False
    obtained_dir: Path | None = None
    fixtures_dir: Path = field(default_factory=paths.fixtures_dir)
    extra_pytest: list[str] = field(default_factory=list)
    import_mode: str = "auto"  # see IMPORT_MODES
    # > 0: the light-import group runs through harness.suiterun.forkserver (torch and megatron-core imported
    # once per megatron-core, installed or pinned tree), with at most this many servers alive
    fork_servers: int = 0
    verbose: bool = False  # the live output names every case (pytest -v instead of -q)
    repo_url: str = ""  # web repository of the MB under test (--repo-url; else found, see harness.records.provenance)
    cases: list[str] | None = None  # run only these case ids (suite::test[param]) of the selected suites


IMPORT_MODES = ("auto", "light", "full")
"""How MB is imported for the golden suites (``harness run --import``).

* ``auto`` (default): cases marked ``import_group("light")`` run in one pytest process with
  light import (``HARNESS_IMPORT_MODE=light``: package ``__init__`` files of ``megatron.bridge``
  are not executed, see :mod:`harness.standins.light`), the other cases (``full`` or unmarked)
  in a second process with the normal import; verdicts are merged into one result whose
  ``import_mode`` reads ``auto (light: N cases, full: M cases)``.
* ``full``: every case in one process with the normal import (the reference behaviour).
* ``light``: only the light-group cases are run (light import); full-group cases are not
  selected and a note says how many were left out. For fast iteration on packing code.
"""

_GROUP_RE = re.compile(r"import_group\(\s*['\"](\w+)['\"]")


def file_groups(path: Path) -> set[str]:
    """Import groups a suite file mentions (unmarked files belong to ``full``)."""
    try:
        found = set(_GROUP_RE.findall(path.read_text(encoding="utf-8")))
    except OSError:
        found = set()
    return found or {"full"}


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def _pytest_cmd(files: list[Path], opts: RunOptions, cases_file: Path, obtained: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, files),
        "-p",
        "harness.suiterun.plugin",
        "-p",
        "harness.standins.light",
        "-p",
        "no:cacheprovider",
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
        "--harness-results",
        str(cases_file),
        "--harness-obtained",
        str(obtained),
        "--harness-fixtures",
        str(opts.fixtures_dir),
    ]
    if opts.record:
        cmd.append("--harness-record")
    if opts.keyword:
        cmd += ["-k", opts.keyword]
    if opts.cases is not None:
        listed = cases_file.parent / "selected-cases.json"
        listed.write_text(json.dumps(sorted(opts.cases)), encoding="utf-8")
        cmd += ["--harness-cases", str(listed)]
    if opts.jobs > 1:
        cmd += ["-n", str(opts.jobs)]
    return cmd + opts.extra_pytest


def _stream(
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


def run_suites(tgt: Target, opts: RunOptions, out_dir: Path, progress: TextIO | None = sys.stderr) -> RunResult:
    """Run the selected suites against ``tgt``; everything lands under ``out_dir``."""
    files = suite_files(opts.suites)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not files:  # only the upstream suite was asked for
        return _run_upstream_only(tgt, opts, out_dir)
    if not opts.record:
        paths.require_fixtures(opts.fixtures_dir)
    mode = opts.import_mode
    if mode not in IMPORT_MODES:
        raise UsageError(f"unknown import mode {mode!r}; known: {', '.join(IMPORT_MODES)}")
    obtained = opts.obtained_dir or out_dir / "obtained"
    standins_log = out_dir / "standins.log"
    standins_log.write_text("")
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.monotonic()
    deadline = t0 + opts.timeout_s
    # (group selected in the child, HARNESS_IMPORT_MODE, files); group None = no selection
    if mode == "full":
        plan: list[tuple[str | None, str, list[Path]]] = [(None, "full", files)]
    else:
        light_files = [f for f in files if "light" in file_groups(f)]
        full_files = [f for f in files if file_groups(f) - {"light"}]
        plan = [("light", "light", light_files)]
        if mode == "auto":
            plan.append(("full", "full", full_files))
    cases: list[CaseResult] = []
    notes: list[str] = []
    per_group: dict[str, int] = {}
    feed = CaseFeed(progress, opts.verbose)
    in_flight: tuple[str | None, list[Path], Path] | None = None  # (group, files, event log) running now
    started_groups: set[int] = set()
    interrupted = False
    with feed:
        try:
            for index, (group, import_env, group_files) in enumerate(plan):
                started_groups.add(index)
                if not group_files:
                    continue
                cases_file = out_dir / (f"cases-{group}.json" if group else "cases.json")
                events_file = cases_file.with_suffix(".events.jsonl")
                in_flight = (group, group_files, events_file)
                for stale in (cases_file, events_file):
                    if stale.exists():
                        stale.unlink()
                remaining = deadline - time.monotonic()
                if remaining < 1.0:  # an earlier group used the whole time limit
                    reason = f"not run: the time limit ({opts.timeout_s:.0f} s) was used up by an earlier import group"
                    cases += [_whole_suite(f, Verdict.UNTESTABLE, reason, group) for f in group_files]
                    notes.append(f"[{group} import] {reason}")
                    continue
                env = tgt.env(standins_log)
                env["HARNESS_IMPORT_MODE"] = import_env
                if group:
                    env["HARNESS_IMPORT_GROUP"] = group
                else:
                    env.pop("HARNESS_IMPORT_GROUP", None)
                cmd = _pytest_cmd(group_files, opts, cases_file, obtained) + ["--harness-events", str(events_file)]
                forked = None
                if opts.fork_servers > 0 and import_env == "light":
                    forked, why_not = _run_forked(
                        tgt, cmd, env, out_dir / f"pytest-{group}.log", remaining, opts.fork_servers
                    )
                    if why_not:
                        notes.append(f"[{group} import] fork server unavailable ({why_not}): ran as a plain subprocess")
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
                        timed_out, tail = _stream(
                            proc, feed.sink, time.monotonic() + remaining, functools.partial(feed.poll, events_file)
                        )
                    except KeyboardInterrupt:
                        kill_group(proc)  # its own session: Ctrl-C reached only us
                        raise
                    rc = proc.returncode
                feed.group_done(events_file)
                outcome = _Outcome(rc, timed_out, tail, opts.timeout_s)
                g_cases, g_notes = _collect(
                    cases_file, events_file, group_files, outcome, group, empty_ok=group is not None, tgt=tgt
                )
                in_flight = None
                feed.group_result(g_cases)
                cases += g_cases
                notes += [f"[{group} import] {n}" if group else n for n in g_notes]
                per_group[import_env] = per_group.get(import_env, 0) + len(g_cases)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (harness.cli turns it into this)
            interrupted = True
            cases += _interrupted_cases(in_flight, [g for i, g in enumerate(plan) if i not in started_groups])
            notes.append(
                "partial: interrupted (Ctrl-C or SIGTERM); the cases that finished are kept, the others were not run"
            )
    if mode == "auto":
        import_mode = f"auto (light: {per_group.get('light', 0)} cases, full: {per_group.get('full', 0)} cases)"
    elif mode == "light":
        left = [f.stem[5:] for f in files if file_groups(f) - {"light"}]
        import_mode = f"light ({per_group.get('light', 0)} cases)"
        if left:
            notes.append(
                f"--import light: full-import cases not run (suites {', '.join(left)}); use --import auto or full"
            )
    else:
        import_mode = "full"
    if not cases and mode != "light":
        notes.append("no case was selected")
    duration = time.monotonic() - t0
    if opts.suites and UPSTREAM in opts.suites and not interrupted:
        up_cases, up_notes = _upstream(tgt, opts, out_dir)
        cases += up_cases
        notes += up_notes
        duration = time.monotonic() - t0
    result = RunResult(
        run_id=out_dir.name,
        target=_target_doc(tgt),
        versions=_target_versions(tgt),
        machine=this_machine(),
        import_mode=import_mode,
        standins=sorted(set(filter(None, standins_log.read_text().splitlines()))),
        started=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=round(duration, 2),
        cases=cases,
        notes=notes,
        provenance=of_run(tgt, opts.repo_url),
    )
    result.partial = interrupted
    result.save(out_dir / "results.json")
    if interrupted:
        raise RunInterrupted(result)
    return result


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM, with the partial result already written to
    ``results.json`` (what finished; the rest not run): the command writes JUnit and the report
    for it, says it is partial, and exits 130. Anything that does not catch it sees the
    KeyboardInterrupt it is."""

    def __init__(self, result: RunResult) -> None:
        super().__init__("interrupted")
        self.result = result


def _interrupted_cases(
    in_flight: tuple[str | None, list[Path], Path] | None, not_started: list[tuple[str | None, str, list[Path]]]
) -> list[CaseResult]:
    """What an interrupted run knows: the finished cases of the suite process it stopped (from its
    event log), and everything else as not run (untestable: nothing was said about MB)."""
    reason = "not run: the run was interrupted"
    out: list[CaseResult] = []
    if in_flight is not None:
        group, files, events = in_flight
        log = read_log(events)
        for case_id, suite in log.collected.items():
            if case_id in log.done:
                records = [CaseResult.from_json(c) for c in log.done[case_id]]
                verdict = worst([r.verdict for r in records])
                out.append(next(r for r in records if r.verdict is verdict))
            else:
                out.append(CaseResult(case_id, suite, Verdict.UNTESTABLE, message=reason))
        seen = {c.suite for c in out}
        out += [_whole_suite(f, Verdict.UNTESTABLE, reason, group) for f in files if f.stem[5:] not in seen]
    for group, _, files in not_started:
        out += [_whole_suite(f, Verdict.UNTESTABLE, reason, group) for f in files]
    return out


def _run_forked(
    tgt: Target, cmd: list[str], env: dict[str, str], log: Path, timeout_s: float, capacity: int
) -> tuple[tuple[int | None, bool, str] | None, str]:
    """The light group through the fork server of the target's megatron-core (the installed one,
    or the pinned Megatron-LM tree; servers never have an MB on their path).

    Returns ((exit code, timed out, output tail), "") or (None, why) when no server could take
    the run: the caller then runs a plain subprocess and says so.
    """
    from harness.suiterun.forkserver import POOL, ForkServerError

    core = Target(core=tgt.core, core_pin=tgt.core_pin)
    server_env = core.env()
    server_env["HARNESS_IMPORT_MODE"] = "light"
    key = str(tgt.core) if tgt.core else "installed megatron-core"
    try:
        with POOL.lease(key, server_env, paths.ROOT, capacity) as server:
            rc, timed_out = server.run(cmd[3:], env, paths.suites_dir().parent, log, timeout_s)
    except ForkServerError as exc:
        return None, str(exc)
    try:
        tail = log.read_text(errors="replace")[-20000:]
    except OSError:
        tail = ""
    return (rc, timed_out, tail), ""


def _upstream(tgt: Target, opts: RunOptions, out_dir: Path) -> tuple[list[CaseResult], list[str]]:
    from harness.upstream import run_upstream

    return run_upstream(tgt, out_dir / "upstream", timeout_s=opts.timeout_s)


def _run_upstream_only(tgt: Target, opts: RunOptions, out_dir: Path) -> RunResult:
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.monotonic()
    cases, notes = _upstream(tgt, opts, out_dir)
    result = RunResult(
        run_id=out_dir.name,
        target=_target_doc(tgt),
        versions=_target_versions(tgt),
        machine=this_machine(),
        import_mode="upstream",
        standins=[],
        started=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=round(time.monotonic() - t0, 2),
        cases=cases,
        notes=notes,
        provenance=of_run(tgt, opts.repo_url),
    )
    result.save(out_dir / "results.json")
    return result


# pytest's exit codes for a session that did not run what it was given: interrupted (a collection
# error stops the whole session), internal error, usage error. Each suite file of the group that
# produced no case then stands as an ERROR, so the run exits 1 instead of reporting the rest.
_NOT_COLLECTED = (2, 3, 4)


@dataclass(frozen=True)
class _Outcome:
    """How a suite process ended."""

    rc: int | None
    timed_out: bool
    tail: str  # the end of its output
    timeout_s: float


def _collect(
    cases_file: Path,
    events_file: Path,
    files: list[Path],
    outcome: _Outcome,
    group: str | None,
    empty_ok: bool = False,
    tgt: Target | None = None,
) -> tuple[list[CaseResult], list[str]]:
    notes: list[str] = []
    if not outcome.timed_out:
        try:
            doc = read_versioned_json(cases_file, "harness-cases", 1)
        except (FileNotFoundError, CorruptFile):
            doc = None
        if doc is not None:
            cases = [CaseResult.from_json(c) for c in doc["cases"]]
            rc = outcome.rc
            if rc not in (0, 1) and not (rc == 5 and not cases):  # 5: nothing selected (e.g. by -k in one group)
                reason = f"pytest exited with code {rc}: {_last_lines(outcome.tail)}"
                notes.append(reason)
                if rc in _NOT_COLLECTED:  # nothing of these files may silently drop out of the run
                    ran = {c.suite for c in cases}
                    why = {Path(e["nodeid"]).name: e["message"] for e in doc.get("collection_errors") or []}
                    cases += [
                        _whole_suite(
                            f,
                            Verdict.ERROR,
                            f"not collected: {why[f.name]}" if f.name in why else f"not collected: {reason}",
                            group,
                        )
                        for f in files
                        if f.stem[5:] not in ran
                    ]
            if not cases and not empty_ok:
                notes.append("no case was selected")
            return cases, notes
    return _salvage(read_log(events_file), files, outcome, group, tgt)


def _salvage(
    log: CaseLog, files: list[Path], outcome: _Outcome, group: str | None, tgt: Target | None = None
) -> tuple[list[CaseResult], list[str]]:
    """Verdicts of a suite process that left no verdict file, from its event log; a fatal signal
    inside MB's code (harness.suiterun.fatal) makes the case that was running a FAIL, bisectable."""
    crash = None
    if not outcome.timed_out:
        roots = tuple(str(r) for r in (tgt or Target()).megatron_roots())
        crash = mb_crash(outcome.tail, roots, (str(paths.PACKAGE), str(paths.suites_dir())))
    if outcome.timed_out:
        stopped = f"the suite process ran past {outcome.timeout_s:.0f} s and was killed"
    else:
        stopped = (
            f"the suite process exited with code {outcome.rc} before reporting verdicts: {_last_lines(outcome.tail)}"
        )
    if not log.collected:
        reason = f"{stopped} (before any case was collected)"
        return [_whole_suite(f, Verdict.ERROR, reason, group) for f in files], [reason]
    running = log.in_flight
    where = f" while {', '.join(running)} ran" if running else ""
    cases: list[CaseResult] = []
    for case_id, suite in log.collected.items():
        if case_id in log.done:  # a setup error and a teardown error for one case: keep the worst
            records = [CaseResult.from_json(c) for c in log.done[case_id]]
            verdict = worst([r.verdict for r in records])
            cases.append(next(r for r in records if r.verdict is verdict))
        elif case_id in running and outcome.timed_out:
            cases.append(
                CaseResult(
                    case_id, suite, Verdict.FAIL, message=f"broken: timeout: this case was running when {stopped}"
                )
            )
        elif case_id in running and crash is not None:
            cases.append(CaseResult(case_id, suite, Verdict.FAIL, message=crash.message(), impacts=["crash"]))
        elif case_id in running:
            cases.append(CaseResult(case_id, suite, Verdict.ERROR, message=f"this case was running when {stopped}"))
        else:
            cases.append(CaseResult(case_id, suite, Verdict.UNTESTABLE, message=f"not run: {stopped}{where}"))
    return cases, [f"{stopped}{where}"]


def _last_lines(text: str, n: int = 6) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-1500:]


def _whole_suite(file: Path, verdict: Verdict, reason: str, group: str | None) -> CaseResult:
    """One verdict for a suite whose cases are unknown; the import group keeps the light and
    full placeholders of one suite file apart."""
    suite = file.stem[5:]
    return CaseResult(
        case_id=f"{suite}::*" + (f"[{group} import]" if group else ""), suite=suite, verdict=verdict, message=reason
    )


def _target_doc(tgt: Target) -> dict[str, object]:
    if tgt.src is None:
        loc = mb_location()
        return {"kind": "installed", "path": str(loc) if loc else None, "commit": None}
    return {"kind": "source", "path": str(tgt.src), "commit": tgt.commit}


def _target_versions(tgt: Target) -> dict[str, str]:
    """Versions as the child sees them (the target's MB may differ from the installed one)."""
    code = "import json; from harness.suiterun.target import versions; print(json.dumps(versions()))"
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], env=tgt.env(), capture_output=True, text=True, timeout=120, cwd=paths.ROOT
        )
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError, OSError):
        return {"megatron-bridge": "unknown"}


def temp_out_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="harness-run-"))
