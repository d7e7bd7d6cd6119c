"""CP/TP-SP padding multiples as MB derives them in ``ConfigContainer.validate``.

Operation ``collate_padding_multiple(cp, tp, sp, in_batch, eval_cp=None)``: builds a minimal
container around a collate-time (VLM/direct-HF style) dataset config, validates it and reads
back the multiple MB wrote: ``in_batch_packing_pad_to_multiple_of`` when in-batch packing is
on, else the dataset's ``pad_to_multiple_of`` (which MB raises to the lcm with the multiple).
A rejection comes back as ``{"accepted": False, ...}``: rejecting a configuration is behaviour.

Eras: the dataset classes (``data/builders/mock_vlm_sft.MockVLMSFTDatasetConfig`` or
``direct_hf_sft.DirectHFSFTDatasetConfig``) with ``in_batch_packing_pad_to_multiple_of`` exist
from mid 2026; before, the case is untestable.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from harness.adapters import Candidate, NotHere, Operation, load_module, symbol
from harness.adapters.config import _first, _kwargs_for


def _dataset_cls() -> Any:
    for module, name in (("megatron.bridge.data.builders.mock_vlm_sft", "MockVLMSFTDatasetConfig"),
                         ("megatron.bridge.data.builders.direct_hf_sft", "DirectHFSFTDatasetConfig")):
        try:
            cls = symbol(module, name)
        except NotHere:
            continue
        if "in_batch_packing_pad_to_multiple_of" in {f.name for f in dataclasses.fields(cls)}:
            return cls
    raise NotHere("no collate-time dataset config with in_batch_packing_pad_to_multiple_of")


def _validate_probe() -> Callable[..., dict[str, Any]]:
    ds_cls = _dataset_cls()
    cfg = load_module("megatron.bridge.training.config")
    provider_cls = symbol("megatron.bridge.models.gpt_provider", "GPTModelProvider")

    def call(cp: int, tp: int = 1, sp: bool = False, *, in_batch: bool = True, seq_length: int = 1680,
             eval_cp: int | None = None, pad_to_multiple_of: int = 1) -> dict[str, Any]:
        model = provider_cls(**_kwargs_for(provider_cls, {
            "num_layers": 1, "hidden_size": 128, "num_attention_heads": 4, "seq_length": seq_length,
            "apply_rope_fusion": False, "context_parallel_size": cp, "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": 1, "sequence_parallel": sp, "calculate_per_token_loss": True}))
        dataset = ds_cls(**_kwargs_for(ds_cls, {"seq_length": seq_length, "hf_processor_path": "harness/none",
                                                "enable_in_batch_packing": in_batch,
                                                "pad_to_multiple_of": pad_to_multiple_of}))
        optimizer_cls = getattr(cfg, "OptimizerConfig", None) or symbol("megatron.core.optimizer", "OptimizerConfig")
        dist_kwargs = {"use_gloo_process_groups": True, "lazy_mpu_init": False}
        if eval_cp is not None:
            dist_kwargs["eval_context_parallel_size"] = eval_cp
        parts: dict[str, Any] = {
            "train": cfg.TrainingConfig(global_batch_size=32, micro_batch_size=4 if in_batch else 1, train_iters=10),
            "model": model,
            "optimizer": optimizer_cls(lr=0.0001, use_distributed_optimizer=False),
            "scheduler": cfg.SchedulerConfig(lr_decay_style="linear", lr_warmup_iters=0),
            "dataset": dataset,
            "logger": cfg.LoggerConfig(),
            "tokenizer": _first(("megatron.bridge.training.tokenizers.config", "TokenizerConfig"),
                                ("megatron.bridge.training.config", "TokenizerConfig"))(),
            "checkpoint": cfg.CheckpointConfig(ckpt_format="torch_dist"),
            "dist": cfg.DistributedInitConfig(**_kwargs_for(cfg.DistributedInitConfig, dist_kwargs)),
            "ddp": cfg.DistributedDataParallelConfig(average_in_collective=False),
            "rng": cfg.RNGConfig(),
            "rerun_state_machine": cfg.RerunStateMachineConfig(),
        }
        if "validation" in {f.name for f in dataclasses.fields(cfg.ConfigContainer)} and hasattr(cfg, "ValidationConfig"):
            parts["validation"] = cfg.ValidationConfig()
        container = cfg.ConfigContainer(**_kwargs_for(cfg.ConfigContainer, parts))
        world = cp * tp * 4  # DP 4 keeps the global batch divisible
        original = getattr(cfg, "get_world_size_safe", None)
        cfg.get_world_size_safe = lambda: world
        try:
            container.validate()
        except Exception as exc:
            return {"accepted": False, "error_class": type(exc).__name__, "message": " ".join(str(exc).split()),
                    "multiple": None}
        finally:
            if original is not None:
                cfg.get_world_size_safe = original
        field = "in_batch_packing_pad_to_multiple_of" if in_batch else "pad_to_multiple_of"
        return {"accepted": True, "error_class": None, "message": "", "multiple": int(getattr(dataset, field))}
    return call


collate_padding_multiple = Operation("collate_padding_multiple", [
    Candidate("training/config ConfigContainer.validate (collate padding multiple)", _validate_probe),
])
