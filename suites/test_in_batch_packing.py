"""In-batch (VLM collate) packing of right-padded micro-batches into one MCore THD row.

Documented contract (docs/training/packed-sequences.md, in-batch packing): padding is removed,
sequences are concatenated in batch order, each is aligned to ``pad_to_multiple_of``
(2*CP, or lcm(2*CP, CP*TP) with sequence parallel) with alignment padding that never reaches
the loss (loss mask 0, label = ignore index), position ids restart at 0 for every sequence,
``cu_seqlens`` (padded) mark the physical starts and ``max_seqlen`` is the longest aligned
sequence. Malformed input (left padding) is refused, never packed.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.adapters import thd
from suites import _inputs

pytestmark = pytest.mark.import_group("light")


def _multiple(cp: int, tp: int, sp: bool) -> int:
    base = 2 * cp if cp > 1 else 1
    return math.lcm(base, cp * tp) if sp else base


def _check_packed(batch: dict, lengths: list[int], packed: dict, multiple: int) -> None:
    padded = [math.ceil(n / multiple) * multiple for n in lengths]
    bounds = [0]
    for p in padded:
        bounds.append(bounds[-1] + p)
    assert packed["cu_seqlens_padded"] == bounds, "physical boundaries = cumulative aligned lengths"
    if packed["cu_seqlens_unpadded"] is not None:
        real = [0]
        for n in lengths:
            real.append(real[-1] + n)
        assert packed["cu_seqlens_unpadded"] == real
    assert packed["max_seqlen"] == max(padded)
    assert len(packed["tokens"]) == bounds[-1]
    for r, n in enumerate(lengths):
        s = bounds[r]
        assert packed["tokens"][s : s + n] == batch["tokens"][r, :n].tolist(), "tokens concatenated in order"
        assert packed["labels"][s : s + n] == batch["labels"][r, :n].tolist()
        assert packed["loss_mask"][s : s + n] == batch["loss_mask"][r, :n].tolist()
        assert packed["position_ids"][s : s + n] == list(range(n)), "position ids restart per sequence"
        pad = slice(s + n, bounds[r + 1])
        assert all(m == 0 for m in packed["loss_mask"][pad]), "alignment padding must have loss mask 0"
        assert all(lbl == _inputs.IGNORE_INDEX for lbl in packed["labels"][pad]), "alignment padding label = ignore"
    assert sum(packed["loss_mask"]) == float(batch["loss_mask"].sum()), "packing preserves the loss-mask sum"


@pytest.mark.parametrize(
    "seed,rows,width,cp,tp,sp",
    [
        (0, 2, 16, 1, 1, False),
        (1, 4, 24, 1, 1, False),
        (2, 3, 20, 2, 1, False),
        (3, 5, 32, 4, 1, False),
        (4, 4, 17, 2, 2, True),
        (5, 8, 12, 1, 1, False),
    ],
)
def test_pack_right_padded(golden, seed, rows, width, cp, tp, sp):
    batch, lengths = _inputs.right_padded_batch(seed, rows, width)
    multiple = _multiple(cp, tp, sp)
    packed = thd.pack_in_batch(
        batch["tokens"],
        batch["labels"],
        batch["loss_mask"],
        batch["position_ids"],
        pad_token_id=_inputs.PAD_ID,
        pad_to_multiple_of=multiple,
    )
    _check_packed(batch, lengths, packed, multiple)
    golden.check(
        {
            "lengths": lengths,
            "pad_to_multiple_of": multiple,
            "tokens": packed["tokens"],
            "labels": packed["labels"],
            "loss_mask": packed["loss_mask"],
            "position_ids": packed["position_ids"],
            "cu_seqlens_padded": packed["cu_seqlens_padded"],
            "max_seqlen": packed["max_seqlen"],
        }
    )


def test_left_padding_is_refused():
    batch, lengths = _inputs.right_padded_batch(7, 3, 12, min_len=4)
    n = lengths[1]
    batch["tokens"][1] = torch.roll(batch["tokens"][1], shifts=12 - n)  # row 1 becomes left-padded
    with pytest.raises((ValueError, AssertionError, RuntimeError)):
        thd.pack_in_batch(
            batch["tokens"],
            batch["labels"],
            batch["loss_mask"],
            batch["position_ids"],
            pad_token_id=_inputs.PAD_ID,
            pad_to_multiple_of=1,
        )


def test_mismatched_label_shape_is_refused():
    batch, _ = _inputs.right_padded_batch(8, 3, 12, min_len=2)
    with pytest.raises((ValueError, AssertionError, RuntimeError, IndexError)):
        thd.pack_in_batch(
            batch["tokens"],
            batch["labels"][:, :-1],
            batch["loss_mask"],
            batch["position_ids"],
            pad_token_id=_inputs.PAD_ID,
            pad_to_multiple_of=1,
        )


def test_empty_row_is_refused():
    """An all-padding row in a micro-batch is malformed: packing must not silently drop it."""
    batch, _ = _inputs.right_padded_batch(9, 3, 12, min_len=2)
    for key, fill in (
        ("tokens", _inputs.PAD_ID),
        ("labels", _inputs.IGNORE_INDEX),
        ("loss_mask", 0),
        ("position_ids", 0),
    ):
        batch[key][1] = fill
    with pytest.raises((ValueError, AssertionError, RuntimeError)):
        thd.pack_in_batch(
            batch["tokens"],
            batch["labels"],
            batch["loss_mask"],
            batch["position_ids"],
            pad_token_id=_inputs.PAD_ID,
            pad_to_multiple_of=1,
        )
