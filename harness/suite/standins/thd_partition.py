"""A named CPU stand-in for Transformer Engine's THD context-parallel partition kernel.

MCore partitions a packed (THD) batch across context-parallel ranks with
``tex.thd_get_partitioned_indices(cu_seqlens, total_tokens, world_size, rank)``
(``megatron/core/utils.py``, per-document balancing), a CUDA kernel of Transformer Engine. On a
machine without TE, ``megatron.core.utils.tex`` is ``None`` and MB's CP path cannot run, so a
packing bug in it (the partition computed on the wrong boundaries) could never turn red.

:func:`thd_partitioned_indices` is the kernel's documented load-balanced scheme, written from
TE's ``thd_partition_indices_kernel`` (``transformer_engine/common/fused_attn/thd_utils``):

* every sequence (``cu_seqlens[i]..cu_seqlens[i+1]``) is cut in ``2*CP`` equal chunks (its
  length must be divisible by ``2*CP``; TE asserts it), and rank ``r`` holds chunks ``r`` and
  ``2*CP-1-r`` of every sequence, in stream order;
* the output has ``total_tokens / CP`` indices (``total_tokens`` must be divisible by ``2*CP``);
  output slots past ``cu_seqlens[-1] / CP`` belong, as in the kernel's binary search, to the last
  sequence, so boundaries that stop short of the stream give indices that repeat or run past it
  (the CP suite checks that the ranks' slices are the stream, each position once).

``tests/test_layouts.py`` checks the scheme's properties on CPU and, on a machine with TE
and CUDA, that it equals the kernel index for index (untestable elsewhere, never passed).
:func:`installed` puts the stand-in where MCore looks for ``tex`` for the duration of a call,
only when TE is absent, and records its use (reports list stand-ins).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator
from types import SimpleNamespace

import torch

from harness.suite import standins

NAME = "te-thd-partition"


class PartitionRefused(ValueError):
    """What TE's kernel asserts on: a length the load-balanced scheme cannot split."""


def thd_partitioned_indices(cu_seqlens: torch.Tensor, total_tokens: int, world_size: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s indices into a packed stream of ``total_tokens`` (see the module docstring)."""
    bounds = [int(x) for x in torch.as_tensor(cu_seqlens).reshape(-1).tolist()]
    step = 2 * world_size
    if total_tokens % step:
        raise PartitionRefused(f"total tokens {total_tokens} not divisible by 2*CP = {step}")
    bad = [b for b in bounds if b % step]
    if bad:
        raise PartitionRefused(f"cu_seqlens {bounds} hold offsets not divisible by 2*CP = {step} ({bad})")
    return _indices(tuple(bounds), total_tokens, world_size, rank).to(torch.as_tensor(cu_seqlens).device)


@functools.lru_cache(maxsize=256)
def _indices(bounds: tuple[int, ...], total_tokens: int, world_size: int, rank: int) -> torch.Tensor:
    """The kernel's arithmetic, vectorised (every attention layer of every rank asks again)."""
    local = torch.tensor(bounds, dtype=torch.long) // world_size
    slot = torch.arange(total_tokens // world_size, dtype=torch.long)
    # TE's binary_search over the local offsets: the last sequence starting at or before the slot,
    # the last sequence for slots past the end (searchsorted, clamped to the last sequence)
    seq = (torch.searchsorted(local, slot, right=True) - 1).clamp(0, max(0, len(bounds) - 2))
    start = local[seq]
    seq_len = local[(seq + 1).clamp(max=len(bounds) - 1)] - start
    index = slot - start
    offset = torch.where(index < seq_len // 2, rank, (world_size - 1) * 2 - rank)
    return index + start * world_size + seq_len // 2 * offset


def te_available() -> bool:
    """Whether MCore found Transformer Engine's torch extension (then the kernel runs, not this)."""
    return getattr(importlib.import_module("megatron.core.utils"), "tex", None) is not None


@contextlib.contextmanager
def installed(module: str = "megatron.core.utils") -> Iterator[None]:
    """``module``'s ``tex`` answers ``thd_get_partitioned_indices`` for the call's duration.

    Only where ``module`` has no real ``tex``: MCore's ``None`` when TE is absent, or the import
    stand-in :mod:`harness.suite.standins.te` gave a module that imports TE's extension unguarded (Wan's
    ``diffusion/models/wan/utils.py`` in MB 0.4-0.5). Anything else asked of the stand-in raises, so
    code that needs more of TE stays untestable rather than running on a guess.
    """
    from harness.suite.standins import te

    owner = importlib.import_module(module)
    found = getattr(owner, "tex", None)
    if found is not None and not te.is_standin(found):
        yield
        return

    def _partition(cu_seqlens: torch.Tensor, total_tokens: int, world_size: int, rank: int) -> torch.Tensor:
        standins.record(NAME)
        return thd_partitioned_indices(cu_seqlens, int(total_tokens), int(world_size), int(rank))

    setattr(owner, "tex", SimpleNamespace(thd_get_partitioned_indices=_partition))  # noqa: B010
    try:
        yield
    finally:
        setattr(owner, "tex", found)  # noqa: B010
