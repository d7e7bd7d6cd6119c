"""``--executor slurm`` on the commands: settings from [tool.harness.slurm] and flags, the
merged result of suite jobs, and (slow: real MB) ``harness bisect`` and ``harness run``
through submitit's local jobs giving the answers of a local run.

The slow tests set ``cluster = "local"`` in a ``harness.toml`` of their working directory, so
the very code path of a cluster (job list, pickled calls, result files, polling, the start-up
check) runs with local processes instead of sbatch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import config as harness_config
from harness.bisect.evaluator import EvalOutcome
from harness.cli import build_parser
from harness.commands import _jobargs
from harness.commands.nightly import bisect_env
from harness.errors import UsageError
from harness.executors import config
from harness.executors.local import JobLog
from harness.executors.options import SlurmOptions
from harness.executors.shards import LOST, merge
from harness.executors.slurm import SlurmExecutor
from harness.nightly.autobisect import bisect_command
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.target import Target
from tests.test_bisect_command import GIT_ENV, MBRepo, assert_culprits, load

ROOT = Path(__file__).resolve().parent.parent
HARNESS = [sys.executable, "-m", "harness"]


# --------------------------------------------------------------------------- settings


def test_nearest_config_table_wins_and_flags_override_it(tmp_path: Path) -> None:
    top, mid = tmp_path / "top", tmp_path / "top" / "mid"
    (mid / "deep").mkdir(parents=True)
    (top / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.harness.slurm]\npartition = "top"\ngpus = 2\n')
    opts = config.slurm_options(mid / "deep")
    assert (opts.partition, opts.gpus) == ("top", 2)
    (mid / "pyproject.toml").write_text('[project]\nname = "no table here"\n')
    (mid / "harness.toml").write_text(
        '[slurm]\npartition = "mid"\ncontainer_mounts = ["/data:/data"]\nsbatch_extra = { qos = "low" }\n'
    )
    opts = config.slurm_options(mid / "deep", partition="flag", gpus=None)
    assert (opts.partition, opts.gpus, opts.container_mounts, opts.sbatch_extra) == (
        "flag",
        0,
        ("/data:/data",),
        (("qos", "low"),),
    )
    assert config.slurm_options(tmp_path) == SlurmOptions()
    (mid / "harness.toml").write_text("[slurm]\npartiton = 'typo'\n")
    with pytest.raises(UsageError, match=r"harness.toml: unknown key 'partiton'"):
        config.slurm_options(mid)
    (mid / "harness.toml").write_text("[slurm\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        config.slurm_options(mid)


def test_example_cluster_settings_are_valid(tmp_path: Path) -> None:
    """The example is copied to harness.toml as it is: its [tool.harness.slurm] table is read there."""
    shutil.copy(ROOT / "examples" / "ci" / "harness.slurm.toml", tmp_path / "harness.toml")
    opts = config.slurm_options(tmp_path)
    assert opts.container_image and opts.gpus == 1 and opts.time_min * 60 > 1800
    assert opts.sbatch_extra == (("qos", "normal"),)
    # every command starts with the file applied to its options: [tool.harness] in harness.toml
    # is the harness table, not an unknown command "tool"
    applied = harness_config.apply(build_parser(), harness_config.load(tmp_path))
    assert applied.appended == {}


@pytest.mark.parametrize("text,minutes", [("90", 90), ("1:30", 2), ("1:30:00", 90), ("2-0", 2880), ("0-1:00", 60)])
def test_slurm_time_in_sbatch_formats(text: str, minutes: int) -> None:
    assert config.parse_minutes(text) == minutes


def test_executor_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    parse = build_parser().parse_args
    with pytest.raises(UsageError, match="--slurm-gpus, --job-retries: only with --executor slurm"):
        _jobargs.executor_from_args(
            parse(["bisect", "a..b", "--repo", ".", "--slurm-gpus", "1", "--job-retries", "0"]), 1
        )
    assert _jobargs.executor_from_args(parse(["bisect", "a..b", "--repo", "."]), 1) is None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "harness.toml").write_text('[tool.harness.slurm]\ncluster = "local"\npartition = "file"\n')
    argv = [
        "--executor",
        "slurm",
        "--slurm-partition",
        "gpu",
        "--slurm-gpus",
        "1",
        "--slurm-time",
        "0:20:00",
        "--container-image",
        "nvcr.io#nvidia/nemo:25.09",
        "--job-retries",
        "2",
    ]
    args = parse(["bisect", "a..b", "--repo", ".", "--cache-dir", str(tmp_path / "cache"), "-j", "3", *argv])
    executor = _jobargs.executor_from_args(args, args.jobs, timeout_s=1800)
    assert isinstance(executor, SlurmExecutor)
    try:
        o = executor.options
        assert (executor.slots, o.cluster, o.partition, o.gpus, o.time_min, o.job_retries) == (
            3,
            "local",
            "gpu",
            1,
            20,
            2,
        )
        assert executor.jobs_root == tmp_path / "cache" / "jobs"
    finally:
        executor.close()
    assert "below --timeout" in capsys.readouterr().err, "a 20 min job limit under a 30 min timeout is warned about"
    assert not (tmp_path / "cache" / "jobs").exists() or not any((tmp_path / "cache" / "jobs").iterdir()), (
        "an executor that ran no job leaves nothing behind"
    )
    assert _jobargs.executor_argv(args) == argv
    cmd = bisect_command("g", "b", Path("/r"), Path("/o"), ["s"], bisect_env(args))
    assert cmd[cmd.index("-j") : cmd.index("-j") + 2] == ["-j", "3"]
    at = cmd.index("--executor")
    assert cmd[at : at + len(argv)] == argv, "nightly's bisection runs where the nightly's suites ran"


def test_lost_suite_job_is_an_error_case_never_a_verdict() -> None:
    log = JobLog("41", "slurm", "/j/41_0_log.out", "/j/41_0_log.err", 1, "COMPLETED")
    ran = RunResult(
        "r",
        {"kind": "installed"},
        {"megatron-bridge": "0.6.2"},
        Machine(),
        "auto",
        standins=["te"],
        cases=[CaseResult("a::one", "a", Verdict.PASS), CaseResult("a::two", "a", Verdict.FAIL)],
        notes=["slow"],
    )
    lost = EvalOutcome.of(
        {}, note="infrastructure: job 42 left no result (scheduler state NODE_FAIL)", infrastructure=True
    )
    lost_logs = [
        JobLog("42", "slurm", "/j/42_0_log.out", "/j/42_0_log.err", 1, "NODE_FAIL"),
        JobLog("43", "slurm", "/j/43_0_log.out", "/j/43_0_log.err", 2, "NODE_FAIL"),
    ]
    merged = merge(["a", "b"], [(ran, [log]), (lost, lost_logs)], Target(), "run-1", "2026-01-01T00:00:00Z")
    assert [(c.case_id, c.verdict) for c in merged.cases] == [
        ("a::one", Verdict.PASS),
        ("a::two", Verdict.FAIL),
        (f"b::{LOST}", Verdict.ERROR),
    ]
    msg = merged.cases[-1].message
    assert "NODE_FAIL" in msg and "not a verdict on Megatron-Bridge" in msg and "/j/43_0_log.err" in msg
    assert not merged.ok and merged.versions == ran.versions and merged.standins == ["te"]
    assert "[a] slow" in merged.notes and any("job 41" in n and "/j/41_0_log.out" in n for n in merged.notes)


# --------------------------------------------------------------------------- slow: real MB through jobs


@pytest.fixture
def local_cluster_dir(tmp_path: Path) -> Path:
    """A working directory whose harness.toml sends jobs to submitit's local processes."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "harness.toml").write_text('[tool.harness.slurm]\ncluster = "local"\ntime_min = 60\n')
    return work


def harness(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, *args], cwd=cwd, capture_output=True, text=True, timeout=1500, env={**os.environ, **GIT_ENV}
    )


@pytest.mark.slow
def test_cli_bisect_through_jobs_names_each_injecting_commit(
    mb_repo: MBRepo, local_cluster_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = harness(
        local_cluster_dir,
        "bisect",
        "good..bad",
        "--repo",
        str(mb_repo.path),
        "--suite",
        "packed_seq_params",
        "--suite",
        "in_batch_packing",
        "-j",
        "2",
        "--executor",
        "slurm",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load(out)
    assert_culprits(doc, mb_repo, "cu_seqlens_off_by_one", "alignment_pad_loss_mask_one")
    assert set(doc["cluster_jobs"]) == set(doc["probes"]) and doc["infrastructure"] == {}
    assert all(j["cluster"] == "local" and j["state"] == "COMPLETED" for js in doc["cluster_jobs"].values() for j in js)
    assert "jobs run on" in proc.stderr


@pytest.mark.slow
def test_cli_run_sharded_by_suite_matches_a_local_run(local_cluster_dir: Path, tmp_path: Path) -> None:
    suites = ["--suite", "packed_seq_params", "--suite", "packing_algorithms"]
    local = harness(local_cluster_dir, "run", *suites, "--out", str(tmp_path / "local"), "-q")
    jobs = harness(
        local_cluster_dir,
        "run",
        *suites,
        "--out",
        str(tmp_path / "jobs"),
        "-q",
        "-j",
        "2",
        "--executor",
        "slurm",
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert local.returncode == jobs.returncode == 0, jobs.stdout + jobs.stderr
    verdicts = {}
    for name in ("local", "jobs"):
        doc = json.loads((tmp_path / name / "results.json").read_text())
        verdicts[name] = {c["case_id"]: c["verdict"] for c in doc["cases"]}
    assert verdicts["jobs"] == verdicts["local"] and len(verdicts["jobs"]) > 10
    doc = json.loads((tmp_path / "jobs" / "results.json").read_text())
    assert sum("ran as local job" in n for n in doc["notes"]) == 2, doc["notes"]
    for suite in ("packed_seq_params", "packing_algorithms"):
        assert (tmp_path / "jobs" / "shards" / suite / "results.json").is_file()
    assert (tmp_path / "jobs" / "junit.xml").is_file() and (tmp_path / "jobs" / "report.html").is_file()


@pytest.mark.slow
def test_cli_matrix_one_job_per_ref_matches_a_local_matrix(
    mb_repo: MBRepo, local_cluster_dir: Path, tmp_path: Path
) -> None:
    common = [
        "matrix",
        "--repo",
        str(mb_repo.path),
        "--refs",
        "good,bad",
        "--suite",
        "packed_seq_params",
        "-q",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    local = harness(local_cluster_dir, *common, "--out", str(tmp_path / "local"))
    jobs = harness(local_cluster_dir, *common, "--out", str(tmp_path / "jobs"), "--executor", "slurm", "-j", "2")
    assert local.returncode == jobs.returncode == 0, jobs.stdout + jobs.stderr
    rows = {name: json.loads((tmp_path / name / "matrix.json").read_text())["rows"] for name in ("local", "jobs")}
    assert [(r["ref"], r["commit"], r["suites"]) for r in rows["jobs"]] == [
        (r["ref"], r["commit"], r["suites"]) for r in rows["local"]
    ]
    assert rows["jobs"][1]["suites"]["packed_seq_params"]["fail"] > 0, "the bad end carries a caught fault"
    assert all(any("ran as local job" in n for n in r["notes"]) for r in rows["jobs"])


def test_a_result_pickled_before_the_records_travelled_whole_still_loads() -> None:
    """A cluster job started by the harness before an upgrade left an EvalOutcome of three dicts
    (verdicts, messages, details); the driver of the new one reads its verdicts as bare records."""
    import pickle

    from harness.records.verdict import Verdict

    old_state = {
        "verdicts": {"s::a": Verdict.FAIL, "s::b": Verdict.PASS},
        "messages": {"s::a": "first differs at 3"},
        "details": {"s::a": {"diff": "d"}},
        "duration_s": 2.0,
        "note": "",
        "infrastructure": False,
        "jobs": [],
        "core_pin": "",
    }

    class OldResult:
        """Pickles as the old harness's EvalOutcome did: the class, then its instance dict."""

        def __reduce_ex__(self, protocol: object) -> tuple[object, ...]:
            return object.__new__, (EvalOutcome,), dict(old_state)

    loaded = pickle.loads(pickle.dumps(OldResult()))
    assert isinstance(loaded, EvalOutcome)
    assert loaded.verdicts == {"s::a": Verdict.FAIL, "s::b": Verdict.PASS}
    assert loaded.messages == {"s::a": "first differs at 3", "s::b": ""}
    assert loaded.duration_s == 2.0 and not hasattr(loaded, "details")
    again = pickle.loads(pickle.dumps(loaded))  # a new result round-trips as it is
    assert again.cases == loaded.cases
