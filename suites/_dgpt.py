"""MB's offline packed micro-batches through MB's diffusion step, which documents packing as unsupported.

``DGPTStep`` (Nemotron-Labs-Diffusion's training step) raises "Packed sequence support is not currently
implemented for DGPTStep" for a packed batch, and builds no ``PackedSeqParams``: a packed row that
reaches its model is one sequence to attention, every token after the first document attending across
documents. So a packed micro-batch must be refused before the model runs. What MB's packed SFT
collate produces (its boundaries under whatever keys the era writes) goes through MB's step unchanged;
the model is a double that stops the step at its call (harness/adapters/familystep.py says why).

Control: an unpacked example (MB's own unpacked dataset, collated alone) reaches the model, so a
refusal is told from a step that never gets there.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from harness.adapters import familystep, needs
from harness.errors import Untestable
from harness.oracle import tokenizer
from harness.oracle.impact import Impact, fail
from suites import _forward, _sftcases

#: what MB's diffusion step says when it refuses a packed batch
REFUSAL = "Packed sequence support is not currently implemented"
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


def check(case: _sftcases.SFTCase) -> int:
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
        n = documents(batch)
        try:
            kwargs = familystep.dgpt_step(gpt.gpt, batch, mask_id)
        except ValueError as exc:
            if REFUSAL not in str(exc):
                raise
            refused += 1
            continue
        if n < 2:
            continue
        if kwargs.get("packed_seq_params") is not None or kwargs.get("attention_mask") is not None:
            raise Untestable(
                "MB's diffusion step now hands its model boundaries or a mask for a packed row; judging them "
                "needs the diffusion model, which the harness does not run"
            )
        key = next(k for k in _BOUNDARY_KEYS if k in batch)
        raise fail(
            Impact.CROSS_DOCUMENT_ATTENTION,
            f"micro-batch {i}: MB's diffusion step (DGPTStep) handed its model a packed row of {n} documents "
            "with no boundaries and no attention mask: every token after the first document attends across "
            f"documents. The step refuses packed batches by the key 'cu_seqlens'; this batch's boundaries are {key!r}",
        )
    return refused
