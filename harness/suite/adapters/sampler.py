"""MB's batch sampler: which packed rows form each global batch, padding the last one.

``padded_global_batches(total, global_batch_size, ..., data_parallel_rank, data_parallel_size)``:
``MegatronPretrainingBatchSampler`` with ``drop_last=False`` and
``pad_samples_to_global_batch_size=True``, the way MB's data loader builds an epoch on one
data-parallel rank (the sampler takes the rank as an argument, as each rank's loader does; it
reads no process group); an incomplete last global batch is filled with negative indices, which
MB's SFT datasets turn into loss-masked padding rows. ``drop_last=True, pad=False`` is the
sampler's own default (what a loader gets unless the dataset config sets ``drop_last=False``):
the incomplete last global batch is dropped instead.

``pretraining_loader(dataset, dataloader_type, micro_batch_size, rank, size, drop_last=...)``: MB's
loader factory ``build_pretraining_data_loader`` as its data loader builder calls it for a
``dataloader_type`` ("single": ``MegatronPretrainingSampler``, "cyclic":
``MegatronPretrainingRandomSampler``, "batch": the batch sampler above) on one data-parallel rank,
with the dataset's own ``collate_fn``: the index batches of one epoch and a fresh, unread loader;
``consumed_samples`` is where a run resumed from a checkpoint starts (MB's train state's count).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.suite.adapters import Candidate, NotHere, Operation, accepts, symbol
from harness.suite.adapters.mbtypes import Loader


def _batch_sampler() -> Callable[..., list[list[int]]]:
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


@dataclass
class LoaderEpoch:
    """One data-parallel rank's epoch from MB's loader: its index batches, and the loader itself
    (built afresh, unread: the batch sampler advances its position as it is read)."""

    indices: list[list[int]]
    loader: Loader


def _loader_factory() -> Callable[..., LoaderEpoch]:
    build = symbol("megatron.bridge.data.samplers", "build_pretraining_data_loader")

    def call(
        dataset: object,
        dataloader_type: str,
        micro_batch_size: int,
        data_parallel_rank: int = 0,
        data_parallel_size: int = 1,
        *,
        drop_last: bool = True,
        global_batch_size: int | None = None,
        data_sharding: bool = True,
        seed: int = 0,
        consumed_samples: int = 0,
    ) -> LoaderEpoch:
        wanted: dict[str, object] = {
            "dataset": dataset,
            "consumed_samples": consumed_samples,
            "dataloader_type": dataloader_type,
            "micro_batch_size": micro_batch_size,
            "num_workers": 0,
            "data_sharding": data_sharding,
            "collate_fn": getattr(dataset, "collate_fn", None),
            "pin_memory": False,
            "data_parallel_rank": data_parallel_rank,
            "data_parallel_size": data_parallel_size,
            "drop_last": drop_last,
            "global_batch_size": global_batch_size,
            "seed": seed,
        }
        if not drop_last and not accepts(build, "drop_last"):
            raise NotHere("build_pretraining_data_loader takes no drop_last")

        def make() -> Loader:
            return build(**{k: v for k, v in wanted.items() if accepts(build, k)})

        indices = [[int(i) for i in b] for b in make().batch_sampler]
        return LoaderEpoch(indices, make())

    return call


pretraining_loader = Operation(
    "pretraining_loader",
    [Candidate("data/samplers.build_pretraining_data_loader", _loader_factory)],
)
