"""Runs the suites against a target, one suite process per import group, into one RunResult.

The pieces: what to run (:mod:`.plan`), starting and watching each child (:mod:`.launch`),
reading its verdicts back however it ended (:mod:`.salvage`), the files and names the two
processes share (:mod:`.contract`). Here: the loop over the groups, the shared time limit, an
interruption (Ctrl-C, SIGTERM) that keeps what finished, and the one :func:`build_result`
every command uses to make a :class:`~harness.records.results.RunResult`.
"""

from __future__ import annotations

import datetime as _dt
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TextIO

from harness import contract, paths
from harness.paths import mb_location
from harness.progress import CaseFeed, Progress
from harness.records import casetimes
from harness.records.machine import Machine, this_machine
from harness.records.provenance import Provenance
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.suiterun.launch import run_child
from harness.suiterun.origin import of_run
from harness.suiterun.plan import (
    IMPORT_MODES,
    UPSTREAM,
    Group,
    RunOptions,
    available_suites,
    file_groups,
    golden_suites,
    plan_groups,
    suite_files,
)
from harness.suiterun.salvage import collect, interrupted_cases, whole_suite
from harness.target import Target

__all__ = [
    "IMPORT_MODES",
    "UPSTREAM",
    "RunInterrupted",
    "RunOptions",
    "available_suites",
    "build_result",
    "file_groups",
    "golden_suites",
    "new_run_id",
    "run_suites",
    "suite_files",
    "temp_out_dir",
]


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM, with the partial result already written to
    ``results.json`` (what finished; the rest not run): the command writes JUnit and the report
    for it, says it is partial, and exits 130. Anything that does not catch it sees the
    KeyboardInterrupt it is."""

    def __init__(self, result: RunResult) -> None:
        super().__init__("interrupted")
        self.result = result


def run_suites(
    tgt: Target, opts: RunOptions, out_dir: Path, progress: TextIO | Progress | None = sys.stderr, *, label: str = ""
) -> RunResult:
    """Run the selected suites against ``tgt``; everything lands under ``out_dir``.

    ``progress``: a stream for the run's own progress line, or the progress of a command that runs
    many (a matrix): its line then shows this run's cases (``label`` first) and the case running.
    """
    files = suite_files(opts.suites)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not files:  # only the upstream suite was asked for
        return _run_upstream_only(tgt, opts, out_dir)
    if not opts.record:
        paths.require_fixtures(opts.fixtures_dir)
    mode = opts.import_mode
    plan = plan_groups(files, mode, opts.cases)
    obtained = opts.obtained_dir or out_dir / "obtained"
    (out_dir / contract.STANDINS_LOG).write_text("")
    (out_dir / contract.KNOBS_LOG).write_text("")
    (out_dir / contract.VERSIONS_FILE).unlink(missing_ok=True)
    started = _dt.datetime.now(_dt.UTC)
    t0 = time.monotonic()
    deadline = t0 + opts.timeout_s
    cases: list[CaseResult] = []
    notes: list[str] = []
    per_group: dict[str, int] = {}
    feed = CaseFeed(progress, opts.verbose, prefix=f"{label}: " if label else "")
    feed.expect(_expected(plan, opts))
    in_flight: tuple[Group, Path] | None = None  # (group, event log) running now
    started_groups: set[int] = set()
    interrupted = False
    ran: list[tuple[str, casetimes.CaseTime]] = []  # what finished, for the next run's estimate
    with feed:
        try:
            for index, group in enumerate(plan):
                started_groups.add(index)
                feed.group_start(index)
                if not group.files:
                    continue
                label = f"[{group.name} import] " if group.name else ""
                cases_file = contract.cases_file(out_dir, group.name)
                events_file = contract.events_file(cases_file)
                in_flight = (group, events_file)
                for stale in (cases_file, events_file):
                    stale.unlink(missing_ok=True)
                remaining = deadline - time.monotonic()
                if remaining < 1.0:  # an earlier group used the whole time limit
                    reason = f"not run: the time limit ({opts.timeout_s:.0f} s) was used up by an earlier import group"
                    cases += [whole_suite(f, Verdict.UNTESTABLE, reason, group.name) for f in group.files]
                    notes.append(f"{label}{reason}")
                    continue
                outcome, launch_notes = run_child(tgt, opts, group, out_dir, cases_file, obtained, remaining, feed)
                notes += [f"{label}{n}" for n in launch_notes]
                feed.group_done(events_file)
                g_cases, g_notes = collect(
                    cases_file, events_file, group.files, outcome, group.name, empty_ok=group.name is not None, tgt=tgt
                )
                in_flight = None
                feed.group_result(g_cases)
                cases += g_cases
                ran += [(c.case_id, casetimes.CaseTime(c.suite, group.name or "", c.duration_s)) for c in g_cases]
                notes += [f"{label}{n}" for n in g_notes]
                per_group[group.import_mode] = per_group.get(group.import_mode, 0) + len(g_cases)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (the command turns it into this)
            interrupted = True
            cases += interrupted_cases(in_flight, [g for i, g in enumerate(plan) if i not in started_groups])
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
    if opts.suites and UPSTREAM in opts.suites and not interrupted:
        up_cases, up_notes = _upstream(tgt, opts, out_dir)
        cases += up_cases
        notes += up_notes
    result = build_result(
        out_dir,
        tgt,
        cases,
        notes,
        import_mode=import_mode,
        started=started,
        duration_s=time.monotonic() - t0,
        repo_url=opts.repo_url,
    )
    result.partial = interrupted
    result.save(out_dir / "results.json")
    casetimes.remember(opts.case_times, ran)
    if interrupted:
        raise RunInterrupted(result)
    return result


def _expected(plan: list[Group], opts: RunOptions) -> list[dict[str, float]]:
    """Per group of the plan, the cases it ran last time (id -> seconds), for the progress line;
    nothing under ``-k`` (the expression is pytest's to evaluate) or without remembered times."""
    times = casetimes.load(opts.case_times) if not opts.keyword else {}
    wanted = set(opts.cases) if opts.cases else None
    return [
        {
            cid: t.seconds
            for cid, t in times.items()
            if t.group == (group.name or "")
            and t.suite in {f.stem[5:] for f in group.files}
            and (wanted is None or cid in wanted)
        }
        for group in plan
    ]


def build_result(
    out_dir: Path,
    tgt: Target,
    cases: list[CaseResult],
    notes: list[str],
    *,
    import_mode: str,
    started: _dt.datetime | str,
    duration_s: float = 0.0,
    repo_url: str = "",
    versions: dict[str, str] | None = None,
    machine: Machine | None = None,
    standins: list[str] | None = None,
    target: dict[str, object] | None = None,
    provenance: Provenance | None = None,
) -> RunResult:
    """The one way a RunResult is made: what the child wrote in ``out_dir`` (versions, stand-ins)
    unless given (a merge of SLURM shards passes what its jobs recorded)."""
    if versions is None:
        versions = contract.read_versions(out_dir / contract.VERSIONS_FILE)
    if standins is None:
        log = out_dir / contract.STANDINS_LOG
        standins = sorted(set(filter(None, log.read_text().splitlines()))) if log.is_file() else []
    return RunResult(
        run_id=out_dir.name,
        target=target if target is not None else _target_doc(tgt),
        versions=versions,
        machine=machine if machine is not None else this_machine(),
        import_mode=import_mode,
        standins=standins,
        started=started if isinstance(started, str) else started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=round(duration_s, 2),
        cases=cases,
        notes=notes,
        provenance=provenance if provenance is not None else of_run(tgt, repo_url),
    )


def _upstream(tgt: Target, opts: RunOptions, out_dir: Path) -> tuple[list[CaseResult], list[str]]:
    from harness.suiterun.upstream import run_upstream

    return run_upstream(tgt, out_dir / "upstream", timeout_s=opts.timeout_s)


def _run_upstream_only(tgt: Target, opts: RunOptions, out_dir: Path) -> RunResult:
    started = _dt.datetime.now(_dt.UTC)
    t0 = time.monotonic()
    (out_dir / "upstream" / contract.VERSIONS_FILE).unlink(missing_ok=True)
    cases, notes = _upstream(tgt, opts, out_dir)
    result = build_result(
        out_dir,
        tgt,
        cases,
        notes,
        import_mode="upstream",
        started=started,
        duration_s=time.monotonic() - t0,
        repo_url=opts.repo_url,
        standins=[],
        versions=contract.read_versions(out_dir / "upstream" / contract.VERSIONS_FILE),
    )
    result.save(out_dir / "results.json")
    return result


def _target_doc(tgt: Target) -> dict[str, object]:
    if tgt.src is None:
        loc = mb_location()
        return {"kind": "installed", "path": str(loc) if loc else None, "commit": None}
    return {"kind": "source", "path": str(tgt.src), "commit": tgt.commit}


def temp_out_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="harness-run-"))
