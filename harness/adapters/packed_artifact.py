"""MB's runtime packed SFT dataset (legacy ``.npy`` layout) over a given artifact.

The config suite uses it for the constructor's checks: before e4cb868dc (2026-08-06) ``ConfigContainer.validate()``
did not look at ``pad_cu_seqlens``, and the packed dataset's constructor was where MB refused
it without ``pad_to_max_length``. Reaching that check needs an artifact in MB's ``.npy`` layout
and a tokenizer object; the content of the row is irrelevant to the outcome. The padding suite
loads rows MB's own builder packed (:mod:`harness.adapters.sft`) through this class, as a user
with a packed ``.npy`` file from an earlier MB does (MB still loads them; it stopped writing them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness.adapters import Candidate, Operation, accepts, symbol
from harness.errors import NotHere


class SpecialIdsTokenizer:
    """Test double of a tokenizer for the constructor: it reads special ids only (named in results
    as a stand-in; no text is tokenised on this path)."""

    eos_id = eod = 2
    pad_id = pad = 0
    bos_id = 1
    vocab_size = 128


def write_rows_npy(rows: list[dict[str, list[int]]], path: Path) -> Path:
    """A packed artifact in MB's legacy ``.npy`` layout (an object array of row dicts)."""
    arr = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        arr[i] = {k: list(r[k]) for k in ("input_ids", "loss_mask", "seq_start_id")}
    np.save(path, arr)
    return path


def _probe(module: str) -> Callable[[], Callable[..., Any]]:
    def probe() -> Callable[..., Any]:
        cls = symbol(module, "GPTSFTPackedDataset")
        if not accepts(cls.__init__, "pad_cu_seqlens"):
            raise NotHere(f"{module}.GPTSFTPackedDataset has no pad_cu_seqlens")

        def make(
            npy: Path,
            *,
            max_seq_length: int,
            metadata: Path | None,
            pad_to_max_length: bool,
            pad_cu_seqlens: bool,
            tokenizer: Any = None,
        ) -> Any:
            return cls(
                str(npy),
                tokenizer if tokenizer is not None else SpecialIdsTokenizer(),
                max_seq_length=max_seq_length,
                pad_to_max_length=pad_to_max_length,
                pad_cu_seqlens=pad_cu_seqlens,
                # the rows are already tokenised; the template only satisfies the unpacked parent's validation
                prompt_template="{input} {output}",
                label_key="output",
                truncation_field="input",
                pack_metadata_file_path=str(metadata) if metadata is not None else None,
            )

        return make

    return probe


packed_dataset = Operation(
    "packed_dataset",
    [
        Candidate("data/packing/gpt_sft", _probe("megatron.bridge.data.packing.gpt_sft")),
        Candidate("data/datasets/sft", _probe("megatron.bridge.data.datasets.sft")),
        Candidate("data/datasets/gpt_sft", _probe("megatron.bridge.data.datasets.gpt_sft")),
    ],
)
