"""Energon-fed VLM training to the loss: the packed micro-batches through MB's VLM step and loss.

Why apart from :mod:`suites._energon`: the batch checks there need MB's Energon data path only (the
light import group); this needs MB's step, a small real model and the loss (the full one), and it
is shared by the ``energon_dataset`` suite and the Energon exploration space.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harness.records.impact import Impact, fail
from harness.suite.adapters.energon import EnergonBuild, energon_batches
from suites._energon import Case


def unpacked(case: Case, packed: EnergonBuild) -> EnergonBuild:
    """The same samples through MB's loader with in-batch packing off (MB's own unpacked path), as
    many micro-batches as packed."""
    knobs = {k: v for k, v in case.knobs.items() if "in_batch" not in k}
    plain = energon_batches(replace(case, id=case.id + "-unpacked", knobs=knobs).request())
    if len(packed.batches) != len(plain.batches):
        raise fail(Impact.DROPS_TRAINED_TOKEN, f"{len(packed.batches)} packed micro-batches, {len(plain.batches)} not")
    return plain


def require_same_totals(where: str, packed: Any, alone: Any) -> None:
    """MB's loss function totals (loss sum, token count) of a packed step run equal the unpacked
    run's (``wrong-loss-normalisation``); ``packed`` and ``alone`` are :class:`~harness.suite.adapters.step.StepRun`."""
    p, u = packed, alone
    if p.num_tokens != u.num_tokens or abs(p.loss_sum - u.loss_sum) > 1e-4 * max(1.0, abs(u.loss_sum)):
        raise fail(
            Impact.WRONG_LOSS_NORMALISATION,
            f"{where}: MB's loss function gives (loss {p.loss_sum:g}, {p.num_tokens:g} tokens) packed, "
            f"(loss {u.loss_sum:g}, {u.num_tokens:g} tokens) unpacked",
        )


def check_step(case: Case, packed: EnergonBuild) -> None:
    """Energon-fed VLM training to the loss: each micro-batch MB's loader packed in batch (``packed``)
    goes through MB's ``vlm_step.forward_step`` into a small real model (MCore's GPTModel on CPU with
    a reference THD attention; the images' embeddings are not part of it) and MB's loss function,
    beside the same samples through the loader without packing (MB's own unpacked path): the same
    trained tokens with the same per-token losses (``wrong-logits``), the same loss sum and token
    count (``wrong-loss-normalisation``), and no host read of a device tensor in the step."""
    import torch

    from harness.suite.adapters import hostsync, step, vlmstep
    from suites import _forward

    plain = unpacked(case, packed)
    _, model = _forward.models()
    forward = vlmstep._vlm_forward()
    on = step.minimal_state(enable_in_batch_packing=True, defer_in_batch_packing_to_step=False, sequence_parallel=False)
    off = step.minimal_state(enable_in_batch_packing=False)
    for b, (pb, ub) in enumerate(zip(packed.batches, plain.batches, strict=True)):
        p, u = step.run_step(forward, on, pb, model), step.run_step(forward, off, ub, model)
        if p.host_reads:  # MB's step reads a device tensor back on the host: every micro-batch waits
            raise fail(Impact.PERF_CONTRACT, f"micro-batch {b}: {hostsync.describe(p.host_reads)}")

        def trained(run: step.StepRun) -> list[float]:
            mask = run.loss_mask if run.loss_mask is not None else torch.ones_like(run.token_loss)
            return sorted(round(float(x), 4) for x, m in zip(run.token_loss.reshape(-1), mask.reshape(-1)) if m)

        if trained(p) != trained(u):
            raise fail(
                Impact.WRONG_LOGITS,
                f"micro-batch {b}: packed trains {len(trained(p))} tokens, unpacked {len(trained(u))}, "
                "their per-token losses differ",
            )
        require_same_totals(f"micro-batch {b}", p, u)
