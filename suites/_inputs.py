"""Seeded input generators shared by the suites.

Real data is varied: several rows per batch, different sequence counts and lengths, special
tokens (EOS/pad ids) inside content. Every generator takes a seed and uses its own
``numpy.random.Generator``, so inputs never depend on global random state.
"""

from __future__ import annotations

import numpy as np

EOS_ID = 2
PAD_ID = 0
IGNORE_INDEX = -100


def seqlens(seed: int, n: int, low: int, high: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(low, high + 1, size=n)]


def sft_examples(seed: int, n: int, min_len: int = 3, max_len: int = 24, vocab: int = 50) -> list[dict]:
    """Tokenised SFT examples as MB's offline packing consumes them.

    Each has ``input_ids`` (context + answer, ending with EOS) and ``answer_start_idx``. Content
    tokens may equal the pad id or the EOS id, as real tokenisers produce them inside text.
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        ids = [int(x) for x in rng.integers(0, vocab, size=length - 1)] + [EOS_ID]
        answer_start = int(rng.integers(1, length))
        out.append({"input_ids": ids, "answer_start_idx": answer_start})
    return out


def right_padded_batch(seed: int, rows: int, width: int, vocab: int = 50, min_len: int = 1):
    """A right-padded micro-batch: tokens, labels, loss_mask, position_ids (torch tensors).

    Content tokens are drawn from ``1..vocab`` so that the pad id (0) marks padding only, the
    contract MB's in-batch packing documents for rows without an attention mask.
    """
    import torch

    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(min_len, width + 1, size=rows)]
    tokens = torch.zeros((rows, width), dtype=torch.long)
    labels = torch.full((rows, width), IGNORE_INDEX, dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.float)
    position_ids = torch.zeros((rows, width), dtype=torch.long)
    for r, length in enumerate(lengths):
        toks = torch.tensor(rng.integers(1, vocab, size=length), dtype=torch.long)
        tokens[r, :length] = toks
        labels[r, : length - 1] = toks[1:]
        answer_from = int(rng.integers(0, length))
        loss_mask[r, answer_from : length - 1] = 1.0
        position_ids[r, :length] = torch.arange(length)
    return {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": position_ids}, lengths
