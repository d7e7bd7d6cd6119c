"""MB's VLM step with in-batch packing, as each era does it: collate-time THD keys read by
``vlm_step.get_batch`` (v0.6+), or step-time packing inside ``vlm_step`` (v0.4-v0.5); and the
in-batch padding multiples (documented, and the one MB's own config finalisation chooses).

Why apart from :mod:`.step`: ``gpt_step`` and its recording model are shared by every forward
case; the VLM path adds an era switch and the multiples only the in-batch suites use.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.suite.adapters import Candidate, NotHere, Operation, Untestable, source_text, symbol, thd
from harness.suite.adapters.mbtypes import Batch, ForwardStep
from harness.suite.adapters.step import RecordingModel, StepRun, minimal_state, run_step, sized_groups


def in_batch_multiple(cp: int, tp: int = 1, sp: bool = False) -> int:
    """The documented in-batch padding multiple: ``lcm(2*CP if CP > 1, CP*TP under SP with TP > 1)``."""
    return math.lcm(2 * cp if cp > 1 else 1, cp * tp if sp and tp > 1 else 1)


def mb_in_batch_multiple(cp: int, tp: int = 1, sp: bool = False) -> int:
    """The multiple MB's config finalisation writes for in-batch packing under this layout (what a
    user's collate gets); the oracle checks the packed segments against :func:`in_batch_multiple`."""
    from harness.suite.adapters import cp as cp_ops

    out = cp_ops.collate_padding_multiple(cp, tp, sp, in_batch=True)
    return cp_ops.packing_multiple(out, f"the layout CP{cp} TP{tp} SP{sp}")


@dataclass(frozen=True)
class VLMRun:
    packed: StepRun  # with in-batch packing
    unpacked: StepRun  # the same right-padded batch without it (the reference)


def _vlm_forward() -> ForwardStep:
    return symbol("megatron.bridge.training.vlm_step", "forward_step")


def _collate_time_probe() -> Callable[..., VLMRun]:
    fn = _vlm_forward()
    if "cu_seqlens_q" not in source_text(symbol("megatron.bridge.training.vlm_step", "get_batch")):
        raise NotHere("vlm_step.get_batch does not read collate-time THD keys (cu_seqlens_q)")
    collate = thd.in_batch_collate.resolved[1]  # NotHere/Untestable: try the step-time era

    def call(model: RecordingModel, batch: Batch, *, pad_token_id: int, cp: int, tp: int, sp: bool) -> VLMRun:
        return collate_time_run(fn, collate, model, batch, pad_token_id=pad_token_id, cp=cp, tp=tp, sp=sp)

    return call


def collate_time_run(
    fn: ForwardStep,
    collate: Callable[..., Batch],
    model: RecordingModel,
    batch: Batch,
    *,
    pad_token_id: int,
    cp: int,
    tp: int,
    sp: bool,
) -> VLMRun:
    """``batch`` packed by MB's in-batch ``collate`` (on the multiple MB's config chooses for the layout)
    through step ``fn`` as a user's config with collate-time packing runs it, and the right-padded batch
    through ``fn`` unpacked: every step that reads the collate's THD keys (vlm, LLaVA, Nemotron Omni)."""
    packed_batch = collate(dict(batch), pad_token_id=pad_token_id, pad_to_multiple_of=mb_in_batch_multiple(cp, tp, sp))
    packed = run_step(
        fn,
        minimal_state(enable_in_batch_packing=True, defer_in_batch_packing_to_step=False, sequence_parallel=sp),
        packed_batch,
        model,
    )
    unpacked = run_step(fn, minimal_state(enable_in_batch_packing=False), batch, model)
    return VLMRun(packed, unpacked)


def _step_time_probe() -> Callable[..., VLMRun]:
    fn = _vlm_forward()
    symbol("megatron.bridge.training.vlm_step", "pack_batch_sequences")
    if "pack_sequences_in_batch" not in source_text(symbol("megatron.bridge.training.vlm_step", "get_batch")):
        raise NotHere("vlm_step.get_batch has no step-time in-batch packing (pack_sequences_in_batch)")

    def call(model: RecordingModel, batch: Batch, *, pad_token_id: int, cp: int, tp: int, sp: bool) -> VLMRun:
        packed = run_step(
            fn,
            minimal_state(pack_sequences_in_batch=True, sequence_parallel=sp),
            batch,
            model,
            groups=sized_groups(cp, tp),
        )
        unpacked = run_step(fn, minimal_state(pack_sequences_in_batch=False), batch, model)
        return VLMRun(packed, unpacked)

    return call


def _untestable_collate_lookup(probe: Callable[[], Any]) -> Callable[[], Any]:
    """A collate-time era whose packer cannot be found is not this era: try the next candidate."""

    @functools.wraps(probe)
    def wrapped() -> object:
        try:
            return probe()
        except Untestable as exc:
            raise NotHere(str(exc)) from exc

    return wrapped


vlm_in_batch = Operation(
    "vlm_in_batch_step",
    [
        Candidate(
            "collate-time in-batch packing + training/vlm_step (v0.6+)", _untestable_collate_lookup(_collate_time_probe)
        ),
        Candidate("training/vlm_step step-time packing (v0.4-v0.5)", _step_time_probe),
    ],
    feature="in-batch-packing",
)
"""``vlm_in_batch(model, right_padded_batch, pad_token_id=, cp=, tp=, sp=)``: the batch through MB's
VLM step with in-batch packing as the era does it, and without packing (the reference)."""


__all__ = ["VLMRun", "collate_time_run", "in_batch_multiple", "mb_in_batch_multiple", "vlm_in_batch"]
