"""Packed micro-batches through MB's steps that document packing as unsupported: refused, never one sequence.

The diffusion step: ``DGPTStep`` (Nemotron-Labs-Diffusion's training step) raises "Packed sequence
support is not currently implemented for DGPTStep" for a packed batch, and builds no
``PackedSeqParams``: a packed row that reaches its model is one sequence to attention, every token
after the first document attending across documents. So a packed micro-batch must be refused before
the model runs. What MB's packed SFT collate produces (its boundaries under whatever keys the era
writes) goes through MB's step unchanged; the model is a double that stops the step at its call
(harness/suite/adapters/familystep.py says why).

Control: an unpacked example (MB's own unpacked dataset, collated alone) reaches the model, so a
refusal is told from a step that never gets there.

Qwen3-Omni's step: it raises "Qwen3-Omni packed sequence support is not implemented yet" when the
dataset config enables in-batch packing, and builds no ``PackedSeqParams`` either. Right-padded chat
micro-batches of MB's unpacked examples packed by MB's in-batch collate (what that config makes the
collate do) go through it with the flag on: refused, or a row of several documents reaching its
model without boundaries is ``cross-document-attention``. Control: the same micro-batch unpacked,
flag off, reaches the model.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import torch

from harness.errors import Untestable
from harness.records.impact import Impact, fail
from harness.suite.adapters import familystep, needs, thd
from harness.suite.oracle import tokenizer
from suites import _forward, _sftcases

#: what MB's diffusion step says when it refuses a packed batch
REFUSAL = "Packed sequence support is not currently implemented"
#: what MB's Qwen3-Omni step says when it refuses in-batch packing
OMNI_REFUSAL = "Qwen3-Omni packed sequence support is not implemented yet"
_BOUNDARY_KEYS = ("cu_seqlens_q", "cu_seqlens")


def documents(batch: dict[str, Any]) -> int:
    """How many documents the packed row holds, by the collate's own boundaries (either era's keys; the
    legacy ones end in ``-1`` sentinels)."""
    for key in _BOUNDARY_KEYS:
        value = batch.get(key)
        if isinstance(value, torch.Tensor):
            bounds = [int(x) for x in value.reshape(-1).tolist() if int(x) >= 0]
            return sum(1 for a, b in itertools.pairwise(bounds) if b > a)
    raise AssertionError(f"a packed micro-batch without boundaries (keys: {sorted(batch)})")


def _judge(step: str, i: int, kwargs: dict[str, Any], batch: dict[str, Any], n: int) -> None:
    """A packed row of ``n`` documents reached ``step``'s model: with no boundaries and no mask, every
    token after the first document attends across documents."""
    if n < 2:
        return
    if kwargs.get("packed_seq_params") is not None or kwargs.get("attention_mask") is not None:
        raise Untestable(
            f"MB's {step} now hands its model boundaries or a mask for a packed row; judging them needs its "
            "model, which the harness does not run"
        )
    key = next(k for k in _BOUNDARY_KEYS if k in batch)
    raise fail(
        Impact.CROSS_DOCUMENT_ATTENTION,
        f"micro-batch {i}: MB's {step} handed its model a packed row of {n} documents with no boundaries and "
        f"no attention mask: every token after the first document attends across documents (the batch's "
        f"boundaries are {key!r})",
    )


def _refused(step: str, i: int, batch: dict[str, Any], run: Callable[[], dict[str, Any]], said: str) -> bool:
    """Micro-batch ``i`` through ``step`` (``run``): True where MB refused it as documented (its message
    says ``said``); else what reached the model is judged (:func:`_judge`). Any other exception is MB's."""
    try:
        kwargs = run()
    except (ValueError, NotImplementedError) as exc:
        if said not in str(exc):
            raise
        return True
    _judge(step, i, kwargs, batch, documents(batch))
    return False


def dgpt(case: _sftcases.SFTCase) -> int:
    """Every packed micro-batch of ``case`` through MB's diffusion step; the number MB refused."""
    needs(familystep.dgpt_step)
    b = _sftcases.built(case)
    gpt, _ = _forward.models()
    mask_id = tokenizer.vocab()[tokenizer.UNK]
    ds = b.build.prep_reference
    if ds is None:
        raise RuntimeError(f"{case.id}: MB's preparation left no unpacked reference dataset")
    familystep.dgpt_step(gpt.gpt, ds.collate_fn([ds[0]]), mask_id)  # the control: unpacked reaches the model
    refused = 0
    for i, batch in enumerate(b.batches):
        run = functools.partial(familystep.dgpt_step, gpt.gpt, batch, mask_id)
        refused += _refused("diffusion step (DGPTStep)", i, batch, run, REFUSAL)
    return refused


def qwen3_omni(case: _forward.VLMCase) -> int:
    """Every micro-batch of ``case``'s source, packed by MB's in-batch collate, through MB's Qwen3-Omni
    step with in-batch packing on; the number MB refused."""
    needs(familystep.qwen3_omni_step, thd.in_batch_collate)
    b = _forward.unpacked(case.source)
    gpt, _ = _forward.models()
    pad_id = b.special_ids.get("pad_id")
    if pad_id is None:
        raise AssertionError("the tokenizer reports no pad id")
    refused = 0
    for i, start in enumerate(range(0, len(b.examples), case.micro_batch)):
        batch = _forward.right_padded(b.examples[start : start + case.micro_batch], pad_id)
        familystep.qwen3_omni_step(gpt.gpt, batch, False)  # the control: unpacked reaches the model
        packed = thd.in_batch_collate(dict(batch), pad_token_id=pad_id, pad_to_multiple_of=case.multiple)
        run = functools.partial(familystep.qwen3_omni_step, gpt.gpt, packed, True)
        refused += _refused("Qwen3-Omni step", i, packed, run, OMNI_REFUSAL)
    return refused
