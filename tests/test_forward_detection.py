"""The forward suite's invariants catch faults in MB's step path.

gpt_step, vlm_step, get_packed_seq_params and in-batch packing.

Each test copies the installed Megatron-Bridge to a temporary directory, applies catalogued
faults (harness/mutations/catalogue.json), runs the selected ``forward_cpu`` cases against the
copy with ``harness run --mb-src`` semantics, and requires FAIL verdicts whose message names
the broken invariant (a golden mismatch or a harness error would not count). Faults batched in
one run reach disjoint code paths or break independent invariants, so none can hide another;
where a run leaves cases untouched by its faults, those must still PASS (the control).

Slow (one MB import and a few MB builds per run: 30 to 80 s each): ``pytest -m slow tests/test_forward_detection.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.errors import EnvironmentProblem
from harness.mutations import installed_package_dir, load_catalogue, make_mutant
from harness.records.verdict import Verdict
from harness.suiterun import runner
from harness.target import Target

pytestmark = pytest.mark.slow

FAULTS = {f.id: f for f in load_catalogue()}
OFFLINE = "forward_cpu::test_offline_gpt_step[{}]"
VLM = "forward_cpu::test_in_batch_vlm_step[{}]"


def _run(tmp_path: Path, fault_ids: list[str], cases: list[str]) -> dict[str, tuple[Verdict, str]]:
    try:
        pkg = installed_package_dir()
    except EnvironmentProblem:
        pytest.skip("megatron.bridge is not installed here")
    faults = [FAULTS[i] for i in fault_ids]
    root = make_mutant(faults[0], pkg, parent=tmp_path)
    assert root is not None, f"{faults[0].id} does not apply to the installed MB"
    try:
        for f in faults[1:]:
            assert f.apply(root / "megatron" / "bridge"), f"{f.id} does not apply to the installed MB"
        keyword = " or ".join(c.split("::", 1)[1] for c in cases)
        opts = runner.RunOptions(suites=["forward_cpu"], keyword=keyword, timeout_s=900)
        result = runner.run_suites(Target(src=root), opts, tmp_path / "out", progress=None)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    got = {c.case_id: (c.verdict, c.message) for c in result.cases}
    assert set(got) == set(cases), f"selected {sorted(got)}, wanted {sorted(cases)}"
    return got


def _failed_on(got: dict[str, tuple[Verdict, str]], case: str, *invariants: str) -> None:
    """FAIL from invariants: the summary line counts violations per invariant name."""
    verdict, message = got[case]
    assert verdict is Verdict.FAIL, f"{case}: {verdict.value}: {message[:600]}"
    assert "golden" not in message.split("\n", 1)[0], f"{case}: caught by the golden only: {message[:600]}"
    head = message.split("\n", 1)[0]
    for name in invariants:
        assert name in head, f"{case}: expected a {name} violation: {message[:1200]}"


def test_gpt_step_vlm_step_and_in_batch_faults(tmp_path):
    """gpt_step drops the params (offline path); vlm_step sets total_tokens for every model and
    in-batch alignment padding trains (VLM path): each breaks its own invariant."""
    offline, vlm = OFFLINE.format("clean-prompt-mult4"), VLM.format("chat-cp2-mult4")
    got = _run(
        tmp_path,
        ["gpt_step_packed_seq_params_dropped", "vlm_step_total_tokens_always", "in_batch_pad_loss_one"],
        [offline, vlm],
    )
    _failed_on(got, offline, "packed-seq-params-contract", "logits-equal-unpacked")
    _failed_on(got, vlm, "packed-seq-params-contract", "padding-never-trains")


def test_get_packed_seq_params_swaps_padded_and_unpadded(tmp_path):
    """Only batches with padded boundaries are affected: the mult-1 cases are the control."""
    hit = [OFFLINE.format("clean-prompt-mult4"), VLM.format("chat-cp2-mult4")]
    control = [OFFLINE.format("clean-prompt-mult1"), VLM.format("chat-mult1")]
    got = _run(tmp_path, ["psp_padded_unpadded_swapped"], hit + control)
    for case in hit:
        _failed_on(got, case, "boundaries")
    for case in control:
        assert got[case][0] is Verdict.PASS, f"{case} must pass with a fault it never reaches: {got[case]}"


def test_get_packed_seq_params_empty_without_sentinel(tmp_path):
    cases = [OFFLINE.format("clean-prompt-mult1"), VLM.format("chat-mult1")]
    got = _run(tmp_path, ["psp_empty_without_sentinel"], cases)
    for case in cases:
        _failed_on(got, case, "packed-seq-params-contract")
