"""MB's pretraining data path: documents concatenated into fixed-length samples (megatron-core's GPTDataset).

Pretraining packs documents too: megatron-core's ``GPTDataset`` cuts the stream of documents
(each ending in EOD) into samples of ``seq_length`` tokens, so a sample holds the tail of one
document, whole documents and the head of the next. What a user does: tokenize documents and
write them with megatron-core's ``IndexedDatasetBuilder`` (what Megatron's
``preprocess_data.py --append-eod`` does), name the prefix in MB's ``GPTDatasetConfig``
(``blend``, ``split``, the packing knobs ``eod_mask_loss``, ``reset_position_ids``,
``reset_attention_mask``, ``drop_last_partial_validation_sequence``), ``finalize()`` it and let
MB's ``pretrain_train_valid_test_datasets_provider`` build the splits.

Operation ``pretraining_splits(request)`` -> :class:`PretrainBuild` (the training and validation
``GPTDataset`` and the documents as written, EOD included).

Era: MB's ``GPTDatasetConfig`` with ``finalize()`` and ``data/utils.pretrain_train_valid_test_datasets_provider``;
the length is ``seq_length`` since 7e8111c23 (2025-11-24), megatron-core's ``sequence_length`` field before.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import features
from harness.suite.adapters import Candidate, NotHere, Operation, Untestable, accepts, field_names, symbol
from harness.suite.adapters.mbtypes import Dataset


@dataclass(frozen=True)
class PretrainRequest:
    """A user's pretraining data and its knobs (``GPTDatasetConfig`` fields)."""

    texts: tuple[str, ...]  # one document each, tokenized with the request's tokenizer, EOD appended
    tokenizer: Any  # MB's tokenizer (tokenize, eod)
    seq_length: int
    split: str = "8,2,0"
    samples: tuple[int, int, int] = (1, 1, 0)  # the sample counts MB asks for (at least one epoch is built)
    knobs: dict[str, Any] = field(default_factory=dict)  # eod_mask_loss, reset_*, drop_last_partial_*...
    seed: int = 1234


@dataclass
class PretrainBuild:
    train: Dataset
    valid: Dataset
    documents: list[list[int]]  # every document as written to the indexed file (EOD last)
    config: object


def _probe() -> Callable[[PretrainRequest], PretrainBuild]:
    config_cls = symbol("megatron.bridge.training.config", "GPTDatasetConfig")
    if not hasattr(config_cls, "finalize") or "sequence_length" not in field_names(config_cls):
        raise NotHere("GPTDatasetConfig has no finalize() over megatron-core's sequence_length")
    provider = symbol("megatron.bridge.data.utils", "pretrain_train_valid_test_datasets_provider")
    builder_cls = symbol("megatron.core.datasets.indexed_dataset", "IndexedDatasetBuilder")
    # a user's config names the length as the era's GPTDatasetConfig takes it: seq_length since 7e8111c23
    # (2025-11-24, MB's own __init__ over MCore's field), megatron-core's dataclass field sequence_length before
    length_field = "seq_length" if accepts(config_cls.__init__, "seq_length") else "sequence_length"

    def call(req: PretrainRequest) -> PretrainBuild:
        import numpy as np
        import torch

        where = Path(tempfile.mkdtemp(prefix="harness-pretrain-"))
        prefix = where / "corpus_text_document"
        docs = [list(req.tokenizer.tokenize(t)) + [int(req.tokenizer.eod)] for t in req.texts]
        builder = builder_cls(str(prefix) + ".bin", dtype=np.int32)
        for doc in docs:
            builder.add_document(torch.tensor(doc, dtype=torch.int32), [len(doc)])
        builder.finalize(str(prefix) + ".idx")
        fields = field_names(config_cls)
        features.require_fields(config_cls, req.knobs, fields)
        absent = sorted(k for k in set(req.knobs) - fields if not accepts(config_cls.__init__, k))
        if absent:  # a megatron-core field its pinned tree does not have yet (context_parallel_size: 2026-01)
            raise Untestable(f"GPTDatasetConfig has no {', '.join(absent)} in this era")
        config = config_cls(
            **{length_field: req.seq_length},
            random_seed=req.seed,
            blend=([str(prefix)], None),
            split=req.split,
            path_to_cache=str(where / "cache"),
            tokenizer=req.tokenizer,
            reset_position_ids=req.knobs.get("reset_position_ids", False),
            reset_attention_mask=req.knobs.get("reset_attention_mask", False),
            eod_mask_loss=req.knobs.get("eod_mask_loss", False),
            mmap_bin_files=False,
            **{
                k: v
                for k, v in req.knobs.items()
                if k not in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss")
            },
        )
        config.finalize()
        train, valid, _test = provider(list(req.samples), config)
        return PretrainBuild(train, valid, docs, config)

    return call


pretraining_splits = Operation(
    "pretraining_splits",
    [Candidate("data/utils.pretrain_train_valid_test_datasets_provider", _probe)],
)
