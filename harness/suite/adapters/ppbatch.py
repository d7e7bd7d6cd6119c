"""What MB's ``get_batch`` hands one pipeline stage of a packed micro-batch.

Operation ``stage_batch(batch, pack_size)``, called on a rank of a world with pipeline parallelism
(:mod:`harness.suite.adapters.world`): MB's ``gpt_step.get_batch`` with the rank's real process groups
and a config that says the data is offline packed, then MB's ``get_packed_seq_params`` on the
packed metadata it returned. The answer (:class:`StageBatch`) is what the stage's model would
receive: tokens and position ids (the first stage embeds them), labels and loss mask (the last
stage computes the loss), and the boundaries attention needs (every stage attends).

Eras: ``get_batch(data_iterator, cfg, use_mtp, *, pg_collection, vp_stage)`` (MB's process-group
refactor on) returning six values with the packed metadata last, or (0.5.x) ten with the legacy
boundary tensors (``cu_seqlens``, its argmin, ``max_seqlen``, the unpadded ones) after the
position ids; either goes through MB's own ``get_packed_seq_params``. Older
``get_batch`` signatures (MCore's global parallel state, other return shapes) are not adapted
yet: untestable there, with that reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from harness.suite.adapters import Candidate, NotHere, Operation, symbol
from harness.suite.adapters.step import minimal_state, params_fields
from harness.suite.standins.cuda import pinned_to_cpu

BOUNDARIES = ("cu_seqlens_q", "cu_seqlens_q_padded")


@dataclass
class StageBatch:
    """One stage's view of a micro-batch (picklable: tensors and plain values only)."""

    tensors: dict[str, torch.Tensor | None]  # tokens, labels, loss_mask, position_ids as returned
    boundaries: dict[str, list[int] | None]  # cu_seqlens_q, cu_seqlens_q_padded of the params MB built
    max_seqlen: int | None
    has_params: bool


def _as_list(value: object) -> list[int] | None:
    return None if value is None else [int(x) for x in torch.as_tensor(value).reshape(-1).tolist()]


LEGACY_KEYS = ("cu_seqlens", "cu_seqlens_argmin", "max_seqlen", "cu_seqlens_unpadded", "cu_seqlens_unpadded_argmin")


def packed_metadata(out: tuple[object, ...]) -> object:
    """The packed metadata of a ``get_batch`` answer: the sixth value (a dict), or in the legacy
    shape the boundary tensors that follow the position ids, as the batch keys the builder reads."""
    if len(out) == 6:
        return out[5]
    legacy = dict(zip(LEGACY_KEYS, out[5:]))
    return legacy if legacy.get("cu_seqlens") is not None else None


def _view(out: tuple[Any, ...], build_params: Callable[[Any], Any]) -> StageBatch:
    tokens, labels, loss_mask, _mask, position_ids = out[:5]
    metadata = packed_metadata(out)
    tensors = {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": position_ids}
    tensors = {k: (v.detach().clone() if isinstance(v, torch.Tensor) else None) for k, v in tensors.items()}
    if metadata is None:
        return StageBatch(tensors, dict.fromkeys(BOUNDARIES), None, False)
    params = params_fields(build_params(metadata))
    max_seqlen = params.get("max_seqlen_q")
    return StageBatch(
        tensors,
        {k: _as_list(params.get(k)) for k in BOUNDARIES},
        None if max_seqlen is None else int(torch.as_tensor(max_seqlen).reshape(-1)[0]),
        True,
    )


def _packed_state(pack_size: int) -> Any:
    """``minimal_state`` whose dataset is offline packed (what ``get_batch`` reads to keep boundaries)."""
    return minimal_state(
        enable_offline_packing=True, offline_packing_specs=SimpleNamespace(packed_sequence_size=pack_size)
    )


def _pg_probe() -> Callable[[dict[str, object], int], StageBatch]:
    fn = symbol("megatron.bridge.training.gpt_step", "get_batch")
    if "pg_collection" not in inspect.signature(fn).parameters:
        raise NotHere("get_batch takes no pg_collection")
    build = symbol("megatron.bridge.training.utils.packed_seq_utils", "get_packed_seq_params")
    groups_cls = symbol("megatron.core.process_groups_config", "ProcessGroupCollection")

    def call(batch: Mapping[str, object], pack_size: int) -> StageBatch:
        groups = groups_cls.use_mpu_process_groups()
        with pinned_to_cpu():
            out = fn(iter([dict(batch)]), _packed_state(pack_size).cfg, False, pg_collection=groups)
        return _view(out, build)

    return call


stage_batch = Operation(
    "pp_stage_batch",
    [Candidate("training/gpt_step.get_batch(pg_collection)", _pg_probe)],
    before="get_batch without process-group collections",
)
