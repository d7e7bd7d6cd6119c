"""Config validation: build a minimal ``ConfigContainer`` from a canonical spec and validate it.

The canonical spec names packing settings once; the adapter maps them to the era's fields:
``offline_packing_specs`` + ``enable_offline_packing`` (mid 2026 on) or
``packed_sequence_specs`` (before); ``enable_in_batch_packing`` or ``pack_sequences_in_batch``;
``GPTSFTDatasetConfig`` (``data/builders``) or ``FinetuningDatasetConfig`` (``training/config``);
``GPTDatasetConfig.seq_length`` or MCore's ``sequence_length`` (2025). A spec the era cannot
express (e.g. "offline packing enabled without specs" before the enable flag existed, in-batch
packing before it existed) is untestable there.

Era signals never read ``validate()`` itself: the field names come from the dataset config
classes and the in-batch flag from the era's in-batch packing implementation, so a rule dropped
from ``validate()`` is a failed case, never an untestable one.

Where a rule lived outside ``validate()`` in an era, the outcome follows MB to the stage that
enforced it: ``pad_cu_seqlens`` without ``pad_to_max_length`` was refused by the packed dataset's
constructor until ``validate()`` took the rule over (e4cb868dc, 2026-08-06), so specs with
``pad_cu_seqlens`` also build MB's packed dataset with those settings. The CUDA graph rules for
offline packing came with ``PackedSequenceSpecs.max_single_sequence_length`` (e4cb868dc), which
is their era signal.

The outcome is ``accepted`` plus, when rejected, the exception class and message.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from harness import features
from harness.errors import NotHere, Untestable
from harness.suite.adapters import field_names, load_module, module_source, rules, symbol
from harness.suite.adapters.rules import ConfigOutcome

# the model's cuda_graph_impl for Transformer Engine's scoped capture; no modules named: attention included
TE_CUDA_GRAPHS = "transformer_engine"


@dataclass(frozen=True)
class PackingConfigSpec:
    seq_length: int = 512
    context_parallel: int = 1
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    micro_batch_size: int = 1
    global_batch_size: int = 32
    dataset: str = "sft"  # "sft" (finetuning) or "gpt" (pretraining)
    offline_packing_size: int | None = None  # packed_sequence_size of the offline specs, None = no specs
    offline_enabled: bool | None = None  # None: enabled exactly when specs are given
    pad_cu_seqlens: bool = False
    pad_to_max_length: bool = False
    in_batch_packing: bool = False
    per_token_loss: bool = True
    average_in_collective: bool = False
    pipeline_parallel: int = 1
    variable_seq_lengths: bool | None = None  # the model's, as the user sets it (None: MB's default)
    cuda_graph_impl: str | None = None  # the model's CUDA graph capture ("full_iteration", ...; None: MB's default)
    dataset_seq_length: int | None = None  # the dataset config's seq_length (None: the model's)


def _first(*candidates: tuple[str, str]) -> Any:
    tried = []
    for module, name in candidates:
        try:
            return symbol(module, name)
        except NotHere as exc:
            tried.append(str(exc))
    raise Untestable("; ".join(tried))


def _kwargs_for(cls: object, wanted: dict[str, object]) -> dict[str, object]:
    names = field_names(cls)
    return {k: v for k, v in wanted.items() if k in names}


def _dataset(spec: PackingConfigSpec, cfg: ModuleType) -> object:
    if spec.dataset == "gpt":
        cls = cfg.GPTDatasetConfig
        # MB's own seq_length field came later; before, the class had only MCore's sequence_length
        length_field = "seq_length" if "seq_length" in field_names(cls) else "sequence_length"
        return cls(
            random_seed=1234,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            **{length_field: spec.dataset_seq_length or spec.seq_length},
        )
    cls = _first(
        ("megatron.bridge.data.builders", "GPTSFTDatasetConfig"),
        ("megatron.bridge.training.config", "FinetuningDatasetConfig"),
    )
    length = spec.dataset_seq_length or spec.seq_length
    return cls(**_kwargs_for(cls, {"seq_length": length, "dataset_root": "/nonexistent/harness-dataset"}))


def _offline_field(dataset: object) -> str:
    """Where the era's dataset config keeps offline packing specs (a field of the class)."""
    names = field_names(type(dataset))
    for name in ("offline_packing_specs", "packed_sequence_specs"):
        if name in names:
            return name
    raise Untestable(
        f"{type(dataset).__name__} has no offline packing specs field in this era "
        "(neither offline_packing_specs nor packed_sequence_specs)"
    )


def in_batch_flag() -> str:
    """The dataset flag that turns in-batch packing on, named by the era's in-batch implementation.

    In-batch packing first appeared as ``training/vlm_step.pack_batch_sequences``, switched by
    the step reading ``pack_sequences_in_batch`` (af2f35814, 2026-01-29; renamed
    ``enable_in_batch_packing`` in 814ad79af, 2026-06-24); the collate-time implementation
    (``data/sequence_batching`` 2026-06-25, then ``data/packing/in_batch``) is switched by
    ``enable_in_batch_packing``. Before 2026-01-29 the feature does not exist.
    """
    for module in ("megatron.bridge.data.packing.in_batch", "megatron.bridge.data.sequence_batching"):
        if module_source(module) is not None:
            return "enable_in_batch_packing"
    step = module_source("megatron.bridge.training.vlm_step") or ""
    if "def pack_batch_sequences" in step:
        return "enable_in_batch_packing" if "enable_in_batch_packing" in step else "pack_sequences_in_batch"
    raise features.missing("in-batch-packing", "in-batch packing does not exist in this MB era")


def _apply_packing(spec: PackingConfigSpec, dataset: Any) -> object:
    """Set the spec's packing fields on ``dataset``; returns the offline specs object (or None)."""
    specs = None
    if spec.offline_packing_size is not None or spec.offline_enabled:
        specs_cls = _first(
            ("megatron.bridge.data.packing", "PackedSequenceSpecs"),
            ("megatron.bridge.data.datasets.packed_sequence", "PackedSequenceSpecs"),
        )
        field = _offline_field(dataset)
        if spec.offline_packing_size is not None:
            specs = specs_cls(
                **_kwargs_for(
                    specs_cls,
                    {"packed_sequence_size": spec.offline_packing_size, "pad_cu_seqlens": spec.pad_cu_seqlens},
                )
            )
            if spec.pad_cu_seqlens and not hasattr(specs, "pad_cu_seqlens"):
                raise features.missing("pad-cu-seqlens", "PackedSequenceSpecs has no pad_cu_seqlens in this era")
            if spec.cuda_graph_impl is not None and "max_single_sequence_length" not in field_names(specs_cls):
                # the era signal is the field that came with the rules (never validate()'s text)
                raise features.missing(
                    "packed-cuda-graph-rules", "validate() has no CUDA graph rules for offline packing in this era"
                )
        enabled = spec.offline_enabled if spec.offline_enabled is not None else specs is not None
        setattr(dataset, field, specs)
        if "enable_offline_packing" in field_names(type(dataset)):
            dataset.enable_offline_packing = enabled
        elif enabled != (specs is not None):
            raise features.missing(
                "offline-packing-flag",
                "this era has no enable_offline_packing flag separate from packed_sequence_specs",
            )
    if spec.in_batch_packing:
        flag = in_batch_flag()
        if specs is not None and "enable_offline_packing" not in field_names(type(dataset)):
            # MB declared offline and in-batch packing exclusive with the enable_offline_packing
            # flag (814ad79af); before it no rule of that era speaks of the combination
            raise features.missing(
                "offline-packing-flag", "offline and in-batch packing are declared exclusive from this flag on"
            )
        setattr(dataset, flag, True)
    if spec.pad_to_max_length:
        if hasattr(dataset, "pad_to_max_length"):
            dataset.pad_to_max_length = True
        elif hasattr(dataset, "dataset_kwargs"):  # SFT configs pass it to the dataset through kwargs
            dataset.dataset_kwargs = {**(dataset.dataset_kwargs or {}), "pad_to_max_length": True}
        else:
            raise Untestable("dataset config has neither pad_to_max_length nor dataset_kwargs in this era")
    return specs


def tiny_gpt_provider(
    seq_length: int,
    cp: int,
    tp: int,
    sp: bool,
    per_token_loss: bool,
    pp: int = 1,
    extra: Mapping[str, object] | None = None,
) -> object:
    """The smallest GPT model provider the validation rules look at (one layer per pipeline stage)."""
    provider_cls = symbol("megatron.bridge.models.gpt_provider", "GPTModelProvider")
    return provider_cls(
        **_kwargs_for(
            provider_cls,
            {
                "num_layers": pp,
                "hidden_size": 384,
                "num_attention_heads": 12,  # divisible by every TP size the cases use (1, 2, 3, 4)
                "seq_length": seq_length,
                "apply_rope_fusion": False,
                "context_parallel_size": cp,
                "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": pp,
                "sequence_parallel": sp,
                "calculate_per_token_loss": per_token_loss,
                **(extra or {}),
            },
        )
    )


def build_container(
    cfg: ModuleType,
    model: object,
    dataset: object,
    *,
    global_batch_size: int,
    micro_batch_size: int,
    average_in_collective: bool = False,
    dist_extra: dict[str, object] | None = None,
) -> Any:
    """A minimal ``ConfigContainer`` around ``model`` and ``dataset`` (fields the era lacks are left out)."""
    optimizer_cls = getattr(cfg, "OptimizerConfig", None) or symbol("megatron.core.optimizer", "OptimizerConfig")
    dist_kwargs = {"use_gloo_process_groups": True, "lazy_mpu_init": False, **(dist_extra or {})}
    parts: dict[str, object] = {
        "train": cfg.TrainingConfig(
            global_batch_size=global_batch_size, micro_batch_size=micro_batch_size, train_iters=1000
        ),
        "model": model,
        "optimizer": optimizer_cls(lr=0.0001, use_distributed_optimizer=False),
        "scheduler": cfg.SchedulerConfig(lr_decay_style="linear", lr_warmup_iters=0),
        "dataset": dataset,
        "logger": cfg.LoggerConfig(),
        "tokenizer": _first(
            ("megatron.bridge.training.tokenizers.config", "TokenizerConfig"),
            ("megatron.bridge.training.config", "TokenizerConfig"),
        )(),
        "checkpoint": cfg.CheckpointConfig(ckpt_format="torch_dist"),
        "dist": cfg.DistributedInitConfig(**_kwargs_for(cfg.DistributedInitConfig, dist_kwargs)),
        "ddp": cfg.DistributedDataParallelConfig(average_in_collective=average_in_collective),
        "rng": cfg.RNGConfig(),
        "rerun_state_machine": cfg.RerunStateMachineConfig(),
    }
    if hasattr(cfg, "ValidationConfig") and "validation" in field_names(cfg.ConfigContainer):
        parts["validation"] = cfg.ValidationConfig()
    return cfg.ConfigContainer(**_kwargs_for(cfg.ConfigContainer, parts))


def run_validate(cfg: ModuleType, container: Any, world_size: int) -> ConfigOutcome:
    """``container.validate()`` with the world size it reads from torch.distributed pinned.

    A rejection is the behaviour under test, so an exception becomes the outcome, attributed to
    the rules its message names and to MB's raising statement (:mod:`harness.suite.adapters.rules`):
    ``rules`` and ``raised_at`` say who refused, so a case proves its own rule, not any raise.
    """
    original = getattr(cfg, "get_world_size_safe", None)
    cfg.__dict__["get_world_size_safe"] = lambda: world_size  # the module global validate() calls
    try:
        container.validate()
    except Exception as exc:
        return rejected(exc)
    finally:
        if original is not None:
            cfg.__dict__["get_world_size_safe"] = original
    return accepted()


def accepted() -> ConfigOutcome:
    return {"accepted": True, "error_class": None, "message": "", "rules": [], "raised_at": None}


def rejected(exc: BaseException) -> ConfigOutcome:
    """The outcome of a refusal: class, message, the rules it is attributed to, MB's raising check."""
    from harness.suite.adapters.refusal import up_front_check

    who = rules.attribute(exc)
    return {
        "accepted": False,
        "error_class": type(exc).__name__,
        "message": " ".join(str(exc).split()),
        "rules": who.names(),
        "raised_at": who.frame,
        "up_front": up_front_check(exc),  # a gate's check before any batch (harness.suite.adapters.refusal)
    }


def refusal(outcome: ConfigOutcome) -> str:
    """An outcome in words: "accepted", or who refused it, where and with what message."""
    if outcome["accepted"]:
        return "accepted"
    who = ", ".join(outcome["rules"]) or "no documented rule"
    where = outcome["raised_at"] or "not an explicit check in MB's code"
    return f"refused by {who} ({outcome['error_class']} at {where}: {outcome['message'][:200]})"


def _packed_dataset_stage(spec: PackingConfigSpec) -> ConfigOutcome:
    """MB's packed dataset built with the spec's ``pad_cu_seqlens`` / ``pad_to_max_length``.

    Before e4cb868dc (2026-08-06) ``validate()`` did not look at ``pad_cu_seqlens``: the packed
    dataset's constructor refused it without ``pad_to_max_length``. A one-row artifact in MB's
    ``.npy`` layout and its metadata file are enough for the constructor to reach that check.
    """
    from harness.suite.adapters import packed_artifact

    pack = spec.offline_packing_size or spec.seq_length
    with tempfile.TemporaryDirectory(prefix="harness-cfg-") as tmp:
        npy = packed_artifact.write_rows_npy(
            [{"input_ids": [5, 6, 7, 2], "loss_mask": [0, 1, 1, 1], "seq_start_id": [0]}], Path(tmp) / "packed.npy"
        )
        meta = Path(tmp) / "metadata.jsonl"
        meta.write_text(json.dumps([{"max_samples_per_bin": 1, "dataset_max_seqlen": 3, "min_packed_seqlen": 3}]))
        try:
            packed_artifact.packed_dataset(
                npy,
                max_seq_length=pack,
                metadata=meta,
                pad_to_max_length=spec.pad_to_max_length,
                pad_cu_seqlens=spec.pad_cu_seqlens,
            )
        except Untestable:
            raise
        except Exception as exc:
            return rejected(exc)
    return accepted()


def validate_packing_config(spec: PackingConfigSpec) -> ConfigOutcome:
    """Build the container for ``spec``, run MB's ``validate()``, return the outcome.

    With ``pad_cu_seqlens`` an accepted container also goes through the packed dataset's
    constructor (see :func:`_packed_dataset_stage`).
    """
    cfg = load_module("megatron.bridge.training.config")
    model_fields = {"variable_seq_lengths": spec.variable_seq_lengths, "cuda_graph_impl": spec.cuda_graph_impl}
    extra = {name: value for name, value in model_fields.items() if value is not None}
    model = tiny_gpt_provider(
        spec.seq_length,
        spec.context_parallel,
        spec.tensor_parallel,
        spec.sequence_parallel,
        spec.per_token_loss,
        pp=spec.pipeline_parallel,
        extra=extra,
    )
    dataset = _dataset(spec, cfg)
    specs = _apply_packing(spec, dataset)
    container = build_container(
        cfg,
        model,
        dataset,
        global_batch_size=spec.global_batch_size,
        micro_batch_size=spec.micro_batch_size,
        average_in_collective=spec.average_in_collective,
    )
    outcome = run_validate(cfg, container, spec.context_parallel * spec.tensor_parallel * spec.pipeline_parallel)
    if outcome["accepted"] and specs is not None and spec.pad_cu_seqlens:
        return _packed_dataset_stage(spec)
    if outcome["accepted"]:  # what finalisation left on the model (pipeline shapes)
        outcome["variable_seq_lengths"] = getattr(container.model, "variable_seq_lengths", None)
    return outcome
