"""The SLURM executor through submitit's LocalExecutor: real jobs, as local processes.

Each job is a separate Python process that unpickles the evaluator (``tests.scripted_eval``)
and writes its result file, exactly as on a cluster; only the scheduler is a local
controller process instead of slurmctld. The histories are the generated git repositories
of tests/test_bisect_command.py. What is checked: the same culprits as the thread pool; a
job killed with SIGKILL is retried, then skipped as infrastructure and never cached; a job
made moot by another result is cancelled; Ctrl-C cancels every job in flight; a driver
killed with SIGKILL leaves a job list a rerun reattaches to; a job whose Python raises, or
that cannot see the cache directory, is one clear error. The real-SLURM tests are in
tests/test_slurm_real.py.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.bisect.document import BisectDoc
from harness.bisect.driver import BisectOptions, BisectRun, run_bisection
from harness.errors import CorruptFile
from harness.executors import joblist as jl
from harness.executors import jobstate, sharedcheck
from harness.executors.jobcalls import RemoteEvaluator
from harness.executors.local import Executor, LocalExecutor
from harness.executors.options import JobFailed, SharedFilesystemError, SlurmOptions
from harness.executors.slurm import SlurmExecutor
from harness.records.atomicio import read_versioned_json
from harness.report import render_bisect_report
from harness.report.terminal import bisect_summary_lines
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import workspace_dir_for
from tests.scripted_eval import ScriptedEvaluator
from tests.test_bisect_command import _fake_history, cache_rows, culprits

ROOT = Path(__file__).resolve().parent.parent


def scripted(counter: Path, repo: Path, cache: Path, **kw: Any) -> ScriptedEvaluator:
    return ScriptedEvaluator(repo, workspace_dir_for(cache, open_repo(repo)), counter, **kw)


def local_jobs(cache: Path, slots: int = 2, progress: Any = None, **kw: Any) -> SlurmExecutor:
    return SlurmExecutor(cache, slots, SlurmOptions(cluster="local", time_min=10, **kw), progress=progress)


def bisect(repo: Path, shas: list[str], cache: Path, evaluator: Any, executor: Executor, **kw: Any) -> BisectRun:
    opts = BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=cache, jobs=executor.slots, **kw)
    return run_bisection(opts, evaluator=evaluator, executor=executor, progress=None)


def outcomes(doc: BisectDoc) -> dict[str, tuple[str, str | None, list[str]]]:
    return {c.case_id: (c.status.value, c.culprit.sha if c.culprit else None, c.candidates) for c in doc.cases}


def journals(cache: Path) -> list[Path]:
    return sorted((cache / "jobs").glob(f"*/{jl.LIST_NAME}"))


def wait_for(what: str, check: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def proc_start(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat); None when it is gone or a zombie.

    Waiting on a bare PID is wrong on a busy machine: the PID counter wraps (32768 here) and the
    kernel may give a finished job's PID to another process within the wait. A PID with another
    start time is another process: the job has ended (and must never be killed in its place).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return None if fields[:1] == ["Z"] else fields[19]


def same_alive(pid: int, start: str | None) -> bool:
    return start is not None and proc_start(pid) == start


# ------------------------------------------------------------------------ same answers as the pool

HISTORIES = {
    "two faults beside skips": (24, {"faults_at": {"s::a": 9, "s::b": 17}, "broken": {7, 18}}, {}),
    "find-fix": (20, {"faults_at": {"s::b": 3}, "fixed_at": {"s::a": 13}, "broken": {6}}, {"find_fix": True}),
    "skip right before the culprit": (12, {"faults_at": {"s::a": 6}, "broken": {5}}, {}),
}


@pytest.mark.parametrize("name", HISTORIES)
def test_submitit_jobs_name_the_same_culprits_as_the_local_pool(name: str, tmp_path: Path, job_env: None) -> None:
    n, history, opts = HISTORIES[name]
    repo, shas = _fake_history(tmp_path, n, **history)
    with LocalExecutor(2) as pool:
        local = bisect(
            repo, shas, tmp_path / "pool", scripted(tmp_path / "pool.txt", repo, tmp_path / "pool"), pool, **opts
        )
    cache = tmp_path / "jobs"
    ev = scripted(tmp_path / "jobs.txt", repo, cache, require_prepared=True)
    with local_jobs(cache) as ex:
        remote = bisect(repo, shas, cache, ev, ex, **opts)
    assert outcomes(remote.doc) == outcomes(local.doc) and remote.exit_code == local.exit_code
    assert any(c.status.value in ("found", "ambiguous") for c in remote.doc.cases)
    assert len(cache_rows(cache)) == remote.doc.new_evaluations == ex.stats["submitted"] - ex.stats["cancelled"]
    assert len(remote.doc.cancelled) == ex.stats["cancelled"]
    assert {sha for sha, _ in cache_rows(cache)} <= set(ev.runs()), "verdicts come from the jobs"
    assert set(remote.doc.cluster_jobs) == set(remote.doc.probes), "every evaluation names its job"
    for jobs in remote.doc.cluster_jobs.values():
        (job,) = jobs
        assert job.cluster == "local" and job.state == "COMPLETED" and job.attempt == 1
        assert Path(job.stdout).is_file() and Path(job.stderr).is_file()
    again = BisectDoc.from_json(json.loads(json.dumps(remote.doc.to_json())))
    assert again.cluster_jobs == remote.doc.cluster_jobs and again.cancelled == remote.doc.cancelled
    assert journals(cache) == [], "a clean run leaves no job list behind"


# ------------------------------------------------------------------------ cluster faults


def test_sigkilled_job_is_retried_then_skipped_as_infrastructure(tmp_path: Path, job_env: None) -> None:
    """The first bad commit is 9. Commit 8's job dies by SIGKILL every time: retried once, then
    skipped for this run, never cached and never blamed, so the culprit is narrowed to {8, 9}.
    Commit 9's job dies only once: its retry's verdict counts. Both stay needed until recorded,
    so no retry is cancelled as moot."""
    repo, shas = _fake_history(tmp_path, 17, {"s::a": 9})
    cache = tmp_path / "cache"
    ev = scripted(tmp_path / "runs.txt", repo, cache, kill=(shas[8],), kill_once=(shas[9],))
    terminal = io.StringIO()
    with local_jobs(cache, progress=terminal, job_retries=1) as ex:
        run = bisect(repo, shas, cache, ev, ex)
    assert outcomes(run.doc) == {"s::a": ("ambiguous", None, [shas[8], shas[9]])}
    assert ev.runs().count(shas[8]) == 2 and ev.runs().count(shas[9]) == 2, terminal.getvalue()
    assert list(run.doc.infrastructure) == [shas[8]]
    (note,) = run.doc.infrastructure[shas[8]]
    assert note.startswith("infrastructure: ") and note.count("left no result") == 2
    cached = {sha for sha, _ in cache_rows(cache)}
    assert shas[8] not in cached and shas[9] in cached
    assert [(j.attempt, j.state == "COMPLETED") for j in run.doc.cluster_jobs[shas[8]]] == [(1, False), (2, False)]
    assert [(j.attempt, j.state) for j in run.doc.cluster_jobs[shas[9]]][-1] == (2, "COMPLETED")
    assert ex.stats["retried"] == 2 and ex.stats["infrastructure"] == 1
    assert "resubmitting" in terminal.getvalue()
    assert "1 skipped for infrastructure" in bisect_summary_lines(run.doc)[0]
    page = render_bisect_report(run.doc, tmp_path / "report.html").read_text()
    assert "Skipped for infrastructure" in page and shas[8][:12] in page
    for job in run.doc.cluster_jobs[shas[8]]:
        assert f'data-job-id="{job.job_id}"' in page and f'href="{Path(job.stderr).as_uri()}"' in page


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_job_made_moot_by_another_result_is_cancelled(tmp_path: Path, job_env: None, sigint: str) -> None:
    """Commits 8 and 4 run together; commit 8 takes minutes, commit 4 fails at once, so the
    first bad commit is below 4 and commit 8's job is useless: it must be cancelled, not awaited.
    Also from a driver that ignores SIGINT (started with ``cmd &`` by a script): the local
    cluster cancels with SIGINT, which its job controllers must not inherit ignored."""
    repo, shas = _fake_history(tmp_path, 17, {"s::a": 2})
    cache = tmp_path / "cache"
    ev = scripted(tmp_path / "runs.txt", repo, cache, slow=((shas[8], 600.0),))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if sigint == "ignored" else None
    try:
        with local_jobs(cache) as ex:
            run = bisect(repo, shas, cache, ev, ex)
            run_dir = ex.run_dir
        assert sigint == "default" or signal.getsignal(signal.SIGINT) is signal.SIG_IGN, "the driver's choice stays"
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    orphans = [d for d in run_dir.iterdir() if d.name.isdigit() and not any(d.glob("*_result.pkl"))]
    starts = {d: proc_start(int(d.name)) for d in orphans}
    try:
        assert culprits(run.doc) == {"s::a": shas[2]}
        assert shas[8] in run.doc.cancelled and ex.stats["cancelled"] == len(run.doc.cancelled)
        assert shas[8] in ev.runs(), "its job had started"
        assert shas[8] not in {sha for sha, _ in cache_rows(cache)}
        assert f"{len(run.doc.cancelled)} cancelled as moot" in bisect_summary_lines(run.doc)[0]
        assert len(orphans) == len(run.doc.cancelled)
        for job_dir in orphans:
            wait_for(
                f"cancelled job {job_dir.name} to end", lambda d=job_dir: not same_alive(int(d.name), starts[d]), 60
            )
    finally:
        for d in orphans:
            if same_alive(int(d.name), starts[d]):
                os.kill(int(d.name), signal.SIGKILL)


def test_job_that_raises_is_one_clear_error_with_its_log_tail(tmp_path: Path, job_env: None) -> None:
    repo, shas = _fake_history(tmp_path, 17, {"s::a": 11})
    cache = tmp_path / "cache"
    ev = scripted(tmp_path / "runs.txt", repo, cache, boom=(shas[8],))
    terminal = io.StringIO()
    with pytest.raises(JobFailed) as err, local_jobs(cache, progress=terminal) as ex:
        bisect(repo, shas, cache, ev, ex)
    line = err.value.one_line()
    assert "\n" not in line and "RuntimeError: scripted failure" in line and "log: " in line
    assert "raised; last lines" in terminal.getvalue() and "    RuntimeError: scripted failure" in terminal.getvalue()
    assert shas[8] not in {sha for sha, _ in cache_rows(cache)}, "an error is never a cached verdict"
    assert journals(cache) == [], "the error cancelled what was in flight"


# ------------------------------------------------------------------------ start-up check


def test_start_up_job_measures_the_cache_namespace_where_jobs_run(
    tmp_path: Path, job_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = _fake_history(tmp_path, 3, {})
    monkeypatch.setenv("HARNESS_TEST_WHERE", "driver")
    ev = scripted(tmp_path / "runs.txt", repo, tmp_path / "cache", env_var="HARNESS_TEST_WHERE")
    with local_jobs(tmp_path / "cache", setup=("export HARNESS_TEST_WHERE=node",)) as ex:
        bound = ex.bind(ev)
    assert ev.cache_namespace() == ("scripted-suite", "scripted-env:driver")
    assert isinstance(bound, RemoteEvaluator) and bound.cache_namespace() == ("scripted-suite", "scripted-env:node")
    assert bound.inner == ev and bound.prepare == ev.prepare


def test_jobs_that_cannot_see_the_cache_dir_are_one_clear_error(
    tmp_path: Path, job_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, shas = _fake_history(tmp_path, 3, {})
    cache = tmp_path / "cache"
    monkeypatch.setattr(sharedcheck, "atomic_write_text", lambda path, text: None)  # the token never reaches the jobs
    with pytest.raises(SharedFilesystemError) as err, local_jobs(cache) as ex:
        bisect(repo, shas, cache, scripted(tmp_path / "runs.txt", repo, cache), ex)
    msg = err.value.one_line()
    assert "cannot read" in msg and "must be on a file system the compute nodes share" in msg
    assert not (tmp_path / "runs.txt").exists(), "no evaluation ran"


# ------------------------------------------------------------------------ interrupted drivers


def drive(spec: dict[str, Any]) -> None:
    """A driver process for the tests below (``python -c`` runs it)."""
    repo, cache = Path(spec["repo"]), Path(spec["cache"])
    ev = scripted(Path(spec["counter"]), repo, cache, slow=tuple((s, t) for s, t in spec["slow"]))
    with local_jobs(cache, progress=sys.stderr) as ex:
        run = bisect(repo, spec["shas"], cache, ev, ex)
    print(json.dumps(culprits(run.doc)))


def start_driver(tmp_path: Path, repo: Path, shas: list[str], slow_s: float) -> tuple[subprocess.Popen, Path, Path]:
    cache, counter = tmp_path / "cache", tmp_path / "runs.txt"
    spec = {
        "repo": str(repo),
        "cache": str(cache),
        "counter": str(counter),
        "shas": shas,
        "slow": [(s, slow_s) for s in shas[1:-1]],
    }
    code = "import json, sys; from tests.test_slurm_executor import drive; drive(json.loads(sys.argv[1]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(spec)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    interior = set(shas[1:-1])
    wait_for(
        "two interior jobs to start",
        lambda: (
            proc.poll() is None and len(interior & set(counter.read_text().split() if counter.exists() else [])) >= 2
        ),
    )
    return proc, cache, counter


def interior_entries(cache: Path, shas: list[str]) -> list[jl.JobEntry]:
    (path,) = journals(cache)
    doc = read_versioned_json(path, jl.KIND, jl.SCHEMA)
    return [e for e in map(jl.JobEntry.from_json, doc["jobs"]) if e.label in {s[:12] for s in shas[1:-1]}]


def test_ctrl_c_cancels_every_job_in_flight(tmp_path: Path, job_env: None) -> None:
    repo, shas = _fake_history(tmp_path, 17, {"s::a": 11})
    proc, cache, _ = start_driver(tmp_path, repo, shas, slow_s=600.0)
    entries = interior_entries(cache, shas)
    starts = {e.job_id: proc_start(int(e.job_id)) for e in entries}
    try:
        assert len(entries) == 2 and all(e.state is jl.EntryState.SUBMITTED for e in entries)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and "KeyboardInterrupt" in err
        assert "cancelled 2 job(s) in flight" in err
        for e in entries:
            wait_for(f"job {e.job_id} to end", lambda e=e: not same_alive(int(e.job_id), starts[e.job_id]), 60)
        assert journals(cache) == [], "nothing is left to reattach to"
    finally:
        for e in entries:
            if same_alive(int(e.job_id), starts[e.job_id]):
                os.kill(int(e.job_id), signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_killed_driver_leaves_a_job_list_and_a_rerun_reattaches(tmp_path: Path, job_env: None) -> None:
    """Killed while commits 4 and 8 run; the culprit lies between them, so both results count."""
    repo, shas = _fake_history(tmp_path, 17, {"s::a": 6})
    proc, cache, counter = start_driver(tmp_path, repo, shas, slow_s=5.0)
    entries = interior_entries(cache, shas)
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: its jobs go on, as on a cluster
    proc.wait()
    assert len(entries) == 2 and all(e.state is jl.EntryState.SUBMITTED and e.key for e in entries)
    (left,) = journals(cache)
    assert read_versioned_json(left, jl.KIND, jl.SCHEMA)["schema_version"] == jl.SCHEMA
    ev = scripted(counter, repo, cache, slow=tuple((s, 5.0) for s in shas[1:-1]))
    terminal = io.StringIO()
    with local_jobs(cache, progress=terminal) as ex:
        run = bisect(repo, shas, cache, ev, ex)
    assert culprits(run.doc) == {"s::a": shas[6]}
    assert ex.stats["reattached"] == 2 and "reattached to job" in terminal.getvalue()
    runs = ev.runs()
    assert len(runs) == len(set(runs)), f"a commit was evaluated twice: {runs}"
    assert {e.job_id for e in entries} <= {j.job_id for js in run.doc.cluster_jobs.values() for j in js}
    assert journals(cache) == []


# ------------------------------------------------------------------------ job list, scheduler states


def test_job_list_is_adopted_only_from_dead_drivers(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    alive = jl.JobList(root / "alive")
    alive.put(jl.JobEntry("k1", "aaa", "101", "f/%j", "slurm", 1, jl.now_utc(), jl.EntryState.SUBMITTED))
    dead = jl.JobList(root / "dead")
    for i, state in enumerate([jl.EntryState.SUBMITTED, jl.EntryState.CANCELLED, jl.EntryState.CONSUMED]):
        dead.put(jl.JobEntry(f"k{i + 2}", "bbb", str(200 + i), "f/%j", "slurm", 1, jl.now_utc(), state))
    dead.put(jl.JobEntry("k2", "bbb", "210", "f/%j", "slurm", 2, jl.now_utc(), jl.EntryState.SUBMITTED))
    dead.close(keep=True)  # as if killed: the list stays, its lock is free
    (root / "broken").mkdir()
    (root / "broken" / jl.LIST_NAME).write_text("{not json")
    mine = jl.JobList(root / "mine")
    adopted, notes = mine.adopt_orphans(root)
    assert {k: e.job_id for k, e in adopted.items()} == {"k2": "210", "k4": "202"}, "newest attempt, no cancelled"
    assert len(notes) == 1 and "broken" in notes[0] and (root / "broken" / jl.LIST_NAME).exists()
    assert not (root / "dead" / jl.LIST_NAME).exists() and (root / "alive" / jl.LIST_NAME).exists()
    assert set(mine.entries) == {"210", "202"}, "adopted entries are in the new list before the old one goes"
    with pytest.raises(CorruptFile):
        jl.JobEntry.from_json({"key": "x"})
    assert jl.job_key(object(), "a") == "" and jl.job_key(ScriptedEvaluator(Path("r"), Path("w"), Path("c")), "a")
    alive.close(keep=False)
    mine.close(keep=False)
    assert not (root / "alive" / jl.LIST_NAME).exists()


def test_scheduler_states_from_squeue_then_sacct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def tool(name: str, body: str) -> None:
        (bin_dir / name).write_text("#!/bin/sh\n" + body + "\n")
        (bin_dir / name).chmod(0o755)

    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    tool("squeue", 'echo "11|RUNNING"; echo "12|NODE_FAIL"')
    tool("sacct", 'echo "13|CANCELLED by 0"')
    assert jobstate.slurm_states(["11", "12", "13", "14"]) == {
        "11": "RUNNING",
        "12": "NODE_FAIL",
        "13": "CANCELLED",
        "14": jobstate.UNKNOWN,
    }
    tool("squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    tool("sacct", 'echo "Slurm accounting storage is disabled" >&2; exit 1')
    assert jobstate.slurm_states(["15"]) == {"15": jobstate.UNKNOWN}, "squeue knows none of them"
    tool("squeue", 'echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1')
    assert jobstate.slurm_states(["11"]) is None, "no answer is not 'lost'"
    assert jobstate.is_active("PENDING") and not jobstate.is_active("PREEMPTED")


def test_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="unknown cluster"):
        SlurmOptions(cluster="kubernetes")
    with pytest.raises(Exception, match="at least 1"):
        SlurmExecutor(tmp_path, 0, SlurmOptions(cluster="local"))
    ex = SlurmExecutor(
        tmp_path,
        1,
        SlurmOptions(cluster="local", container_image="nvcr.io#nvidia/nemo:25.09", container_mounts=("/data:/data",)),
        progress=None,
    )
    try:
        assert ex.srun_args() == [
            "--container-image=nvcr.io#nvidia/nemo:25.09",
            f"--container-mounts=/data:/data,{ex.cache_dir}:{ex.cache_dir}",
        ]
    finally:
        ex.close()


def test_importing_submitit_leaves_the_process_logging_alone() -> None:
    """submitit's import runs logging.config.dictConfig, which closes every handler the process
    has (here: one that closes its stream, as pytest's capture and many libraries' do); the
    executor imports it without that. A fresh interpreter, since this one may have it already."""
    code = (
        "import io, logging, os, sys\n"
        "class Closing(logging.StreamHandler):\n"
        "    def close(self):\n"
        "        self.stream.close(); super().close()\n"
        "stream = io.StringIO(); logging.getLogger('app').addHandler(Closing(stream))\n"
        "from harness.executors.slurmjob import import_submitit as _import_submitit\n"
        "_import_submitit()\n"
        "assert 'SUBMITIT_LOG_LEVEL' not in os.environ, 'jobs must still configure it'\n"
        "sys.exit(1 if stream.closed else 0)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
