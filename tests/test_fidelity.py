"""Every red is a training defect and every defect can turn red (issue 22), on the installed MB.

Each fault is a catalogue entry (harness/mutations/catalogue.json) applied to a temporary copy
of the installed Megatron-Bridge; only the cases that can see it run. Before this issue each of
these stayed green (any exception counted as a rule's rejection, the suite chose the in-batch
multiple, the fast path was not checked). The baseline (the unmodified copy) shows the other
direction: the harmless causal-tail count of 0.6.2's logical boundaries is no longer a red, and
0.6.2 with every known bug's fix mutant applied runs with no fail and no known fail at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.commands import mutate
from harness.mutations import installed_package_dir, load_catalogue
from harness.records.results import RunResult
from harness.records.verdict import Verdict

pytestmark = pytest.mark.slow

FAULTS = {f.id: f for f in load_catalogue()}


def _pkg() -> Path:
    try:
        return installed_package_dir()
    except RuntimeError:
        pytest.skip("megatron.bridge is not installed here")


def _run(fault_id: str | None, tmp_path: Path, suites: list[str], keyword: str | None = None, **kw) -> RunResult:
    fault = FAULTS[fault_id] if fault_id else None
    result = mutate.run_copy(
        fault, tmp_path / (fault_id or "baseline"), suites, timeout=600, pkg=_pkg(), keyword=keyword, **kw
    )
    assert result is not None, f"{fault_id} does not apply to the installed MB"
    return result


def _case(result: RunResult, case_id: str):
    by_id = {c.case_id: c for c in result.cases}
    assert case_id in by_id, sorted(by_id)
    return by_id[case_id]


@pytest.mark.parametrize(
    "fault_id,suite,keyword,case_id,impact",
    [
        (
            "exclusivity_rule_dropped",
            "config_validation",
            "offline_and_in_batch or in_batch_mbs4",
            "config_validation::test_packing_rule[offline_and_in_batch]",
            "accepts-invalid-config",
        ),
        (
            "cp_divisibility_rule_dropped",
            "config_validation",
            "cp2_seq510 or cp2_seq512",
            "config_validation::test_packing_rule[cp2_seq510]",
            "accepts-invalid-config",
        ),
        (
            "sp_multiple_dropped",
            "in_batch_packing",
            "mult12",
            "in_batch_packing::test_pack_right_padded[chat-5rows-mult12-cp2-tp3-sp]",
            "crash",
        ),
        (
            "padded_variant_without_padding",
            "packed_seq_params",
            "test_params_from_mb_batches and prompt-mult1 and not pad",
            "packed_seq_params::test_params_from_mb_batches[prompt-mult1]",
            "perf-contract",
        ),
        (
            "psp_argmin_host_sync",
            "packed_seq_params",
            "test_offline_sentinel_stripped and argmin",
            "packed_seq_params::test_offline_sentinel_stripped[3seq-2sentinels-argmin]",
            "perf-contract",
        ),
        (
            "loader_ignores_dataset_drop_last",
            "padding_loss_masks",
            "mb_loader and prompt-mult4 and keep-last",
            "padding_loss_masks::test_dataset_drop_last_through_mb_loader[loader-prompt-mult4-dp2-gbs4-keep-last]",
            "drops-trained-token",
        ),
        (
            "loader_keep_last_rule_dropped",
            "direct_sft",
            "keep_last_batch and refused",
            "direct_sft::test_keep_last_batch_needs_sft_padding_rows[keep-last-refused]",
            "accepts-invalid-config",
        ),
        (
            "cuda_graph_static_boundaries_rule_dropped",
            "config_validation",
            "offline_cuda_graphs_without_pad_cu_seqlens",
            "config_validation::test_packing_rule[offline_cuda_graphs_without_pad_cu_seqlens]",
            "accepts-invalid-config",
        ),
        (
            "pp_fixed_width_dropped",
            "direct_sft",
            "padded_rows and pp2",
            "direct_sft::test_padded_rows[chat-pp2-fixed-width]",
            "crash",
        ),
        (
            "sp_multiple_dropped",
            "parallel_layouts",
            "in_batch_packed_rows and tp2",
            "parallel_layouts::test_tp_sp_world_trains_in_batch_packed_rows[in-batch-chat-tp2-sp]",
            "crash",
        ),
        (
            "mimo_collate_images_reversed",
            "mimo_dataset",
            "mb_mimo_loader and keep-last-hf",
            "mimo_dataset::test_drop_last_through_mb_mimo_loader[keep-last-hf]",
            "wrong-logits",
        ),
        (
            "mimo_dp_slice_reversed",
            "mimo_dataset",
            "module_data_parallel and fan-out",
            "mimo_dataset::test_module_data_parallel_keeps_text_and_image_together[fan-out-vision-dp1-language-dp2]",
            "wrong-logits",
        ),
        (
            "mimo_sampler_shards_by_module_dp",
            "mimo_dataset",
            "module_data_parallel and fan-in",
            "mimo_dataset::test_module_data_parallel_keeps_text_and_image_together[fan-in-vision-dp2-language-dp1]",
            "crash",
        ),
    ],
    ids=[
        "exclusivity",
        "cp-divisibility",
        "in-batch-multiple",
        "padded-variant",
        "host-sync",
        "dataset-drop-last",
        "keep-last-rule",
        "cuda-graph-rule",
        "pp-fixed-width",
        "tp-sp-in-batch",
        "mimo-loader-images",
        "mimo-dp-slices",
        "mimo-sampler-sharded-twice",
    ],
)
def test_a_real_break_turns_red_with_its_impact(tmp_path, fault_id, suite, keyword, case_id, impact):
    result = _run(fault_id, tmp_path, [suite], keyword)
    case = _case(result, case_id)
    assert case.verdict is Verdict.FAIL, (case.verdict, case.message)
    assert impact in case.impacts, (case.impacts, case.message)


def test_the_unbroken_copy_is_green_where_those_faults_were_caught(tmp_path):
    """The same cases on the unmodified copy: no fail (so each red above is the fault's)."""
    result = _run(
        None,
        tmp_path,
        [
            "config_validation",
            "in_batch_packing",
            "packed_seq_params",
            "padding_loss_masks",
            "direct_sft",
            "parallel_layouts",
            "mimo_dataset",
        ],
        "offline_and_in_batch or in_batch_mbs4 or cp2_seq51 or mult12 or sentinel"
        " or (test_params_from_mb_batches and prompt-mult1 and not pad)"
        " or (mb_loader and prompt-mult4 and keep-last) or (keep_last_batch and refused)"
        " or offline_cuda_graphs_without_pad_cu_seqlens or (padded_rows and pp2)"
        " or (in_batch_packed_rows and tp2) or (mb_mimo_loader and keep-last-hf)"
        " or module_data_parallel",
    )
    assert result.cases
    bad = [(c.case_id, c.message[:200]) for c in result.cases if c.verdict in (Verdict.FAIL, Verdict.ERROR)]
    assert not bad, bad


def test_every_known_bug_fixed_runs_with_no_fail_and_no_known_fail(tmp_path):
    """Proof by construction that a nightly can turn green: 0.6.2 with the fix mutants of every
    known bug (fix_all), checked with no known-failure entries at all, has nothing red in the
    documented tier. The harmless causal-tail count of 0.6.2 (a chat's label-only end-of-turn in
    cu_seqlens_q) stays in that build and fails nothing."""
    empty = tmp_path / "known_failures.json"
    empty.write_text(json.dumps({"kind": "harness-known-failures", "schema_version": 2, "entries": []}))
    suites = [
        "offline_packed_dataset",
        "padding_loss_masks",
        "packed_seq_params",
        "forward_cpu",
        "in_batch_packing",
        "data_loaders",
        "pretraining_dataset",
    ]
    result = _run("fix_all", tmp_path, suites, extra=["--harness-known-failures", str(empty)])
    documented = [c for c in result.cases if not c.hypothetical]
    assert len(documented) > 50
    red = [
        (c.case_id, c.message[:300])
        for c in documented
        if c.verdict in (Verdict.FAIL, Verdict.KNOWN_FAIL, Verdict.ERROR)
    ]
    assert not red, red
