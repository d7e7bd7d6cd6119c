"""MB's documented packing rules with every dataset config kind that can reach them.

Operation ``kind_validation(kind, cp=..., per_token_loss=..., average_in_collective=...)``: the
outcome of MB's ``ConfigContainer.validate`` for a finetuning configuration whose dataset config is
of ``kind`` (as ``config.run_validate`` gives it: accepted, or refused with the rules its message
names and MB's raising statement). Why: a rule written as ``isinstance(self.dataset, (A, B, C,
D))`` holds for the GPT SFT case and can be lost for one kind alone (CP finetuning needs the
per-token loss, on every SFT dataset kind: with a rank whose tokens are all masked, averaging per
rank gives NaN); a case per kind proves it for each.

Kinds (the SFT dataset configs ``validate`` names for the CP finetuning rules, 0.6.x and main):
``gpt_sft`` (``GPTSFTDatasetConfig``, or the era's ``FinetuningDatasetConfig``), ``direct_hf``
(``DirectHFSFTDatasetConfig``, with a declared placeholder source), ``mock_vlm``
(``MockVLMSFTDatasetConfig``) and ``energon`` (``EnergonDatasetConfig`` with an HF task encoder);
placeholders name no file, and nothing is built: only the rules read the config. A kind whose
config class the era lacks is untestable there.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from harness import features
from harness.errors import Untestable
from harness.suite.adapters import Candidate, NotHere, Operation, load_module, symbol
from harness.suite.adapters.config import PackingConfigSpec, _dataset, _kwargs_for, build_container, run_validate
from harness.suite.adapters.config import tiny_gpt_provider as provider
from harness.suite.adapters.rules import ConfigOutcome

KINDS = ("gpt_sft", "direct_hf", "mock_vlm", "energon")
PLACEHOLDER = "harness/none"  # a path no rule reads
LEDGER = {"direct_hf": "direct-hf-sft", "mock_vlm": "multimodal-builders", "energon": "multimodal-builders"}


def _dataset_of(kind: str, seq_length: int, micro_batch_size: int, cfg: ModuleType) -> object:
    if kind == "gpt_sft":
        return _dataset(PackingConfigSpec(seq_length=seq_length), cfg)
    if kind == "direct_hf":
        cls = symbol("megatron.bridge.data.builders.direct_hf_sft", "DirectHFSFTDatasetConfig")
        source = symbol("megatron.bridge.data.sources.hf", "HFDatasetSourceConfig")(path_or_dataset=PLACEHOLDER)
        return cls(**_kwargs_for(cls, {"seq_length": seq_length, "source": source, "hf_processor_path": PLACEHOLDER}))
    if kind == "mock_vlm":
        cls = symbol("megatron.bridge.data.builders.mock_vlm_sft", "MockVLMSFTDatasetConfig")
        return cls(seq_length=seq_length, hf_processor_path=PLACEHOLDER)
    if kind == "energon":
        module = "megatron.bridge.data.builders.energon"
        encoder = symbol(module, "HFEnergonTaskEncoderConfig")(hf_processor_path=PLACEHOLDER)
        cls = symbol(module, "EnergonDatasetConfig")
        return cls(path=PLACEHOLDER, seq_length=seq_length, micro_batch_size=micro_batch_size, task_encoder=encoder)
    raise ValueError(f"unknown dataset kind {kind!r}; known: {KINDS}")


def _probe() -> Callable[..., ConfigOutcome]:
    cfg = load_module("megatron.bridge.training.config")
    if not hasattr(cfg, "ConfigContainer"):
        raise NotHere("training/config has no ConfigContainer")

    def call(
        kind: str, *, cp: int, per_token_loss: bool, average_in_collective: bool, seq_length: int = 512
    ) -> ConfigOutcome:
        try:
            dataset = _dataset_of(kind, seq_length, 1, cfg)
        except NotHere as exc:  # the era has no such dataset config: nothing to hold the rule to
            if kind in LEDGER:
                raise features.missing(LEDGER[kind], f"dataset kind {kind}: {exc}") from None
            raise Untestable(f"dataset kind {kind}: {exc}") from None
        model = provider(seq_length, cp, 1, False, per_token_loss=per_token_loss)
        container = build_container(
            cfg, model, dataset, global_batch_size=32, micro_batch_size=1, average_in_collective=average_in_collective
        )
        return run_validate(cfg, container, cp * 4)  # DP 4 keeps the global batch divisible

    return call


kind_validation = Operation(
    "kind_validation",
    [Candidate("training/config.ConfigContainer.validate with data/builders dataset configs", _probe)],
)
