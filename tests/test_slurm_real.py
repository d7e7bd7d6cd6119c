"""The SLURM executor against a real single-node SLURM (tests/slurm_cluster.py): sbatch, srun,
squeue, scancel, slurmctld and slurmd, on this machine.

A bisect of a generated history runs through sbatch and names the same culprits as the local
thread pool; a job SLURM cancels is retried, then skipped as infrastructure. Where the
daemons cannot start (packages missing, not root) every test here skips with the reason.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.executors.local import JobLog, LocalExecutor
from harness.executors.options import SlurmOptions
from harness.executors.slurm import SlurmExecutor
from tests import slurm_cluster
from tests.test_bisect_command import _fake_history, cache_rows, culprits
from tests.test_slurm_executor import bisect, outcomes, scripted


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    why = slurm_cluster.unavailable()
    if why:
        pytest.skip(f"no single-node SLURM here: {why}")
    try:
        c = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    except RuntimeError as exc:
        pytest.skip(f"the single-node SLURM did not start: {exc}")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def on_cluster(cluster: slurm_cluster.Cluster, job_env: None, monkeypatch: pytest.MonkeyPatch) -> slurm_cluster.Cluster:
    """Clients and jobs find the test cluster through SLURM_CONF."""
    for k, v in cluster.env.items():
        monkeypatch.setenv(k, v)
    return cluster


def sbatch_jobs(cache: Path, terminal: io.StringIO, **kw: object) -> SlurmExecutor:
    opts = SlurmOptions(cluster="slurm", time_min=5, cpus_per_task=1, poll_s=0.5, result_grace_s=3.0, **kw)
    return SlurmExecutor(cache, 2, opts, progress=terminal)


def _job_ids(cluster_jobs: dict[str, list[JobLog]]) -> list[str]:
    return [job.job_id for jobs in cluster_jobs.values() for job in jobs]


def test_bisect_through_sbatch_names_the_local_pool_culprits(on_cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 24, {"s::a": 9, "s::b": 17}, broken={7, 18})
    with LocalExecutor(2) as pool:
        local = bisect(repo, shas, tmp_path / "pool", scripted(tmp_path / "pool.txt", repo, tmp_path / "pool"), pool)
    cache, terminal = tmp_path / "cache", io.StringIO()
    ev = scripted(tmp_path / "jobs.txt", repo, cache, require_prepared=True)
    with sbatch_jobs(cache, terminal) as ex:
        remote = bisect(repo, shas, cache, ev, ex)
    assert outcomes(remote.doc) == outcomes(local.doc)
    assert culprits(remote.doc) == {"s::a": shas[9], "s::b": shas[17]} and remote.exit_code == 0
    assert len(cache_rows(cache)) == remote.doc.new_evaluations == ex.stats["submitted"] - ex.stats["cancelled"]
    known = on_cluster.settled(_job_ids(remote.doc.cluster_jobs))
    for jobs in remote.doc.cluster_jobs.values():
        (job,) = jobs
        assert job.cluster == "slurm" and known.get(job.job_id) == "COMPLETED", (job, known)
        assert Path(job.stdout).is_file()
    assert "jobs run on" in terminal.getvalue()


def test_job_cancelled_by_slurm_is_retried_then_skipped_as_infrastructure(
    on_cluster: slurm_cluster.Cluster, tmp_path: Path
) -> None:
    """Commit 8's job scancels itself every time: SLURM reports CANCELLED, never a verdict. The
    first bad commit is 9, so commit 8 stays needed (never moot) and ends as a candidate."""
    repo, shas = _fake_history(tmp_path, 17, {"s::a": 9})
    cache, terminal = tmp_path / "cache", io.StringIO()
    ev = scripted(tmp_path / "runs.txt", repo, cache, scancel=(shas[8],))
    with sbatch_jobs(cache, terminal, job_retries=1) as ex:
        run = bisect(repo, shas, cache, ev, ex)
    assert outcomes(run.doc) == {"s::a": ("ambiguous", None, [shas[8], shas[9]])}
    assert ev.runs().count(shas[8]) == 2, terminal.getvalue()
    assert [(j.attempt, j.state) for j in run.doc.cluster_jobs[shas[8]]] == [(1, "CANCELLED"), (2, "CANCELLED")]
    assert shas[8] in run.doc.infrastructure and shas[8] not in {sha for sha, _ in cache_rows(cache)}
    assert "resubmitting" in terminal.getvalue() and "CANCELLED AT" in terminal.getvalue(), "the log tail is shown"
