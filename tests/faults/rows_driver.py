"""Rows of the matrix that hit the bisect driver: signals at each phase, a full disk, the verdict
cache (corrupt, old, read-only, shared) and directories that cannot be written.

Every row runs ``harness bisect`` with the scripted MB (tests/faults/scripted_cli.py) on a
12-commit generated history whose only culprit is commit 7, then judges what it sees: a resume
must name that culprit with every cached commit evaluated once; an error must be one line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.faults.lab import ROOT, SCRIPTED, Lab, Observed, Outcome, Proc

RANGE = "main~11..main"


def _setup(lab: Lab, name: str) -> tuple[Path, list[str], Path, Path]:
    where = lab.fresh(name)
    repo, shas = lab.history(where)
    return repo, shas, where / "cache", where / "out"


def _resume(lab: Lab, repo: Path, shas: list[str], cache: Path, out: Path, before: set[str]) -> Observed:
    """Rerun after the fault: RESUMED when it names the culprit, repeats no cached commit and
    leaves every (commit, attempt) once in the cache."""
    counter = out.parent / "rerun-evaluated.txt"
    proc = lab.bisect(repo, RANGE, cache, out, "-q", env={"FAULTS_COUNTER": str(counter)})
    rerun = counter.read_text().split() if counter.exists() else []
    rows = lab.rows(cache)
    if proc.rc != 0 or lab.culprit(out) != shas[7]:
        return Observed(Outcome.LOST, proc.wall_s, f"rerun rc={proc.rc}: {proc.err[-300:]}")
    repeated = sorted(set(rerun) & before)
    if repeated or any(n > 1 for n in Counter(rows).values()) or any(a != 1 for _, a in rows):
        return Observed(Outcome.LOST, proc.wall_s, f"repeated {repeated}, cache rows {rows}")
    return Observed(Outcome.RESUMED, proc.wall_s, f"{len(before)} verdicts kept, {len(rerun)} evaluated on rerun")


def _cached(lab: Lab, cache: Path) -> set[str]:
    return {sha for sha, _ in lab.rows(cache)}


def _killed_while_evaluating(lab: Lab, sig: int, name: str) -> Observed:
    repo, shas, cache, out = _setup(lab, name)
    counter = out.parent / "evaluated.txt"
    counter.touch()

    def third_evaluation_started() -> bool:
        return len(counter.read_text().split()) >= 3

    env = {"FAULTS_COUNTER": str(counter), "FAULTS_EVAL_SLEEP": "0.3"}
    rc = lab.bisect_killed(repo, RANGE, cache, out, sig, third_evaluation_started, env)
    if sig == signal.SIGTERM:  # a CI time limit: the driver stops like Ctrl-C, writing a partial record
        partial = out / "bisect.json"
        if rc != 130 or not partial.is_file() or not json.loads(partial.read_text()).get("partial"):
            return Observed(Outcome.LOST, 0.0, f"SIGTERM: rc={rc}, no partial bisect.json in {out}")
    elif rc != -sig:
        return Observed(Outcome.LOST, 0.0, f"the driver was not killed by the signal (rc={rc})")
    return _resume(lab, repo, shas, cache, out, _cached(lab, cache))


def sigkill_during_evaluation(lab: Lab) -> Observed:
    return _killed_while_evaluating(lab, signal.SIGKILL, "kill9-eval")


def sigterm_during_evaluation(lab: Lab) -> Observed:
    return _killed_while_evaluating(lab, signal.SIGTERM, "term-eval")


def sigkill_while_materialising(lab: Lab) -> Observed:
    """Once two commits are evaluated, ``git archive`` is slowed down by a ``git`` wrapper first on
    PATH; the driver is killed while it runs, leaving a half-extracted temp tree in the workspace
    cache and two verdicts to keep."""
    repo, shas, cache, out = _setup(lab, "kill9-materialise")
    shim = out.parent / "bin"
    shim.mkdir()
    armed, mark = out.parent / "armed", out.parent / "archiving"
    real_git = shutil.which("git")
    (shim / "git").write_text(
        f'#!/bin/sh\nif [ -e {armed} ]; then case " $* " in *" archive "*) touch {mark}; sleep 30;; esac; fi\n'
        f'exec {real_git} "$@"\n'
    )
    (shim / "git").chmod(0o755)

    def archiving_after_two_verdicts() -> bool:
        if not armed.exists() and len(lab.rows(cache)) >= 2:
            armed.touch()
        return mark.exists()

    env = {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    rc = lab.bisect_killed(repo, RANGE, cache, out, signal.SIGKILL, archiving_after_two_verdicts, env)
    if rc != -signal.SIGKILL:
        return Observed(Outcome.LOST, 0.0, f"not killed while materialising (rc={rc})")
    got = _resume(lab, repo, shas, cache, out, _cached(lab, cache))
    leftovers = [p.name for p in cache.glob("workspaces/*/trees/.tmp-*")]
    if got.outcome is Outcome.RESUMED and leftovers:
        return Observed(Outcome.LOST, got.recover_s, f"temp trees left behind: {leftovers}")
    return got


def sigkill_after_last_evaluation(lab: Lab) -> Observed:
    """Killed once the last verdict is stored, while bisect.json and report.html are written
    (atomic): each is whole or absent, and the rerun evaluates nothing."""
    repo, shas, cache, out = _setup(lab, "kill9-report")
    full = lab.bisect(repo, RANGE, out.parent / "probe-cache", out.parent / "probe-out", "-q")
    n = len(lab.rows(out.parent / "probe-cache"))

    def last_stored() -> bool:
        return len(lab.rows(cache)) >= n

    lab.bisect_killed(repo, RANGE, cache, out, signal.SIGKILL, last_stored, {})
    report = out / "report.html"
    if report.exists() and not report.read_text().rstrip().endswith("</html>"):
        return Observed(Outcome.LOST, 0.0, "a cut report.html was left behind")
    if (out / "bisect.json").exists():
        lab.culprit(out)  # whole (atomic), so it parses
    got = _resume(lab, repo, shas, cache, out, _cached(lab, cache))
    return got if full.rc == 0 else Observed(Outcome.LOST, 0.0, f"the reference run failed: {full.err[-300:]}")


def full_disk_during_cache_write(lab: Lab) -> Observed:
    """RLIMIT_FSIZE of 40 KiB: the cache opens (32 KiB WAL index), a later commit of a verdict fails."""
    repo, shas, cache, out = _setup(lab, "fsize-cache")
    proc = lab.bisect(repo, RANGE, cache, out, "-q", fsize=40 * 1024)
    return _error_then_resume(lab, proc, repo, shas, cache, out, "verdict cache")


def full_disk_during_report_write(lab: Lab) -> Observed:
    """Every verdict is cached; the rerun's report write hits RLIMIT_FSIZE (long case messages
    make report.html bigger than the limit, the cache's files stay under it)."""
    repo, shas, cache, out = _setup(lab, "fsize-report")
    big = {"FAULTS_MESSAGE_BYTES": "60000"}
    warm = lab.bisect(repo, RANGE, cache, out.parent / "warm", "-q", env=big)
    if warm.rc != 0:
        return Observed(Outcome.LOST, 0.0, f"warm-up failed: {warm.err[-300:]}")
    proc = lab.bisect(repo, RANGE, cache, out, "-q", fsize=48 * 1024, env=big)
    partial = [p.name for p in out.glob("*") if p.name in ("bisect.json", "report.html")]
    got = _error_then_resume(lab, proc, repo, shas, cache, out, "report")
    if got.outcome is Outcome.CLEAN_ERROR and "report.html" in partial:
        return Observed(Outcome.LOST, got.recover_s, "a cut report.html was left behind")
    return got


def _error_then_resume(
    lab: Lab, proc: Proc, repo: Path, shas: list[str], cache: Path, out: Path, what: str
) -> Observed:
    line = proc.one_line_error()
    if line is None:
        return Observed(Outcome.LOST, 0.0, f"rc={proc.rc}: {proc.err[-400:]}")
    got = _resume(lab, repo, shas, cache, out, _cached(lab, cache))
    if got.outcome is not Outcome.RESUMED:
        return got
    return Observed(Outcome.CLEAN_ERROR, got.recover_s, f"{line} | then {got.detail}")


def _clean_error(proc: Proc, needle: str, evaluated: Path | None = None) -> Observed:
    line = proc.one_line_error()
    if line is None or needle not in line:
        return Observed(Outcome.LOST, 0.0, f"rc={proc.rc}: {proc.err[-400:]}")
    if evaluated is not None and evaluated.exists() and evaluated.read_text().strip():
        return Observed(Outcome.LOST, 0.0, f"evaluated before refusing: {line}")
    return Observed(Outcome.CLEAN_ERROR, 0.0, line)


def _bad_cache(lab: Lab, name: str, spoil: Callable[[Path], None], needle: str) -> Observed:
    repo, shas, cache, out = _setup(lab, name)
    warm = lab.bisect(repo, RANGE, cache, out.parent / "warm", "-q")
    if warm.rc != 0:
        return Observed(Outcome.LOST, 0.0, f"warm-up failed: {warm.err[-300:]}")
    db = cache / "verdicts.sqlite"
    spoil(db)
    before = db.read_bytes()
    got = _clean_error(lab.bisect(repo, RANGE, cache, out, "-q"), needle)
    if got.outcome is Outcome.CLEAN_ERROR and db.read_bytes() != before:
        return Observed(Outcome.LOST, 0.0, "the refused cache file was modified")
    if got.outcome is Outcome.CLEAN_ERROR:  # the advice works: --no-cache finishes
        again = lab.bisect(repo, RANGE, cache, out, "-q", "--no-cache")
        if again.rc != 0 or lab.culprit(out) != shas[7]:
            return Observed(Outcome.LOST, again.wall_s, f"--no-cache did not recover: {again.err[-300:]}")
        got.recover_s = again.wall_s
    return got


def _garbage(db: Path) -> None:
    for extra in db.parent.glob(db.name + "-*"):
        extra.unlink()
    db.write_bytes(os.urandom(8192))


def _truncated(db: Path) -> None:
    for extra in db.parent.glob(db.name + "-*"):
        extra.unlink()
    with open(db, "r+b") as fh:
        fh.truncate(db.stat().st_size // 2)


def _old_schema(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("UPDATE schema_version SET version = 0")
    con.commit()
    con.close()


def corrupt_cache(lab: Lab) -> Observed:
    return _bad_cache(lab, "cache-garbage", _garbage, "--no-cache")


def truncated_cache(lab: Lab) -> Observed:
    return _bad_cache(lab, "cache-truncated", _truncated, "--no-cache")


def old_schema_cache(lab: Lab) -> Observed:
    return _bad_cache(lab, "cache-old", _old_schema, "too old")


def _immutable(path: Path, on: bool) -> None:
    """Read-only for everyone, root included: ``chattr +i`` as root, permissions otherwise."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-R", "+i" if on else "-i", str(path)], check=True, capture_output=True)
    else:
        for p in [path, *path.rglob("*")]:
            p.chmod((p.stat().st_mode & ~0o222) if on else (p.stat().st_mode | 0o200))


def read_only_cache_dir(lab: Lab) -> Observed:
    repo, _shas, cache, out = _setup(lab, "cache-readonly")
    warm = lab.bisect(repo, RANGE, cache, out.parent / "warm", "-q")
    if warm.rc != 0:
        return Observed(Outcome.LOST, 0.0, f"warm-up failed: {warm.err[-300:]}")
    counter = out.parent / "evaluated.txt"
    _immutable(cache, True)
    try:
        proc = lab.bisect(repo, RANGE, cache, out, "-q", env={"FAULTS_COUNTER": str(counter)})
    finally:
        _immutable(cache, False)
    got = _clean_error(proc, "cache-dir", counter)
    if got.outcome is Outcome.CLEAN_ERROR:
        again = lab.bisect(repo, RANGE, cache, out, "-q")
        got.recover_s = again.wall_s
    return got


def read_only_cache_file(lab: Lab) -> Observed:
    """The directory is writable, the SQLite file is not: one line that keeps the file (never
    the advice to delete a healthy cache), and a run once it is writable resumes."""
    repo, shas, cache, out = _setup(lab, "cache-file-readonly")
    warm = lab.bisect(repo, "main~11..main~4", cache, out.parent / "warm", "-q")
    if warm.rc not in (0, 1):
        return Observed(Outcome.LOST, 0.0, f"warm-up failed: {warm.err[-300:]}")
    db = cache / "verdicts.sqlite"
    before = _cached(lab, cache)
    for extra in db.parent.glob(db.name + "-*"):
        extra.unlink()
    _immutable(db, True)
    try:
        proc = lab.bisect(repo, RANGE, cache, out, "-q")
    finally:
        _immutable(db, False)
    line = proc.one_line_error()
    if line is None:
        return Observed(Outcome.LOST, 0.0, f"rc={proc.rc}: {proc.err[-400:]}")
    if "delete" in line:
        return Observed(Outcome.LOST, 0.0, f"advises deleting a healthy cache: {line}")
    got = _resume(lab, repo, shas, cache, out, before)
    return (
        Observed(Outcome.CLEAN_ERROR, got.recover_s, f"{line} | then {got.detail}")
        if got.outcome is Outcome.RESUMED
        else got
    )


def two_bisects_share_a_cache(lab: Lab) -> Observed:
    """Two drivers on one cache dir at once: both finish with the culprit, no verdict lost, and a
    commit both evaluated is two attempts that agree (never a row overwritten or duplicated)."""
    repo, shas, cache, out = _setup(lab, "cache-shared")
    env = {**lab.env(), "FAULTS_EVAL_SLEEP": "0.2"}
    procs = [
        subprocess.Popen(
            [*SCRIPTED, "bisect", RANGE, "--repo", str(repo), "--cache-dir", str(cache), "--out", str(o), "-q"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for o in (out / "a", out / "b")
    ]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
    bad = [err[-300:] for rc, err in results if rc != 0]
    if bad or any(lab.culprit(o) != shas[7] for o in (out / "a", out / "b")):
        return Observed(Outcome.LOST, 0.0, f"a bisect failed: {bad}")
    rows = lab.rows(cache)
    if len(set(rows)) != len(rows):
        return Observed(Outcome.LOST, 0.0, f"duplicate cache rows {rows}")
    got = _resume(lab, repo, shas, cache, out / "c", {s for s, _ in rows})
    if got.outcome is not Outcome.RESUMED:
        return got
    return Observed(Outcome.UNAFFECTED, 0.0, f"{len(rows)} cache rows, {len({s for s, _ in rows})} commits")


def out_dir_cannot_be_created(lab: Lab) -> Observed:
    repo, _, cache, out = _setup(lab, "out-uncreatable")
    blocker = out.parent / "a-file"
    blocker.write_text("not a directory\n")
    counter = out.parent / "evaluated.txt"
    proc = lab.bisect(repo, RANGE, cache, blocker / "out", "-q", env={"FAULTS_COUNTER": str(counter)})
    return _clean_error(proc, "--out", counter)


def cache_dir_cannot_be_created(lab: Lab) -> Observed:
    repo, _, _, out = _setup(lab, "cache-uncreatable")
    blocker = out.parent / "a-file"
    blocker.write_text("not a directory\n")
    counter = out.parent / "evaluated.txt"
    proc = lab.bisect(repo, RANGE, blocker / "cache", out, "-q", env={"FAULTS_COUNTER": str(counter)})
    return _clean_error(proc, "--cache-dir", counter)
