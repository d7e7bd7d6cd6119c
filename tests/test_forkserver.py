"""The fork server (how bisect runs light-import cases): same verdicts, no state between targets."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from harness import runner
from harness.target import Target, mb_location
from tests import faults

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(mb_location() is None, reason="no megatron.bridge installed (run scripts/setup.sh)"),
]

SUITES = ["packed_seq_params", "packing_algorithms"]


def _copy_mb(dest: Path) -> Path:
    spec = importlib.util.find_spec("megatron.bridge")
    pkg = dest / "src" / "megatron" / "bridge"
    shutil.copytree(list(spec.submodule_search_locations)[0], pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return pkg


def _verdicts(tgt: Target, out: Path, fork_server: bool) -> dict[str, str]:
    opts = runner.RunOptions(suites=SUITES, import_mode="light", fork_server=fork_server)
    return {c.case_id: c.verdict.value for c in runner.run_suites(tgt, opts, out, progress=None).cases}


def test_forked_runs_match_subprocess_runs_and_do_not_leak_between_targets(tmp_path: Path) -> None:
    clean = _copy_mb(tmp_path / "clean")
    faulty = _copy_mb(tmp_path / "faulty")
    faults.CU_SEQLENS_OFF_BY_ONE.apply_to(faulty)
    clean_t = Target(src=clean.parent.parent, commit="clean")
    faulty_t = Target(src=faulty.parent.parent, commit="faulty")

    plain = _verdicts(clean_t, tmp_path / "plain", fork_server=False)
    forked_clean = _verdicts(clean_t, tmp_path / "f1", fork_server=True)
    forked_faulty = _verdicts(faulty_t, tmp_path / "f2", fork_server=True)  # same server, other target
    forked_clean_again = _verdicts(clean_t, tmp_path / "f3", fork_server=True)

    assert plain and set(plain.values()) <= {"pass", "known-fail"} and "pass" in plain.values()
    assert forked_clean == plain, "a forked run gives the verdicts of a fresh process"
    caught = {c for c, v in forked_faulty.items() if v == "fail"}
    assert caught and all(faults.CU_SEQLENS_OFF_BY_ONE.caught_by(c) for c in caught), forked_faulty
    assert forked_clean_again == plain, "nothing of the faulty target's import survives into the next run"
