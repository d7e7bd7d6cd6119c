"""Config validation: build a minimal ``ConfigContainer`` from a canonical spec and validate it.

The canonical spec names packing settings once; the adapter maps them to the era's fields:
``offline_packing_specs`` + ``enable_offline_packing`` (mid 2026 on) or
``packed_sequence_specs`` (before); ``enable_in_batch_packing`` or ``pack_sequences_in_batch``;
``GPTSFTDatasetConfig`` (``data/builders``) or ``FinetuningDatasetConfig`` (``training/config``).
A spec the era cannot express (e.g. "offline packing enabled without specs" before the
enable flag existed) is untestable there.

The outcome is ``accepted`` plus, when rejected, the exception class and message.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from harness.adapters import load_module, source_text, symbol
from harness.errors import NotHere, Untestable


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


def _first(*candidates: tuple[str, str]) -> Any:
    tried = []
    for module, name in candidates:
        try:
            return symbol(module, name)
        except NotHere as exc:
            tried.append(str(exc))
    raise Untestable("; ".join(tried))


def _kwargs_for(cls: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return {k: v for k, v in wanted.items() if k in names}


def _dataset(spec: PackingConfigSpec, cfg: Any) -> Any:
    if spec.dataset == "gpt":
        return cfg.GPTDatasetConfig(
            random_seed=1234,
            seq_length=spec.seq_length,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
        )
    cls = _first(
        ("megatron.bridge.data.builders", "GPTSFTDatasetConfig"),
        ("megatron.bridge.training.config", "FinetuningDatasetConfig"),
    )
    return cls(**_kwargs_for(cls, {"seq_length": spec.seq_length, "dataset_root": "/nonexistent/harness-dataset"}))


def _apply_packing(spec: PackingConfigSpec, dataset: Any, source: str) -> None:
    specs_cls = _first(
        ("megatron.bridge.data.packing", "PackedSequenceSpecs"),
        ("megatron.bridge.data.datasets.packed_sequence", "PackedSequenceSpecs"),
    )
    specs = None
    if spec.offline_packing_size is not None:
        specs = specs_cls(
            **_kwargs_for(
                specs_cls, {"packed_sequence_size": spec.offline_packing_size, "pad_cu_seqlens": spec.pad_cu_seqlens}
            )
        )
        if spec.pad_cu_seqlens and not hasattr(specs, "pad_cu_seqlens"):
            raise Untestable("PackedSequenceSpecs has no pad_cu_seqlens in this era")
    enabled = spec.offline_enabled if spec.offline_enabled is not None else specs is not None
    if "offline_packing_specs" in source:
        dataset.offline_packing_specs = specs
        dataset.enable_offline_packing = enabled
    elif "packed_sequence_specs" in source:
        if enabled != (specs is not None):
            raise Untestable("this era has no enable_offline_packing flag separate from packed_sequence_specs")
        dataset.packed_sequence_specs = specs
    else:
        raise Untestable("ConfigContainer.validate knows neither offline_packing_specs nor packed_sequence_specs")
    if spec.in_batch_packing:
        for name in ("enable_in_batch_packing", "pack_sequences_in_batch"):
            if name in source:
                setattr(dataset, name, True)
                break
        else:
            raise Untestable("ConfigContainer.validate has no in-batch packing switch in this era")
    if spec.pad_to_max_length:
        if hasattr(dataset, "pad_to_max_length"):
            dataset.pad_to_max_length = True
        elif hasattr(dataset, "dataset_kwargs"):  # SFT configs pass it to the dataset through kwargs
            dataset.dataset_kwargs = {**(dataset.dataset_kwargs or {}), "pad_to_max_length": True}
        else:
            raise Untestable("dataset config has neither pad_to_max_length nor dataset_kwargs in this era")


def tiny_gpt_provider(seq_length: int, cp: int, tp: int, sp: bool, per_token_loss: bool) -> Any:
    """The smallest GPT model provider the validation rules look at."""
    provider_cls = symbol("megatron.bridge.models.gpt_provider", "GPTModelProvider")
    return provider_cls(
        **_kwargs_for(
            provider_cls,
            {
                "num_layers": 1,
                "hidden_size": 128,
                "num_attention_heads": 4,
                "seq_length": seq_length,
                "apply_rope_fusion": False,
                "context_parallel_size": cp,
                "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": 1,
                "sequence_parallel": sp,
                "calculate_per_token_loss": per_token_loss,
            },
        )
    )


def build_container(
    cfg: Any,
    model: Any,
    dataset: Any,
    *,
    global_batch_size: int,
    micro_batch_size: int,
    average_in_collective: bool = False,
    dist_extra: dict[str, Any] | None = None,
) -> Any:
    """A minimal ``ConfigContainer`` around ``model`` and ``dataset`` (fields the era lacks are left out)."""
    optimizer_cls = getattr(cfg, "OptimizerConfig", None) or symbol("megatron.core.optimizer", "OptimizerConfig")
    dist_kwargs = {"use_gloo_process_groups": True, "lazy_mpu_init": False, **(dist_extra or {})}
    parts: dict[str, Any] = {
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
    if hasattr(cfg, "ValidationConfig") and "validation" in {f.name for f in dataclasses.fields(cfg.ConfigContainer)}:
        parts["validation"] = cfg.ValidationConfig()
    return cfg.ConfigContainer(**_kwargs_for(cfg.ConfigContainer, parts))


def run_validate(cfg: Any, container: Any, world_size: int) -> dict[str, Any]:
    """``container.validate()`` with the world size it reads from torch.distributed pinned.

    A rejection is the behaviour under test, so any exception becomes the outcome.
    """
    original = getattr(cfg, "get_world_size_safe", None)
    cfg.get_world_size_safe = lambda: world_size
    try:
        container.validate()
    except Exception as exc:
        return {"accepted": False, "error_class": type(exc).__name__, "message": " ".join(str(exc).split())}
    finally:
        if original is not None:
            cfg.get_world_size_safe = original
    return {"accepted": True, "error_class": None, "message": ""}


def validate_packing_config(spec: PackingConfigSpec) -> dict[str, Any]:
    """Build the container for ``spec``, run MB's ``validate()``, return the outcome."""
    cfg = load_module("megatron.bridge.training.config")
    model = tiny_gpt_provider(
        spec.seq_length, spec.context_parallel, spec.tensor_parallel, spec.sequence_parallel, spec.per_token_loss
    )
    dataset = _dataset(spec, cfg)
    _apply_packing(spec, dataset, source_text(cfg.ConfigContainer))
    container = build_container(
        cfg,
        model,
        dataset,
        global_batch_size=spec.global_batch_size,
        micro_batch_size=spec.micro_batch_size,
        average_in_collective=spec.average_in_collective,
    )
    return run_validate(cfg, container, spec.context_parallel * spec.tensor_parallel)
