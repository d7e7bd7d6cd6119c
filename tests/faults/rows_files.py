"""Rows of the matrix for files the harness reads back: goldens and their ``.npz`` sidecars, the
results file of an earlier run, the nightly history store."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np

from harness.bisect.evaluator import MBEvaluator
from harness.errors import CorruptFile
from harness.golden.serializer import INLINE_MAX_ELEMENTS, encode
from harness.golden.storage import Golden, golden_path, write_golden
from harness.nightly import history
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from tests.faults.lab import HARNESS, Lab, Observed, Outcome
from tests.faults.rows_driver import _clean_error
from tests.faults.rows_repo import _harness_in


def _two_goldens(root: Path) -> list[Path]:
    """One golden with a large tensor (``.npz`` sidecar) and one all inline."""
    paths = []
    for case, n in (("big[0]", INLINE_MAX_ELEMENTS + 1), ("small[0]", 4)):
        side: dict = {}
        node = encode({"t": np.arange(n, dtype=np.int32)}, side)
        path = golden_path(root, "suite", case)
        write_golden(path, Golden("suite", case, node, side))
        paths.append(path)
    return paths


def _verify_names(lab: Lab, name: str, spoil: str) -> Observed:
    """``harness fixtures verify`` on a root with one spoilt file: it names that file, counts the
    other as ok, exits 1 (a finding, not a crash)."""
    where = lab.fresh(name)
    big, _small = _two_goldens(where / "fixtures")
    target = big.with_suffix(".npz") if spoil == "npz" else big
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    proc = _harness_in(where, "fixtures", "verify", "--fixtures", str(where / "fixtures"))
    ok = proc.rc == 1 and "Traceback" not in proc.err and target.name in proc.out and "1 golden file(s) ok" in proc.out
    if not ok:
        return Observed(Outcome.LOST, proc.wall_s, f"rc={proc.rc}: {proc.out[-300:]} {proc.err[-300:]}")
    line = next(x for x in proc.out.splitlines() if target.name in x)
    return Observed(Outcome.DEGRADED, 0.0, line[:160])


def truncated_npz_sidecar(lab: Lab) -> Observed:
    return _verify_names(lab, "golden-npz", "npz")


def truncated_golden_json(lab: Lab) -> Observed:
    return _verify_names(lab, "golden-json", "json")


def corrupt_earlier_results(lab: Lab) -> Observed:
    """The newest kept run of a commit has a cut results.json: the golden diffs shown for a cached
    verdict come from the older intact run instead of failing the bisect report."""
    where = lab.fresh("results-json")
    sha = "a" * 40
    runs = where / "runs"
    case = CaseResult(case_id="s::a", suite="s", verdict=Verdict.FAIL, message="first differs at 3", diff="d")
    older = runs / sha / "20260101-000000-aaaaaa" / "results.json"
    older.parent.mkdir(parents=True)
    RunResult(
        run_id="older", target={}, versions={}, machine=Machine.from_json(None), import_mode="full", cases=[case]
    ).save(older)
    newer = runs / sha / "20260102-000000-bbbbbb" / "results.json"
    newer.parent.mkdir(parents=True)
    shutil.copy(older, newer)
    newer.write_bytes(newer.read_bytes()[:40])
    details = MBEvaluator(where, where / "ws", runs).details(sha)
    kept = details.get("s::a")
    if kept is None or kept.diff != "d":
        return Observed(Outcome.LOST, 0.0, f"the intact older run was not used: {details}")
    return Observed(Outcome.DEGRADED, 0.0, "diffs from the older intact run")


def corrupt_history_store(lab: Lab) -> Observed:
    """``harness nightly`` with a cut history parquet: refused in one line before any suite runs,
    the store left as it was."""
    where = lab.fresh("history")
    store = where / "history.parquet"
    store.write_bytes(b"PAR1" + b"\x00" * 64)
    before = store.read_bytes()
    args = ["nightly", "--history", str(store), "--out", str(where / "out"), "--suite", "cp_constraints", "-q"]
    got = _clean_error(_harness_in(where, *args), "history.parquet")
    if got.outcome is Outcome.CLEAN_ERROR and store.read_bytes() != before:
        return Observed(Outcome.LOST, 0.0, "the refused store was modified")
    return got


def sigkill_during_nightly_writes(lab: Lab) -> Observed:
    """A second nightly is killed once its suites are done (results.json exists) while it writes
    the history store, trend and report: the store still loads with the first night (or both),
    and a rerun adds the night."""
    where = lab.fresh("nightly-kill")
    store = where / "history.parquet"
    args = ["nightly", "--history", str(store), "--suite", "packing_algorithms", "-q"]
    first = _harness_in(where, *args, "--out", str(where / "n1"))
    if first.rc not in (0, 1) or not store.exists():
        return Observed(Outcome.LOST, 0.0, f"first night failed: rc={first.rc} {first.err[-300:]}")
    proc = subprocess.Popen(
        [*HARNESS, *args, "--out", str(where / "n2")],
        cwd=where,
        env=lab.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline and not list(where.glob("n2/runs/*/results.json")):
        time.sleep(0.01)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    try:
        nights = history.load(store)["run_id"].nunique()
    except CorruptFile as exc:
        return Observed(Outcome.LOST, 0.0, f"the history store was cut: {exc}")
    again = _harness_in(where, *args, "--out", str(where / "n3"))
    after = history.load(store)["run_id"].nunique()
    if again.rc not in (0, 1) or after != nights + 1:
        return Observed(Outcome.LOST, again.wall_s, f"rerun rc={again.rc}, nights {nights} -> {after}")
    return Observed(
        Outcome.RESUMED, again.wall_s, f"store intact with {nights} night(s) after the kill, {after} after rerun"
    )
