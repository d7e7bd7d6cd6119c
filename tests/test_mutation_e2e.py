"""Injected faults make the differential checks FAIL by invariant, not by golden (slow: real MB).

One fault per layer of the packing path, each run against the one suite and the few cases it
needs, on a temporary copy of the installed MB; the baseline (the unmutated copy, same cases)
runs once for the module. The collate case fails on unmutated MB 0.6.2 already (it masks every
EOS by token id): the fault must still show as a *new* violation, so MB's own bugs neither count
as catches nor hide new ones.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.commands import mutate
from harness.mutations import installed_package_dir, load_catalogue

pytestmark = pytest.mark.slow

FAULTS = {f.id: f for f in load_catalogue()}

# fault id -> (suite, -k expression selecting its cases, invariant a new violation must name)
CHECKS = {
    "loss_mask_roll_dropped": (
        "offline_packed_dataset",
        "test_packed_equals_unpacked and completion-mult1 and not full and not eod",
        "loss-mask-equals-unpacked",
    ),
    "pad_id_masked_too": (
        "offline_packed_dataset",
        "test_packed_equals_unpacked and prompt-mult1 and not full and not eod",
        "loss-mask-equals-unpacked [input:pad",
    ),
    "in_batch_position_ids_off_by_one_at_boundary": (
        "in_batch_packing",
        "prompt-2rows-mult1",
        "position-ids-equal-unpacked",
    ),
    "psp_empty_without_sentinel": (
        "packed_seq_params",
        "test_params_from_mb_batches and prompt-mult1 and not pad",
        "boundaries",
    ),
    # context parallelism, run on 2 gloo ranks: TE's partition refuses the logical boundaries MB
    # hands it (a crash on a GPU), and a contiguous split breaks the layout attention assumes
    "cp_partition_logical_boundaries": ("parallel_layouts", "prompt-mult4-cp2", "Megatron raised PartitionRefused"),
    "cp_partition_contiguous_split": ("parallel_layouts", "prompt-mult4-cp2", "cp-rank-holds-its-slice"),
    "pp_middle_stage_no_boundaries": ("parallel_layouts", "prompt-mult1-pp3", "pp-stage-gets-what-it-needs"),
    "sampler_padding_split_per_rank": ("padding_loss_masks", "dp-prompt-mult4-dp2", "every DP rank gets global"),
    "sampler_drop_last_ignored": (
        "padding_loss_masks",
        "test_drop_last and dp-prompt-mult4",
        "complete global batches",
    ),
    "sp_multiple_dropped": ("cp_constraints", "test_in_batch_multiple and 1-2-True", "is not divisible by"),
    "chat_collate_ignores_padding_multiple": (
        "chat_collate",
        "test_padded_rows_keep_the_multiple and cp4",
        "not a multiple",
    ),
    # the "single" and "cyclic" samplers of MB's loader factory, per data-parallel rank
    "single_sampler_slice_ignores_micro_batch": ("data_loaders", "single-drop-last-dp2-mbs2", "trained twice"),
    "random_sampler_buckets_not_offset": ("data_loaders", "cyclic-dp4", "trained twice"),
    "direct_sft_in_batch_multiple_not_forwarded": ("direct_sft", "in_batch and mult8", "alignment"),
    # the collators' sequence policy with packing off (pad_or_truncate_sequence_batch)
    "sequence_padding_ignores_multiple": ("in_batch_packing", "padded_without and multiple-8", "documented"),
    "sequence_truncation_guard_dropped": ("in_batch_packing", "padded_without and truncate-4", "removed every"),
    # MIMO samples (encoder placeholders, text, padding)
    # what MB's gpt_step hands the model of a pretraining sample (reset_attention_mask)
    "gpt_step_ignores_dataset_attention_mask": (
        "pretraining_dataset",
        "test_step_keeps_documents_apart and dataset-mask",
        "no attention mask",
    ),
    # the Energon VLM path (HF task encoder, Qwen-VL's model collate)
    "energon_in_batch_multiple_not_forwarded": (
        "energon_dataset",
        "test_in_batch_packed_rows and mbs2-mult4",
        "alignment",
    ),
    "energon_defer_ignored": ("energon_dataset", "test_deferred_packing", "loader packed already"),
    "hf_task_encoder_pad_to_max_length_dropped": ("energon_dataset", "pad-to-max-seq96", "not seq_length"),
    "qwen_vl_packed_loss_mask_not_shifted": (
        "energon_dataset",
        "test_in_batch_packed_rows and mbs2-mult4",
        "loss-mask-equals-unpacked",
    ),
    "qwen_vl_task_encoder_pad_multiple_dropped": ("energon_dataset", "qwen-vl-mbs3-multiple8", "documented"),
    "qwen_vl_packed_keeps_first_image_only": (
        "energon_dataset",
        "test_in_batch_packed_rows and mbs2-mult4",
        "image embeddings",
    ),
    "mimo_placeholders_one_short": ("mimo_dataset", "seq48-enc8", "placeholders at"),
    "mimo_padding_mask_one_late": ("mimo_dataset", "seq48-enc8", "loss mask"),
    # pretraining samples (megatron-core's GPTDataset through MB's GPTDatasetConfig)
    "gpt_dataset_eod_mask_shifted": ("pretraining_dataset", "seq32-eod-mask-loss", "loss mask"),
    "gpt_dataset_reset_attention_keeps_previous_document": (
        "pretraining_dataset",
        "reset-positions-and-attention",
        "may attend",
    ),
    "gpt_dataset_pad_collision_kept": ("pretraining_dataset", "collides", "every EOD label is masked"),
    # pre-packed files the user names, and the deprecated constructor-style builder
    "named_packed_train_path_ignored": (
        "packed_files",
        "test_packed_files_the_user_names and plain",
        "does not train on the packed file the user named",
    ),
    # pad_cu_seqlens then looks for its metadata under dataset_root, where none was written: MB crashes
    "named_packed_metadata_path_ignored": (
        "packed_files",
        "test_packed_files_the_user_names and pad-cu-seqlens",
        "FileNotFoundError",
    ),
    "named_packed_file_existence_unchecked": (
        "packed_files",
        "test_a_named_packed_file_that_is_missing_is_refused",
        "names no file",
    ),
    # packed Parquet shards named by a glob: rows of later shards lost, or located from a stale row group
    "parquet_shards_beyond_the_first_dropped": (
        "packed_files",
        "test_packed_shards_the_user_names and glob",
        "not each row once",
    ),
    "parquet_row_group_cache_forward_only": (
        "packed_files",
        "test_packed_shards_the_user_names and glob",
        "IndexError",
    ),
    # specs set with the offline flag off: accepted when neither copy of the rule refuses them
    "offline_specs_without_flag_accepted": (
        "config_validation",
        "offline_specs_not_enabled",
        "offline-specs-need-flag does not hold",
    ),
    # Nemotron Omni's own in-batch packing (hypothetical tier: another model's processor stands in)
    "omni_packing_alignment_padding_trains": (
        "in_batch_packing",
        "test_omni_collate_packs_as_its_unpacked_path and omni-cp2",
        "padding-never-trains",
    ),
    # packing preparation then keeps examples longer than the pack, and MB's packing raises on them
    "constructor_seq_length_dropped": (
        "offline_packed_dataset",
        "test_deprecated_constructor_builds_what_the_config_builds",
        "KeyError",
    ),
    # direct HF SFT (DirectHFSFTDatasetConfig -> DirectSFTDataset -> the text collates)
    "direct_sft_defer_ignored": ("direct_sft", "test_deferred and completion-deferred", "the collate packed already"),
    "text_collate_pad_to_max_length_ignored": (
        "direct_sft",
        "test_padded_rows and chat-cp2-pad-to-max",
        "not seq_length",
    ),
    "prompt_truncation_side_swapped": ("direct_sft", "test_truncation and completion-left", "truncation_method='left'"),
    "legacy_truncation_side_swapped": (
        "offline_packed_dataset",
        "test_truncation and prompt-left",
        "truncation_method='left'",
    ),
    "truncation_field_remapped_to_the_prompt": (
        "offline_packed_dataset",
        "test_truncation and answer-field-right",
        "truncation_field names the answer",
    ),
    "packed_eos_mask_only_with_boundaries": (
        "packed_files",
        "test_a_loader_without_boundaries and parquet",
        "with return_cu_seqlen=False differs",
    ),
    # a DP x CP world: a rank read from the wrong group is right by accident in a world of one dimension
    "cp_partition_over_the_data_and_context_group": (
        "parallel_layouts",
        "test_dp_cp_world and prompt-mult4",
        "not divisible by",
    ),
    "loader_dp_rank_from_the_world": ("parallel_layouts", "test_dp_cp_world and prompt-mult4", "data_parallel_rank"),
    "cp_packed_detection_needs_tokens": ("parallel_layouts", "test_cp_pp_world", "in get_batch"),
    # a width harmless at TP 1 (forward_cpu and the dataset suites see only a golden change)
    "packed_collate_width_not_rounded": ("parallel_layouts", "test_tp_sp_world and chat-mult1-tp2", "alignment"),
    "pp_static_shapes_with_in_batch_packing": ("config_validation", "test_pipeline_shapes", "variable_seq_lengths is"),
    "sequence_tensor_not_packed": ("in_batch_packing", "eos_as_pad", "mm_token_type_ids packed to"),
    # knobs at values no other case sets (issue 25): the preparation's packing_algorithm, the prompt-completion
    # collate's max_length, an undefined eod_mask_loss, offline specs at the default pack size
    "first_fit_decreasing_drops_shortest": (
        "offline_packed_dataset",
        "test_packing_algorithm_the_user_chooses and prompt-mult2",
        "items left over",
    ),
    "prompt_completion_collate_ignores_max_length": (
        "direct_sft",
        "test_prompt_completion_max_length and longest-completion-max24",
        "passed max_length",
    ),
    "eod_mask_loss_undefined_accepted": ("pretraining_dataset", "test_an_undefined_eod_mask_loss", "was accepted"),
    "default_pack_size_prepared": (
        "offline_packed_dataset",
        "test_specs_at_the_default_pack_size",
        "must be refused by MB's check naming it",
    ),
}
LAYERS = {
    "loss_mask_roll_dropped": "preparation",
    "pad_id_masked_too": "collate",
    "in_batch_position_ids_off_by_one_at_boundary": "in_batch",
    "psp_empty_without_sentinel": "params",
    "cp_partition_logical_boundaries": "gpt_step",
    "cp_partition_contiguous_split": "gpt_step",
    "pp_middle_stage_no_boundaries": "gpt_step",
    "sampler_padding_split_per_rank": "sampler",
    "sp_multiple_dropped": "config",
    "chat_collate_ignores_padding_multiple": "collate",
    "direct_sft_defer_ignored": "collate",
    "text_collate_pad_to_max_length_ignored": "collate",
    "prompt_truncation_side_swapped": "preparation",
    "legacy_truncation_side_swapped": "preparation",
    "truncation_field_remapped_to_the_prompt": "preparation",
    "packed_eos_mask_only_with_boundaries": "collate",
    "cp_partition_over_the_data_and_context_group": "gpt_step",
    "loader_dp_rank_from_the_world": "sampler",
    "cp_packed_detection_needs_tokens": "gpt_step",
    "packed_collate_width_not_rounded": "collate",
    "sequence_tensor_not_packed": "in_batch",
    "sampler_drop_last_ignored": "sampler",
    "named_packed_train_path_ignored": "preparation",
    "gpt_dataset_eod_mask_shifted": "preparation",
    "gpt_step_ignores_dataset_attention_mask": "gpt_step",
    "energon_in_batch_multiple_not_forwarded": "in_batch",
    "energon_defer_ignored": "collate",
    "hf_task_encoder_pad_to_max_length_dropped": "collate",
    "qwen_vl_packed_loss_mask_not_shifted": "in_batch",
    "qwen_vl_packed_keeps_first_image_only": "in_batch",
    "qwen_vl_task_encoder_pad_multiple_dropped": "collate",
    "mimo_placeholders_one_short": "preparation",
    "mimo_padding_mask_one_late": "preparation",
    "sequence_padding_ignores_multiple": "in_batch",
    "sequence_truncation_guard_dropped": "in_batch",
    "gpt_dataset_pad_collision_kept": "preparation",
    "direct_sft_in_batch_multiple_not_forwarded": "in_batch",
    "gpt_dataset_reset_attention_keeps_previous_document": "preparation",
    "single_sampler_slice_ignores_micro_batch": "sampler",
    "random_sampler_buckets_not_offset": "sampler",
    "named_packed_metadata_path_ignored": "preparation",
    "named_packed_file_existence_unchecked": "config",
    "constructor_seq_length_dropped": "preparation",
    "pp_static_shapes_with_in_batch_packing": "config",
    "first_fit_decreasing_drops_shortest": "algorithms",
    "prompt_completion_collate_ignores_max_length": "collate",
    "eod_mask_loss_undefined_accepted": "config",
    "default_pack_size_prepared": "config",
    "parquet_shards_beyond_the_first_dropped": "preparation",
    "parquet_row_group_cache_forward_only": "preparation",
    "offline_specs_without_flag_accepted": "config",
    "omni_packing_alignment_padding_trains": "in_batch",
}


def _pkg() -> Path:
    try:
        return installed_package_dir()
    except RuntimeError:
        pytest.skip("megatron.bridge is not installed here")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """The unmutated copy on every case the checks select (one run)."""
    keyword = " or ".join(f"({k})" for _, k, _ in CHECKS.values())
    suites = sorted({s for s, _, _ in CHECKS.values()})
    out = tmp_path_factory.mktemp("mutate")
    result, evidence = mutate.run_baseline(out / "baseline", suites, timeout=600, pkg=_pkg(), keyword=keyword)
    return out, result, evidence


@pytest.mark.parametrize("fault_id", sorted(CHECKS))
def test_fault_fails_an_invariant(baseline, fault_id):
    out, base_result, evidence = baseline
    suite, keyword, invariant = CHECKS[fault_id]
    fault = dataclasses.replace(FAULTS[fault_id], suites=(suite,))
    assert fault.layer == LAYERS[fault_id]
    row = mutate.score_fault(fault, evidence, out, all_suites=False, timeout=600, pkg=_pkg(), keyword=keyword)
    assert row.status == "caught", row
    reasons = [r for rs in row.invariant_cases.values() for r in rs]
    assert any(invariant in r for r in reasons), reasons
    assert not row.golden_cases or row.invariant_cases, "caught by invariants, not by a golden"
    caught = set(row.invariant_cases)
    assert caught <= {c.case_id for c in base_result.cases}, "the same cases ran in the baseline"
    if fault_id == "pad_id_masked_too":  # MB 0.6.2 fails this case already; the fault is still a new violation
        base = {c.case_id: c for c in base_result.cases}
        assert all(base[c].verdict.value in ("fail", "known-fail") for c in caught), "baseline case already red"
