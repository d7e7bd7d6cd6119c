"""MB's direct Hugging Face SFT path, driven the way a recipe drives it: config, finalisation, builder.

Operation ``direct_sft(request)``: a ``DirectHFSFTDatasetConfig`` over a local JSONL file (the
``json`` loader of Hugging Face ``datasets``, as a user's own data is declared:
``HFDatasetSourceConfig(path_or_dataset="json", load_kwargs={"data_files": ...})``), with chat or
prompt-completion preprocessing and the collate knobs of the request; when the request names a
parallel layout (CP, TP, SP, PP), the config first goes through MB's ``ConfigContainer.validate``,
which writes what MB chooses for it (``pad_to_multiple_of`` raised to the CP/SP multiple, or
``in_batch_packing_pad_to_multiple_of``; ``pad_to_max_length`` with PP > 1), never what the suite
picked. Then MB's
``direct_hf_sft_train_valid_test_datasets_provider`` builds the training split (a
``DirectSFTDataset``) and its ``collate_fn`` makes one micro-batch of every row.

Era: ``data/builders/direct_hf_sft`` (e577829e1, 2026-07-09, with a declarative ``source``);
before it: untestable.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.suite.adapters import Candidate, NotHere, Operation, field_names, load_module, symbol
from harness.suite.adapters.cp import validate_layout
from harness.suite.adapters.rules import ConfigOutcome

MODULE = "megatron.bridge.data.builders.direct_hf_sft"


@dataclass(frozen=True)
class DirectSFTRequest:
    """What a user configures: rows, the processor directory, preprocessing and collate knobs."""

    rows: tuple[dict[str, object], ...]
    processor_dir: Path
    seq_length: int
    kind: str = "chat"  # "chat" (messages) or "completion" (prompt-completion columns input/output)
    layout: tuple[int, int, bool] | None = None  # (CP, TP, SP) finalised by ConfigContainer.validate
    pipeline: int = 1  # PP of the layout (PP > 1 with no layout: CP 1, TP 1)
    truncation_method: str | None = None  # prompt-completion only; None: MB's default
    knobs: dict[str, object] = field(default_factory=dict)  # DirectHFSFTDatasetConfig fields


@dataclass
class DirectSFTBuild:
    batch: dict[str, Any]  # every row collated into one micro-batch
    config: Any  # the dataset config after MB's finalisation (its fields per era)
    validation: ConfigOutcome | None  # ConfigContainer.validate's outcome (None: no layout)


def preprocessing(kind: str, truncation_method: str | None = None) -> object:
    """MB's preprocessing config for ``kind`` (prompt-completion: the corpus' input/output columns)."""
    sft = load_module("megatron.bridge.data.sft_processing")
    if kind == "chat":
        return sft.ChatSFTPreprocessingConfig()
    extra = {"truncation_method": truncation_method} if truncation_method is not None else {}
    return sft.PromptCompletionSFTPreprocessingConfig(prompt_column="input", completion_column="output", **extra)


def _config(cfg_cls: type, source_cls: type, req: DirectSFTRequest) -> object:
    """The config a user declares for ``req``: its rows in a local JSONL file, the request's knobs."""
    where = Path(tempfile.mkdtemp(prefix="harness-direct-sft-"))
    data = where / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in req.rows), encoding="utf-8")
    source = source_cls(
        path_or_dataset="json",
        split="train",
        load_kwargs={"data_files": str(data), "cache_dir": str(where / "hf-cache")},
    )
    return cfg_cls(
        seq_length=req.seq_length,
        source=source,
        preprocessing=preprocessing(req.kind, req.truncation_method),
        hf_processor_path=str(req.processor_dir),
        do_validation=False,
        do_test=False,
        **req.knobs,
    )


def user_config(req: DirectSFTRequest) -> tuple[Any, Callable[..., tuple[object, object, object]]]:
    """``req``'s ``DirectHFSFTDatasetConfig`` and MB's provider for it (what a recipe hands MB's
    loader builder), for cases that run MB's loader over the direct path's datasets."""
    _ = direct_sft.resolved  # the era gap, as the operation names it
    cfg_cls = symbol(MODULE, "DirectHFSFTDatasetConfig")
    source_cls = symbol("megatron.bridge.data.sources.hf", "HFDatasetSourceConfig")
    return _config(cfg_cls, source_cls, req), symbol(MODULE, "direct_hf_sft_train_valid_test_datasets_provider")


def _probe() -> Callable[[DirectSFTRequest], DirectSFTBuild]:
    cfg_cls = symbol(MODULE, "DirectHFSFTDatasetConfig")
    provider = symbol(MODULE, "direct_hf_sft_train_valid_test_datasets_provider")
    if "source" not in field_names(cfg_cls):
        raise NotHere("DirectHFSFTDatasetConfig has no declarative source")
    source_cls = symbol("megatron.bridge.data.sources.hf", "HFDatasetSourceConfig")
    training = load_module("megatron.bridge.training.config")

    def call(req: DirectSFTRequest) -> DirectSFTBuild:
        config = _config(cfg_cls, source_cls, req)
        outcome = None
        if req.layout is not None or req.pipeline > 1:
            cp, tp, sp = req.layout or (1, 1, False)
            in_batch = bool(req.knobs.get("enable_in_batch_packing"))
            outcome = validate_layout(training, config, cp, tp, sp, req.seq_length, in_batch, None, pp=req.pipeline)
            if not outcome["accepted"]:
                return DirectSFTBuild({}, config, outcome)
        train, _valid, _test = provider([len(req.rows), 0, 0], config)
        batch = train.collate_fn([train[i] for i in range(len(train))])
        return DirectSFTBuild(batch, config, outcome)

    return call


direct_sft = Operation(
    "direct_hf_sft",
    [Candidate("data/builders/direct_hf_sft.direct_hf_sft_train_valid_test_datasets_provider", _probe)],
    before="no direct Hugging Face SFT builder",
    feature="direct-hf-sft",
)
