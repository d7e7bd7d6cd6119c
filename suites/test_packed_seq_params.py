"""Building MCore ``PackedSeqParams`` from a packed batch.

Documented contract: offline packed batches carry ``cu_seqlens`` padded with a ``-1``
sentinel (and optionally ``cu_seqlens_argmin``) that the builder strips; with
``pad_seq_to_mult`` the batch also carries ``cu_seqlens_unpadded`` and the params then hold the
real-token boundaries in ``cu_seqlens_q`` and the physical ones in ``cu_seqlens_q_padded``;
``qkv_format`` is ``"thd"``; ``max_seqlen`` is passed through.
"""

from __future__ import annotations

import pytest
import torch

from harness.adapters import thd

pytestmark = pytest.mark.import_group("light")


def _legacy_batch(
    bounds: list[int], sentinels: int, max_seqlen: int, argmin: bool = False, unpadded: list[int] | None = None
) -> dict:
    batch = {
        "cu_seqlens": torch.tensor([bounds + [-1] * sentinels], dtype=torch.int32),
        "max_seqlen": torch.tensor([[max_seqlen]], dtype=torch.int32),
    }
    if argmin:
        batch["cu_seqlens_argmin"] = torch.tensor([[len(bounds)]])
    if unpadded is not None:
        batch["cu_seqlens_unpadded"] = torch.tensor([unpadded + [-1] * sentinels], dtype=torch.int32)
    return batch


@pytest.mark.parametrize(
    "bounds,sentinels,argmin",
    [
        ([0, 5, 9, 12], 2, False),
        ([0, 5, 9, 12], 2, True),
        ([0, 7], 5, False),
        ([0, 3, 4, 10, 16, 31, 32], 1, True),
    ],
    ids=["3seq-2sentinels", "3seq-2sentinels-argmin", "1seq-5sentinels", "6seq-1sentinel-argmin"],
)
def test_offline_sentinel_stripped(golden, bounds, sentinels, argmin):
    max_seqlen = max(b - a for a, b in zip(bounds, bounds[1:]))
    params = thd.packed_seq_params(_legacy_batch(bounds, sentinels, max_seqlen, argmin))
    assert params["qkv_format"] == "thd"
    assert params["cu_seqlens_q"] == bounds, "sentinel -1 entries must be stripped, real boundaries kept"
    assert params["cu_seqlens_kv"] == bounds
    assert params["max_seqlen_q"] == max_seqlen
    golden.check(params)


@pytest.mark.parametrize(
    "unpadded,padded",
    [
        ([0, 5, 9, 12], [0, 8, 12, 16]),
        ([0, 1, 2, 3], [0, 4, 8, 12]),
        ([0, 13], [0, 16]),
    ],
    ids=["3seq-mult4", "1token-seqs-mult4", "1seq-mult16"],
)
def test_offline_padded_and_unpadded(golden, unpadded, padded):
    params = thd.packed_seq_params(_legacy_batch(padded, 3, 8, unpadded=unpadded))
    assert params["cu_seqlens_q"] == unpadded, "cu_seqlens_q are the real-token boundaries"
    assert params["cu_seqlens_q_padded"] == padded, "cu_seqlens_q_padded are the physical boundaries"
    assert params["cu_seqlens_kv_padded"] == padded
    golden.check(params)
