"""Reference THD attention under context parallelism: what TE's CP attention computes, on CPU.

With CP > 1 each rank holds a slice of the packed stream (MCore's partition, see
:mod:`harness.suite.standins.thd_partition`) and attention needs keys and values of the whole
sequence. Transformer Engine's CP attention assumes the load-balanced layout over the physical
boundaries it is given (``cu_seqlens_q_padded``): rank ``r`` holds chunks ``r`` and ``2*CP-1-r``
of every sequence. This reference does the same on CPU: it all-gathers K and V over the CP group
(gloo), places every rank's rows at the global positions that layout says they hold, and runs
causal attention per segment in *global* positions, attending only to a segment's real tokens.

So a rank whose slice is not the one the layout names (MB partitioned on other boundaries than
those it hands the model) computes the wrong logits, as it would on a GPU, and the CP suite's
comparison with the CP = 1 run turns red.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

import torch

from harness import features
from harness.suite.adapters import load_module, source_text
from harness.suite.standins import thd_partition
from harness.suite.standins.thd_partition import thd_partitioned_indices


def cp_group() -> ProcessGroup | None:
    """The context-parallel group when one of more than one rank is active here, else None."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    if not dist.is_initialized() or not parallel_state.model_parallel_is_initialized():
        return None
    group = parallel_state.get_context_parallel_group(check_initialized=False)
    return group if group is not None and dist.get_world_size(group) > 1 else None


def _gather(t: torch.Tensor, group: ProcessGroup) -> list[torch.Tensor]:
    import torch.distributed as dist

    out = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, t.contiguous(), group=group)
    return out


def cp_thd_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    segments: list[tuple[int, int, int]],
    physical: torch.Tensor,
    group: ProcessGroup,
) -> torch.Tensor:
    """query/key/value [t_local, heads, dim] -> [t_local, heads*dim]; ``segments`` are global
    (start, physical end, real length) and ``physical`` the boundaries the layout is read from."""
    import torch.distributed as dist

    size, rank = dist.get_world_size(group), dist.get_rank(group)
    t, heads, dim = query.shape
    if key.shape[1] != heads:  # grouped-query attention
        rep = heads // key.shape[1]
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    total = t * size
    where = [thd_partitioned_indices(physical, total, size, r) for r in range(size)]
    keys, values = torch.zeros(total, heads, dim, dtype=key.dtype), torch.zeros(total, heads, dim, dtype=value.dtype)
    for r, (k, v) in enumerate(zip(_gather(key, group), _gather(value, group))):
        keys[where[r]], values[where[r]] = k, v
    mine = where[rank]
    out = torch.zeros_like(query)
    scale = dim**-0.5
    for start, _end, real in segments:
        local = torch.nonzero((mine >= start) & (mine < start + real)).reshape(-1)
        if local.numel() == 0:
            continue
        k = keys[start : start + real].transpose(0, 1)  # [heads, real, dim]
        v = values[start : start + real].transpose(0, 1)
        pos = mine[local] - start
        q = query[local].transpose(0, 1)  # [heads, n, dim]
        scores = torch.matmul(q, k.transpose(1, 2)) * scale
        causal = torch.arange(real).unsqueeze(0) > pos.unsqueeze(1)  # key after query: masked
        scores = scores.masked_fill(causal, float("-inf"))
        out[local] = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(0, 1)
    return out.reshape(t, heads * dim)


def require_partition_reachable() -> None:
    """Untestable where MB's CP partition needs TE itself, not MCore's ``tex`` (the stand-in's seat).

    MB 0.3.1-0.5.1 (``_partition_packed_batch_for_cp(batch, cp_size)``) imports
    ``transformer_engine_torch`` in the function and checks TE's version (``is_te_min_version``):
    CUDA-only code, which a stand-in could only reach by faking TE for all of megatron-core.
    """
    source = source_text(load_module("megatron.bridge.training.gpt_step"))
    if "import transformer_engine_torch" in source and not thd_partition.te_available():
        raise features.missing(
            "cp-partition-through-mcore",
            "CUDA-only: this MB's context-parallel partition imports Transformer Engine's torch extension "
            "and checks its version itself (the CPU stand-in takes the place of MCore's tex only)",
        )
