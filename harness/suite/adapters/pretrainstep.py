"""What MB's ``gpt_step.get_batch`` hands the model of a pretraining micro-batch: how it may attend.

Operation ``pretrain_step_attention(samples, dataset_config)``: the samples collated as MB's
pretraining loader collates them (megatron-core's ``GPTDataset`` has no ``collate_fn``, so the
loader uses torch's default collate), then MB's ``gpt_step.get_batch`` in a world of one (gloo,
MCore's groups, :func:`harness.suite.adapters.forward.init_cpu_parallel`) with the run's real
``GPTDatasetConfig`` as ``cfg.dataset``: its ``skip_getting_attention_mask_from_dataset`` decides
whether the dataset's attention mask reaches the model. The answer is what the model's attention
works from: the mask (None: the attention backend's own causal mask over the whole row), the
boundaries of the ``PackedSeqParams`` MB builds from packed metadata when the batch carries any
(megatron-core's ``inter_document_masking``), and the position ids. Whether the attention kernel
honours a mask is the model's concern (the forward suites), not the step's.

Eras: ``get_batch(data_iterator, cfg, use_mtp, *, pg_collection, ...)``, as
:mod:`harness.suite.adapters.ppbatch`; before ea7219779 (2025-11-26) ``get_batch(data_iterator, cfg, use_mtp)``
over megatron-core's global parallel state; older signatures: untestable, with that reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from harness.suite.adapters import Candidate, NotHere, Operation, symbol
from harness.suite.adapters.forward import init_cpu_parallel, mb_packed_seq_params
from harness.suite.adapters.mbtypes import PackedSeqParams
from harness.suite.adapters.ppbatch import packed_metadata
from harness.suite.adapters.step import mcore_call_matches, minimal_state, params_fields
from harness.suite.standins.cuda import pinned_to_cpu


@dataclass
class StepAttention:
    attention_mask: torch.Tensor | None  # megatron's convention: True = may not attend
    boundaries: list[int] | None  # cu_seqlens_q of the PackedSeqParams MB builds (None: no packed metadata)
    position_ids: torch.Tensor | None


def _attention(
    get: Callable[[Iterator[object], object], Any], build: Callable[[object], PackedSeqParams]
) -> Callable[[list[dict[str, object]], object], StepAttention]:
    """The operation over one era's ``get_batch`` (``get(iterator, cfg)``) and its ``PackedSeqParams`` builder."""

    def call(samples: list[dict[str, object]], dataset_config: object) -> StepAttention:
        from torch.utils.data import default_collate

        init_cpu_parallel()
        state = minimal_state()
        state.cfg.dataset = dataset_config
        batch = default_collate(samples)
        with pinned_to_cpu():
            out = get(iter([batch]), state.cfg)
        mask, position_ids, metadata = out[3], out[4], packed_metadata(out)
        boundaries = None
        if metadata is not None:
            cu = params_fields(build(metadata)).get("cu_seqlens_q")
            boundaries = None if cu is None else [int(x) for x in torch.as_tensor(cu).reshape(-1).tolist()]
        return StepAttention(
            None if mask is None else mask.detach().clone(),
            boundaries,
            None if position_ids is None else position_ids.detach().clone(),
        )

    return call


def _probe() -> Callable[[list[dict[str, object]], object], StepAttention]:
    fn = symbol("megatron.bridge.training.gpt_step", "get_batch")
    if "pg_collection" not in inspect.signature(fn).parameters:
        raise NotHere("get_batch takes no pg_collection")
    groups_cls = symbol("megatron.core.process_groups_config", "ProcessGroupCollection")
    build = symbol("megatron.bridge.training.utils.packed_seq_utils", "get_packed_seq_params")
    mcore_call_matches("megatron.bridge.training.gpt_step", "get_batch_on_this_cp_rank", "megatron.core.utils")
    return _attention(lambda it, cfg: fn(it, cfg, False, pg_collection=groups_cls.use_mpu_process_groups()), build)


def _probe_mpu() -> Callable[[list[dict[str, object]], object], StepAttention]:
    """Before 2025-11-26 (ea7219779): ``get_batch(data_iterator, cfg, use_mtp)``, megatron-core's global
    parallel state deciding the pipeline stage and the CP slice (a world of one here as there)."""
    fn = symbol("megatron.bridge.training.gpt_step", "get_batch")
    if list(inspect.signature(fn).parameters)[:3] != ["data_iterator", "cfg", "use_mtp"]:
        raise NotHere("get_batch is not get_batch(data_iterator, cfg, use_mtp)")
    _, build = mb_packed_seq_params.resolved
    mcore_call_matches("megatron.bridge.training.gpt_step", "get_batch_on_this_cp_rank", "megatron.core.utils")
    return _attention(lambda it, cfg: fn(it, cfg, False), build)


pretrain_step_attention = Operation(
    "pretrain_step_attention",
    [
        Candidate("training/gpt_step.get_batch(pg_collection)", _probe),
        Candidate("training/gpt_step.get_batch(data_iterator, cfg, use_mtp)", _probe_mpu),
    ],
    before="get_batch without process-group collections",
)
