"""The fault-injection matrix: every fault the harness is promised to survive, and how.

A row names the fault, the outcome it must not fall below (:class:`tests.faults.lab.Outcome`)
and either the function that injects it for real (run by tests/faults/test_matrix.py and
bench/bench_faults.py) or the existing test that already does (``covered_by``: that test is
the CI row; the bench runs it with pytest to time it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.faults import rows_child as child
from tests.faults import rows_driver as drv
from tests.faults import rows_files as files
from tests.faults import rows_repo as repo
from tests.faults.lab import Lab, Observed, Outcome


@dataclass(frozen=True)
class Row:
    key: str
    fault: str
    expected: Outcome
    run: Callable[[Lab], Observed] | None = None
    covered_by: str = ""  # tests/<file>.py::<test> when an existing test is the row
    untestable: str = ""  # why the fault cannot be injected (the row is listed, never passed)


U, R, C, D = Outcome.UNAFFECTED, Outcome.RESUMED, Outcome.CLEAN_ERROR, Outcome.DEGRADED

ROWS: list[Row] = [
    # ---- signals at each phase of a bisect
    Row(
        "kill9-materialise",
        "SIGKILL of the driver while git archive materialises a commit",
        R,
        drv.sigkill_while_materialising,
    ),
    Row("kill9-evaluation", "SIGKILL of the driver during an evaluation", R, drv.sigkill_during_evaluation),
    Row("term-evaluation", "SIGTERM of the driver during an evaluation", R, drv.sigterm_during_evaluation),
    Row(
        "kill9-cache-write",
        "SIGKILL during a verdict cache write (SQLite transaction)",
        R,
        covered_by="tests/test_bisect_cache.py::test_kill_9_leaves_only_complete_evaluations",
    ),
    Row(
        "kill9-report",
        "SIGKILL once the last verdict is stored (bisect.json / report writes)",
        R,
        drv.sigkill_after_last_evaluation,
    ),
    Row(
        "kill9-harness-run",
        "SIGKILL of the harness while a suite process runs (no orphan left)",
        U,
        covered_by="tests/test_procs.py::test_child_dies_when_the_harness_is_killed",
    ),
    Row(
        "kill9-cluster-job",
        "SIGKILL of a cluster job (retried, then skipped as infrastructure)",
        D,
        covered_by="tests/test_slurm_executor.py::test_sigkilled_job_is_retried_then_skipped_as_infrastructure",
    ),
    Row(
        "kill9-cluster-driver",
        "SIGKILL of the driver with cluster jobs in flight (rerun reattaches)",
        R,
        covered_by="tests/test_slurm_executor.py::test_killed_driver_leaves_a_job_list_and_a_rerun_reattaches",
    ),
    Row(
        "kill9-real-mb",
        "SIGKILL of a real-MB bisect mid-run",
        R,
        covered_by="tests/test_bisect_command.py::test_kill9_then_resume_loses_and_repeats_nothing",
    ),
    # ---- full disk
    Row(
        "full-disk-cache", "full disk (RLIMIT_FSIZE) during a verdict cache write", C, drv.full_disk_during_cache_write
    ),
    Row("full-disk-report", "full disk (RLIMIT_FSIZE) during the report write", C, drv.full_disk_during_report_write),
    # ---- the verdict cache
    Row("cache-garbage", "verdict cache overwritten with garbage", C, drv.corrupt_cache),
    Row("cache-truncated", "verdict cache truncated to half", C, drv.truncated_cache),
    Row("cache-old-schema", "verdict cache written by an older schema version", C, drv.old_schema_cache),
    Row(
        "cache-newer-schema",
        "verdict cache written by a newer harness",
        C,
        covered_by="tests/test_bisect_cache.py::test_newer_schema_is_refused",
    ),
    Row("cache-read-only", "read-only cache directory", C, drv.read_only_cache_dir),
    Row("cache-file-read-only", "read-only verdict cache file in a writable directory", C, drv.read_only_cache_file),
    Row("cache-shared", "two bisects sharing one cache directory at once", U, drv.two_bisects_share_a_cache),
    # ---- the evaluated MB misbehaves
    Row("mb-hangs", "an MB commit whose import hangs", D, child.hanging_import),
    Row("mb-memory", "an MB commit that exhausts memory (RLIMIT_AS on the child)", D, child.memory_exhausted),
    Row("mb-stdout", "an MB commit that writes to stdout without end", D, child.endless_stdout),
    Row("mb-orphan", "an MB commit that spawns a child that outlives it", U, child.orphan_child),
    Row(
        "mb-raises",
        "an MB commit whose import raises (syntax error) or that raises through torch",
        D,
        covered_by="tests/test_bisect_command.py::test_mb_raising_is_fail_through_run_and_bisect_wherever_the_cache_lives",
    ),
    # ---- files read back
    Row("golden-json", "a truncated golden JSON (fixtures verify)", D, files.truncated_golden_json),
    Row(
        "golden-json-run",
        "a corrupt golden JSON during harness run",
        D,
        covered_by="tests/test_run_cli.py::test_corrupt_golden_fails_the_case_not_the_harness",
    ),
    Row("golden-npz", "a truncated .npz golden sidecar", D, files.truncated_npz_sidecar),
    Row(
        "results-json",
        "a cut results.json of an earlier run (diffs of cached verdicts)",
        D,
        files.corrupt_earlier_results,
    ),
    Row(
        "kill9-nightly-writes",
        "SIGKILL of a nightly during its history / trend / report writes",
        R,
        files.sigkill_during_nightly_writes,
    ),
    Row("history-parquet", "a corrupt history parquet (harness nightly)", C, files.corrupt_history_store),
    # ---- repositories as users have them
    Row("repo-no-checkout", "a --no-checkout clone", U, repo.no_checkout_clone),
    Row("repo-worktree", "a worktree-linked checkout (.git is a file)", U, repo.worktree_checkout),
    Row("repo-shallow", "a shallow clone whose history does not reach GOOD", C, repo.shallow_clone),
    Row("repo-missing-blobs", "missing blobs outside src/ (like the MB mirror)", U, repo.missing_blobs_outside_src),
    Row("repo-fetch", "git fetch writing the repository during the bisect", U, repo.fetch_during_bisect),
    Row(
        "mlm-pin-absent",
        "a Megatron-LM pin absent from the given repository",
        D,
        covered_by="tests/test_pins.py::test_pin_missing_from_megatron_lm_repo",
    ),
    # ---- configuration and directories
    Row("config-keys", "an unknown key in [tool.harness] (a misspelt table)", C, repo.unknown_config_keys),
    Row("fixtures-missing", "a --fixtures root that does not exist", C, repo.missing_fixtures_root),
    Row("suites-missing", "a --suites-dir root that does not exist", C, repo.missing_suites_root),
    Row("run-out-uncreatable", "harness run --out that cannot be created", C, repo.uncreatable_run_out),
    Row("out-uncreatable", "--out under a file (cannot be created)", C, drv.out_dir_cannot_be_created),
    Row("cache-uncreatable", "--cache-dir under a file (cannot be created)", C, drv.cache_dir_cannot_be_created),
]
