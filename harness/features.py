"""The feature ledger: which MB packing features a case needs, and the MB commit that brought each.

Why: "untestable" is only honest where the feature a case exercises does not exist yet in the
commit under test (a break is never an era gap). An untestable reason that just says "not in
this era" cannot be checked; one that names a ledger feature can. :mod:`harness.eras.eragaps` checks
it against the repository: the commit that introduced the feature must *not* be an ancestor of
the commit under test, or the case is a harness gap (the feature is there, the adapter did not
reach it) and counts against the sweep's goal.

Adapters name the feature with :func:`missing` (or ``Operation(feature=...)``); the name travels
inside the untestable message as ``[missing feature KEY: ...]``, which is all that results
files keep. Each entry carries a *marker* (a file of MB's tree and a pattern) that holds at
``since`` and not at its first parent: ``tests/test_features.py`` checks every entry against
MB's real history when a mirror is at hand.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from harness.errors import Untestable


@dataclass(frozen=True)
class Feature:
    key: str
    what: str  # what a user would call it, with the MB symbol that carries it
    since: str  # the commit of MB's first-parent main that introduced it
    date: str  # that commit's date, YYYY-MM-DD
    marker_path: str  # a file of MB's tree where the feature shows ...
    marker: str  # ... as this regular expression: present at ``since``, absent at its first parent


FEATURES: dict[str, Feature] = {
    f.key: f
    for f in (
        Feature(
            "pad-cu-seqlens",
            "static cu_seqlens shapes (PackedSequenceSpecs.pad_cu_seqlens)",
            "958fb9b7d",
            "2025-07-16",
            "src/megatron/bridge/data/datasets/packed_sequence.py",
            r"pad_cu_seqlens",
        ),
        Feature(
            "hf-chat-template",
            "chat datasets over HF chat templates (GPTSFTChatDataset use_hf_tokenizer_chat_template)",
            "5e4313cfe",
            "2025-10-20",
            "src/megatron/bridge/data/datasets/sft.py",
            r"use_hf_tokenizer_chat_template",
        ),
        Feature(
            "aligned-offline-packing",
            "offline packing aligned to a multiple, with real-token boundaries "
            "(PackedSequenceSpecs.pad_seq_to_mult, cu_seqlens_unpadded)",
            "5b2d692a9",
            "2026-01-20",
            "src/megatron/bridge/data/datasets/packed_sequence.py",
            r"pad_seq_to_mult",
        ),
        Feature(
            "in-batch-packing",
            "in-batch packing (training/vlm_step.pack_batch_sequences)",
            "af2f35814",
            "2026-01-29",
            "src/megatron/bridge/training/vlm_step.py",
            r"def pack_batch_sequences",
        ),
        Feature(
            "packed-parquet",
            "packed SFT rows in Parquet files, one file or several shards named by a glob or their directory "
            "(GPTSFTPackedParquetDataset, write_packed_parquet)",
            "53d40d1bc",
            "2026-03-25",
            "src/megatron/bridge/data/datasets/packed_parquet.py",
            r"def write_packed_parquet",
        ),
        Feature(
            "max-single-sequence-length",
            "a cap on one example's length below the pack size (PackedSequenceSpecs.max_single_sequence_length)",
            "e4cb868dc",
            "2026-08-06",
            "src/megatron/bridge/data/packing/config.py",
            r"max_single_sequence_length",
        ),
        Feature(
            "offline-packing-flag",
            "an enable_offline_packing flag apart from the packing specs",
            "814ad79af",
            "2026-06-24",
            "src/megatron/bridge/data/builders/finetuning_dataset.py",
            r"enable_offline_packing",
        ),
        Feature(
            "omni-in-batch-collate",
            "Nemotron Omni's task encoder with in-batch packing knobs (NemotronOmniTaskEncoder "
            "enable_in_batch_packing, in_batch_packing_pad_to_multiple_of)",
            "ebd55d7bc",
            "2026-06-25",
            "src/megatron/bridge/data/energon/nemotron_omni_task_encoder.py",
            r"in_batch_packing_pad_to_multiple_of",
        ),
        Feature(
            "collate-cp-multiple",
            "collate pad_to_multiple_of aligned to CP/SP by the data/builders collate configs "
            "(seq_length checked against it, a multiple that serves an evaluation CP)",
            "e577829e1",
            "2026-07-09",
            "src/megatron/bridge/data/builders/direct_hf_sft.py",
            r"pad_to_multiple_of",
        ),
        Feature(
            "direct-hf-sft",
            "direct Hugging Face SFT datasets (data/builders/direct_hf_sft.DirectHFSFTDatasetConfig with a "
            "declarative source, DirectSFTDataset and its text collates)",
            "e577829e1",
            "2026-07-09",
            "src/megatron/bridge/data/builders/direct_hf_sft.py",
            r"class DirectHFSFTDatasetConfig",
        ),
        Feature(
            "multimodal-builders",
            "declarative multimodal data builders (data/builders/energon.EnergonDatasetConfig with an "
            "HFEnergonTaskEncoderConfig, data/energon.prepare_webdataset; data/builders/mock_vlm_sft)",
            "8896e9027",
            "2026-07-14",
            "src/megatron/bridge/data/builders/energon.py",
            r"class HFEnergonTaskEncoderConfig",
        ),
        Feature(
            "mimo-data",
            "MIMO (multi-encoder) data providers with encoder placeholders (data/mimo.mock_provider."
            "MockMimoProvider, later data/megatron_mimo.MockMegatronMIMOProvider)",
            "877779a05",
            "2026-03-20",
            "src/megatron/bridge/data/mimo/mock_provider.py",
            r"class MockMimoProvider",
        ),
        Feature(
            "mimo-hf-data-files",
            "a user's own local dataset (an image folder) named by files through the Hugging Face MIMO provider "
            "(HFMimoDatasetProvider.hf_data_files)",
            "0bf1333ce",
            "2026-04-10",
            "src/megatron/bridge/data/mimo/hf_provider.py",
            r"hf_data_files",
        ),
        Feature(
            "mimo-dataset-loss-mask",
            "the MIMO dataset's own shifted labels and loss mask (no loss on placeholder or padding targets)",
            "0bf1333ce",
            "2026-04-10",
            "src/megatron/bridge/data/mimo/dataset.py",
            r"loss_mask\[-1\] = 0\.0",
        ),
        Feature(
            "audio-lm-step",
            "the audio-language training step with its own step-time in-batch packing (training/audio_lm_step)",
            "226a3b80b",
            "2026-04-10",
            "src/megatron/bridge/training/audio_lm_step.py",
            r"def get_batch",
        ),
        Feature(
            "llava-step-packing",
            "the LLaVA step's packed batches (collate-time THD keys, boundaries moved past each image's "
            "embeddings: training/llava_step._expand_packed_metadata_for_visual_embeddings)",
            "6420c8152",
            "2026-07-15",
            "src/megatron/bridge/training/llava_step.py",
            r"def _expand_packed_metadata_for_visual_embeddings",
        ),
        Feature(
            "omni-step-packing",
            "the Nemotron Omni step's packed batches (the collate-time THD keys MB's in-batch collate writes: "
            "training/nemotron_omni_step._PACKED_SEQ_DEVICE_KEYS)",
            "59ae409f5",
            "2026-06-29",
            "src/megatron/bridge/training/nemotron_omni_step.py",
            r"_PACKED_SEQ_DEVICE_KEYS = ",
        ),
        Feature(
            "dsv4-step",
            "DeepSeek-V4's own training step for offline-packed SFT with THD (models/deepseek/deepseek_v4_step: "
            "gpt_step's common forward with its get_batch, contiguous or zigzag CP partition)",
            "d03342084",
            "2026-08-02",
            "src/megatron/bridge/models/deepseek/deepseek_v4_step.py",
            r"def _packed_metadata_for_forward",
        ),
        Feature(
            "inter-document-masking",
            "megatron-core's GPTDatasetConfig.inter_document_masking (each document its own sequence), in the "
            "Megatron-LM MB pins from this bump on (.main.commit 25f6a0944)",
            "55dd9a4c0",
            "2026-06-29",
            ".main.commit",
            r"25f6a09440c70ca6135ca44bc4dfbea4726c136a",
        ),
        Feature(
            "cp-partition-through-mcore",
            "MB's THD context-parallel partition through megatron-core's get_batch_on_this_cp_rank "
            "(training/utils/packed_seq_utils.get_thd_cp_partition_indices), no Transformer Engine import of its own",
            "b5d121c54",
            "2026-07-15",
            "src/megatron/bridge/training/utils/packed_seq_utils.py",
            r"def get_thd_cp_partition_indices",
        ),
        Feature(
            "wan-step",
            "Wan's packed text-to-video training (diffusion/models/wan/wan_step.WanForwardStep over the "
            "Energon Wan data module, packed by WanTaskEncoder)",
            "1b66a8c11",
            "2026-03-14",
            "src/megatron/bridge/diffusion/models/wan/wan_step.py",
            r"class WanForwardStep",
        ),
        Feature(
            "dgpt-step",
            "the diffusion language model's training step (diffusion/models/common/dgpt_step.DGPTStep, "
            "Nemotron-Labs-Diffusion), which refuses packed batches",
            "323147608",
            "2026-05-15",
            "src/megatron/bridge/diffusion/models/common/dgpt_step.py",
            r"class DGPTStep",
        ),
        Feature(
            "qwen3-omni-packing-refusal",
            "Qwen3-Omni's training step refusing in-batch packing when the dataset config enables it "
            "(models/qwen_omni/qwen3_omni_step: 'packed sequence support is not implemented yet')",
            "814ad79af",
            "2026-06-24",
            "src/megatron/bridge/models/qwen_omni/qwen3_omni_step.py",
            r"enable_in_batch_packing",
        ),
        Feature(
            "step37-packing",
            "Step-3.7's model-owned packing for its Flickr8k SFT (greedy non-truncating packs, the pack transform's "
            "shift and padding sub-sequence, step37_flickr8k_step's PackedSeqParams from the pack's cu_seqlens)",
            "bbce575eb",
            "2026-05-28",
            "src/megatron/bridge/models/stepfun/step37_flickr8k_step.py",
            r"def _build_packed_seq_params",
        ),
        Feature(
            "qwen-vl-thd-positions",
            "Qwen2.5-VL's MRoPE positions for a packed THD row, computed per logical row inside the model "
            "(models/qwen_vl/modeling_qwen25_vl with training/utils/packed_seq_utils."
            "unpack_mcore_thd_tensor_for_position_ids and repack_mcore_thd_position_ids)",
            "59ae409f5",
            "2026-06-29",
            "src/megatron/bridge/models/qwen_vl/modeling_qwen25_vl.py",
            r"unpack_mcore_thd_tensor_for_position_ids",
        ),
        Feature(
            "qwen3-vl-step-packing",
            "Qwen3-VL's step-owned padding and in-batch packing of unpacked collate rows "
            "(models/qwen_vl/qwen3_vl_step._pad_and_pack_qwen3_vl_step, read with enable_in_batch_packing)",
            "ebd55d7bc",
            "2026-06-25",
            "src/megatron/bridge/models/qwen_vl/qwen3_vl_step.py",
            r"def _pad_and_pack_qwen3_vl_step",
        ),
        Feature(
            "mimo-step-packing",
            "MegatronMIMO in-batch sequence packing in the forward step (dataset config enable_in_batch_packing "
            "with defer_in_batch_packing_to_step; training/megatron_mimo_step.resolve_step_packing, "
            "data/megatron_mimo/sequence_pack.pack_language_shard)",
            "a4916b8d0",
            "2026-08-04",
            "src/megatron/bridge/training/megatron_mimo_step.py",
            r"def resolve_step_packing",
        ),
        Feature(
            "collator-sequence-policy",
            "the collators' explicit padded-or-packed sequence policy MB's model collates call "
            "(data/collators/sequence.prepare_sequence_batch, sequence_padding.pad_or_truncate_sequence_batch)",
            "e577829e1",
            "2026-07-09",
            "src/megatron/bridge/data/collators/sequence_padding.py",
            r"def pad_or_truncate_sequence_batch",
        ),
        Feature(
            "prompt-completion-config",
            "prompt-completion preprocessing configs (sft_processing.PromptCompletionSFTPreprocessingConfig)",
            "e577829e1",
            "2026-07-09",
            "src/megatron/bridge/data/sft_processing.py",
            r"class PromptCompletionSFTPreprocessingConfig",
        ),
        Feature(
            "dataset-drop-last",
            "the dataset config's drop_last (training/config.DataloaderConfig.drop_last, later data/base)",
            "877779a05",
            "2026-03-20",
            "src/megatron/bridge/training/config.py",
            r"drop_last: bool = True",
        ),
        Feature(
            "packed-cuda-graph-rules",
            "ConfigContainer.validate's static-shape rules for offline packing under CUDA graphs "
            "(pad_to_max_length, pad_cu_seqlens; with PackedSequenceSpecs.max_single_sequence_length)",
            "e4cb868dc",
            "2026-08-06",
            "src/megatron/bridge/training/config.py",
            r"Offline packing with CUDA graphs requires",
        ),
    )
}

# config fields a case sets that came with a ledger feature: a config without one is an era gap
FIELD_FEATURES = {"drop_last": "dataset-drop-last"}

_TAG = re.compile(r"\[missing feature ([a-z0-9-]+):")


def tag(key: str) -> str:
    """The ``[missing feature KEY: ...]`` text an untestable reason carries (KeyError: not in the ledger)."""
    f = FEATURES[key]
    return f"[missing feature {f.key}: {f.what}, since {f.since} {f.date}]"


def missing(key: str, detail: str) -> Untestable:
    """Untestable because ledger feature ``key`` does not exist in this MB; ``detail`` says how it showed."""
    return Untestable(f"{detail} {tag(key)}")


def require_fields(cls: type, names: Iterable[str], fields: set[str]) -> None:
    """A field among ``names`` that came with a ledger feature (:data:`FIELD_FEATURES`) and that
    config class ``cls`` (whose ``fields`` are given) lacks is that feature missing; any other
    field is left for MB's constructor to take or refuse."""
    for name in sorted(set(names) - fields):
        if name in FIELD_FEATURES:
            raise missing(FIELD_FEATURES[name], f"{cls.__name__} has no {name} in this era")


def named(reason: str) -> list[str]:
    """The ledger keys an untestable reason names (in order, without repeats)."""
    return list(dict.fromkeys(_TAG.findall(reason)))
