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

from harness.adapters import Candidate, Operation, load_module, symbol
from harness.adapters.config import _kwargs_for, build_container, run_validate, tiny_gpt_provider
from harness.errors import NotHere


def _dataset_cls() -> Any:
    for module, name in (
        ("megatron.bridge.data.builders.mock_vlm_sft", "MockVLMSFTDatasetConfig"),
        ("megatron.bridge.data.builders.direct_hf_sft", "DirectHFSFTDatasetConfig"),
    ):
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

    def call(
        cp: int,
        tp: int = 1,
        sp: bool = False,
        *,
        in_batch: bool = True,
        seq_length: int = 1680,
        eval_cp: int | None = None,
        pad_to_multiple_of: int = 1,
    ) -> dict[str, Any]:
        model = tiny_gpt_provider(seq_length, cp, tp, sp, per_token_loss=True)
        dataset = ds_cls(
            **_kwargs_for(
                ds_cls,
                {
                    "seq_length": seq_length,
                    "hf_processor_path": "harness/none",
                    "enable_in_batch_packing": in_batch,
                    "pad_to_multiple_of": pad_to_multiple_of,
                },
            )
        )
        container = build_container(
            cfg,
            model,
            dataset,
            global_batch_size=32,
            micro_batch_size=4 if in_batch else 1,
            dist_extra={"eval_context_parallel_size": eval_cp} if eval_cp is not None else None,
        )
        outcome = run_validate(cfg, container, cp * tp * 4)  # DP 4 keeps the global batch divisible
        field = "in_batch_packing_pad_to_multiple_of" if in_batch else "pad_to_multiple_of"
        outcome["multiple"] = int(getattr(dataset, field)) if outcome["accepted"] else None
        return outcome

    return call


collate_padding_multiple = Operation(
    "collate_padding_multiple",
    [
        Candidate("training/config ConfigContainer.validate (collate padding multiple)", _validate_probe),
    ],
)
