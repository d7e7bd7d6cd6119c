"""MB's synthetic VLM conversations (``MockVLMSFTDatasetConfig``), built as a recipe builds them.

Operation ``mock_vlm_sft(request)``: the config with a local Hugging Face processor directory and
the request's collate knobs, finalised, and ``MockVLMSFTDatasetBuilder.build`` for the training
split (a ``DirectSFTDataset`` of MB's seeded random images and responses, collated by the model
collate MB resolves from the processor's class). The dataset comes back as MB built it: the suite
collates its items together and each alone, the latter being MB's own unpadded path.

Era: ``data/builders/mock_vlm_sft`` (8896e9027, 2026-07-14, the unified multimodal builders, with
the Energon builder of :mod:`harness.suite.adapters.energon`); before it: untestable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.suite.adapters import Candidate, Operation, symbol

MODULE = "megatron.bridge.data.builders.mock_vlm_sft"


@dataclass(frozen=True)
class MockVLMRequest:
    processor_dir: Path
    seq_length: int
    samples: int
    image_size: tuple[int, int] = (56, 56)
    knobs: dict[str, object] = field(default_factory=dict)  # further MockVLMSFTDatasetConfig fields


def user_config(req: MockVLMRequest) -> object:
    """``req``'s ``MockVLMSFTDatasetConfig``, finalised: what a recipe hands MB's loader builder
    (its ``drop_last``, ``dataloader_type`` and worker settings), for cases that run MB's loader
    over the dataset the operation builds."""
    _ = mock_vlm_sft.resolved  # the era gap, as the operation names it
    config = symbol(MODULE, "MockVLMSFTDatasetConfig")(
        seq_length=req.seq_length,
        hf_processor_path=str(req.processor_dir),
        image_size=req.image_size,
        num_base_examples=req.samples,
        **req.knobs,
    )
    config.finalize()
    return config


def _probe() -> Callable[[MockVLMRequest], Any]:
    symbol(MODULE, "MockVLMSFTDatasetConfig")  # the era's config (user_config builds it)
    builder_cls = symbol(MODULE, "MockVLMSFTDatasetBuilder")
    context_cls = symbol("megatron.bridge.data.base", "DatasetBuildContext")

    def call(req: MockVLMRequest) -> object:
        config = user_config(req)
        train, _valid, _test = builder_cls(config).build(
            context_cls(train_samples=req.samples, valid_samples=0, test_samples=0)
        )
        return train

    return call


mock_vlm_sft = Operation(
    "mock_vlm_sft",
    [Candidate("data/builders/mock_vlm_sft.MockVLMSFTDatasetBuilder", _probe)],
    before="no declarative mock VLM builder",
    feature="multimodal-builders",
)
