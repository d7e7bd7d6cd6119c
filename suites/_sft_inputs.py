"""Seeded generators for the offline packed-dataset, padding and forward suites: SFT examples, token rows.

Like :mod:`suites._inputs`, every generator owns a ``numpy.random.Generator`` built from its
seed, so inputs never depend on global random state.
"""

from __future__ import annotations

import numpy as np

from suites._inputs import EOS_ID, PAD_ID

BOS_ID = 1


def sft_examples_with_specials(
    seed: int, n: int, min_len: int = 3, max_len: int = 24, vocab: int = 50, special_rate: float = 0.15
) -> list[dict]:
    """Tokenised SFT examples (``input_ids`` ending with EOS, ``answer_start_idx``).

    Content contains the pad, BOS and EOS ids at random places (``special_rate``), except the
    last content token: MB's offline alignment padding reuses the EOS id, so a content EOS
    right before the final EOS is indistinguishable from padding (documented ambiguity).
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        body = [int(x) for x in rng.integers(3, vocab, size=length - 1)]
        for i in range(len(body) - 1):
            if rng.random() < special_rate:
                body[i] = int(rng.choice([PAD_ID, BOS_ID, EOS_ID]))
        ids = body + [EOS_ID]
        answer_start = int(rng.integers(1, length))
        out.append({"input_ids": ids, "answer_start_idx": answer_start})
    return out


def token_rows(seed: int, lengths: list[int], vocab: int) -> list[list[int]]:
    """Random token rows of the given lengths (ids 1..vocab-1) for forward comparisons."""
    rng = np.random.default_rng(seed)
    return [[int(x) for x in rng.integers(1, vocab, size=n)] for n in lengths]
