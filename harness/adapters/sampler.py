"""MB's batch sampler: which packed rows form each global batch, padding the last one.

``padded_global_batches(total, global_batch_size, ..., data_parallel_rank, data_parallel_size)``:
``MegatronPretrainingBatchSampler`` with ``drop_last=False`` and
``pad_samples_to_global_batch_size=True``, the way MB's data loader builds an epoch on one
data-parallel rank (the sampler takes the rank as an argument, as each rank's loader does; it
reads no process group); an incomplete last global batch is filled with negative indices, which
MB's SFT datasets turn into loss-masked padding rows. ``drop_last=True, pad=False`` is the
sampler's own default (what a loader gets unless the dataset config sets ``drop_last=False``):
the incomplete last global batch is dropped instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.adapters import Candidate, NotHere, Operation, accepts, symbol


def _batch_sampler() -> Callable[..., Any]:
    cls = symbol("megatron.bridge.data.samplers", "MegatronPretrainingBatchSampler")
    if not accepts(cls.__init__, "pad_samples_to_global_batch_size"):
        raise NotHere("MegatronPretrainingBatchSampler lacks pad_samples_to_global_batch_size")

    def call(
        total_samples: int,
        global_batch_size: int,
        micro_batch_size: int = 1,
        seed: int = 0,
        data_parallel_rank: int = 0,
        data_parallel_size: int = 1,
        *,
        drop_last: bool = False,
        pad: bool = True,
    ) -> list[list[int]]:
        sampler = cls(
            total_samples=total_samples,
            consumed_samples=0,
            micro_batch_size=micro_batch_size,
            global_batch_size=global_batch_size,
            data_parallel_rank=data_parallel_rank,
            data_parallel_size=data_parallel_size,
            drop_last=drop_last,
            pad_samples_to_global_batch_size=pad,
            **({"seed": seed} if accepts(cls.__init__, "seed") else {}),
        )
        return [[int(i) for i in b] for b in sampler]

    return call


padded_global_batches = Operation(
    "padded_global_batches",
    [
        Candidate("data/samplers.MegatronPretrainingBatchSampler", _batch_sampler),
    ],
)
