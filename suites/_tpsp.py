"""Tensor parallelism with sequence parallelism on CPU: MB's packed micro-batches on TP ranks.

MB documents sequence parallelism as a model flag for TP > 1 (docs/parallelisms.md: set
``sequence_parallel=True`` with ``tensor_model_parallel_size`` > 1) and packs offline for any
model; nothing in the docs says packed data and SP exclude each other, so a packed micro-batch
must train under TP with SP as it trains at TP 1. Under SP the model scatters the token
dimension of the packed row over the TP ranks (it must divide by TP), all-gathers it before each
column-parallel layer, and each rank computes its part of the heads and of the vocabulary.

What runs: a gloo world of TP CPU processes (:mod:`harness.suite.adapters.world`), each calling MB's
``gpt_step.forward_step`` on MB's packed micro-batches (offline packed rows, or the THD row of the
direct SFT collate's in-batch packing on the multiple MB's ``ConfigContainer.validate`` chose for
the layout, never one the suite picked) with the tiny ``GPTModel`` built
for that TP size with ``sequence_parallel=True`` and the TP 1 model's weights split as MCore
splits them (so TP 1 and TP are the same model). The reference is MB's TP 1 step on the same
batch, which ``forward_cpu`` holds against MB's unpacked path. Checks, per micro-batch:

* the packed row's width divides by TP (else SP's scatter refuses the row: a crash in training;
  checked before the world runs), and every rank's model gets the TP 1 inputs (tokens, labels,
  position ids, loss mask);
* the ranks' vocabulary parts of the logits, put together, equal the TP 1 logits per trained
  token, and every rank's loss sum and token count are the TP 1 ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.records.impact import Impact
from harness.records.oracle import Invariant, Violation
from harness.suite.adapters import forward as fwd
from harness.suite.adapters import step, symbol
from harness.suite.adapters.world import Layout, rank_groups, run_world
from suites import _forward, _layouts, _sftcases


@dataclass
class TPRankRun:
    """What one TP rank's model received and computed for one micro-batch (picklable)."""

    inputs: dict[str, torch.Tensor]
    logits: torch.Tensor  # [1, t, vocab / TP]: this rank's part of the vocabulary
    loss_sum: float
    num_tokens: float


def split_like(full: dict[str, torch.Tensor], model: torch.nn.Module, tp: int, rank: int) -> dict[str, torch.Tensor]:
    """The TP 1 weights ``full`` as ``model`` (built for TP ``tp``) holds them on TP rank ``rank``:
    a tensor whose shape differs is cut in ``tp`` equal parts along the one dimension that differs
    (MCore's column- and row-parallel layers and its vocabulary-parallel embedding hold contiguous
    parts; the fused QKV weight is laid out per query group, so its contiguous parts are whole groups)."""
    out = {}
    for name, mine in model.state_dict().items():
        if not isinstance(mine, torch.Tensor):
            continue
        whole = full[name]
        differs = [d for d, (a, b) in enumerate(zip(whole.shape, mine.shape)) if a != b]
        if not differs:
            out[name] = whole
            continue
        if len(differs) != 1 or whole.shape[differs[0]] != tp * mine.shape[differs[0]]:
            raise AssertionError(f"{name}: TP 1 shape {tuple(whole.shape)} does not split into TP {tp} {mine.shape}")
        out[name] = whole.chunk(tp, dim=differs[0])[rank]
    return out


def _rank_runs(full: dict[str, torch.Tensor], batches: list[dict[str, Any]]) -> Any:
    def on_rank(_rank: int) -> list[TPRankRun]:
        from megatron.core import parallel_state

        groups = rank_groups()
        tp, rank = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_tensor_model_parallel_rank(),
        )
        gpt = fwd.tiny_gpt(
            seed=_forward.SEED,
            vocab_size=_forward.MODEL_VOCAB,
            tensor_model_parallel_size=tp,
            sequence_parallel=True,
        )
        gpt.load_state_dict(split_like(full, gpt, tp, rank), strict=False)
        model = step.RecordingModel(gpt)
        forward_step = symbol("megatron.bridge.training.gpt_step", "forward_step")
        out = []
        for batch in batches:
            run = step.run_step(forward_step, step.minimal_state(sequence_parallel=True), batch, model, groups)
            out.append(TPRankRun(_layouts.received(run), run.logits, run.loss_sum, run.num_tokens))
        return out

    return on_rank


def misaligned(layout: Layout, tp1: list[step.StepRun]) -> list[Violation]:
    """Micro-batches whose packed width does not divide by TP: SP's scatter refuses such a row (MCore
    asserts), so training crashes on it. Checked before the world runs, so the red names the row MB
    built rather than an assertion inside the model."""
    out = []
    for b, ref in enumerate(tp1):
        width = int(ref.kwargs["input_ids"].shape[-1])
        if width % layout.tp:
            out.append(
                Violation(
                    Invariant.ALIGNMENT,
                    b,
                    None,
                    f"a packed width divisible by TP = {layout.tp}",
                    width,
                    "the row sequence parallelism scatters over the TP ranks",
                    impact=Impact.CRASH,
                )
            )
    return out


def compare(
    layout: Layout, tp1: list[step.StepRun], ranks: list[list[TPRankRun]], tol: _forward.Tolerances
) -> list[Violation]:
    """Every TP rank's run of each micro-batch against the TP 1 run (see the module docstring)."""
    out: list[Violation] = []
    for b, ref in enumerate(tp1):
        want = _layouts.received(ref)
        for rank, per_batch in enumerate(ranks):
            got = per_batch[b]
            for name, invariant in (*_layouts.FIELDS, ("loss_mask", Invariant.LOSS_MASK)):
                if not torch.equal(got.inputs[name], want[name]):
                    out.append(
                        Violation(
                            invariant,
                            b,
                            None,
                            f"{name} as at TP 1",
                            f"{tuple(got.inputs[name].shape)} differing",
                            f"TP rank {rank} of {layout.tp}",
                        )
                    )
            for what, got_v, want_v in (
                ("loss sum", got.loss_sum, ref.loss_sum),
                ("token count", got.num_tokens, ref.num_tokens),
            ):
                if abs(got_v - want_v) > tol.totals_atol + tol.totals_rtol * abs(want_v):
                    out.append(Violation(Invariant.LOSS_TOTALS, b, None, want_v, got_v, f"{what} on TP rank {rank}"))
        logits = torch.cat([per_batch[b].logits for per_batch in ranks], dim=-1)
        if logits.shape != ref.logits.shape:
            out.append(
                Violation(
                    Invariant.LOGITS,
                    b,
                    None,
                    tuple(ref.logits.shape),
                    tuple(logits.shape),
                    "the TP ranks' logits put together",
                )
            )
            continue
        trained = want["loss_mask"].reshape(-1) > 0
        err = (logits[0] - ref.logits[0]).abs().amax(dim=-1)
        for p in torch.nonzero((err > tol.logits) & trained).reshape(-1).tolist()[: _layouts.MAX_SHOWN]:
            out.append(
                Violation(
                    Invariant.LOGITS,
                    b,
                    p,
                    f"|logits - TP 1| <= {tol.logits:g}",
                    f"{float(err[p]):.3g}",
                    f"TP {layout.tp} with SP, vocabulary parts put together",
                )
            )
    return out


def run_tp_sp(case: _sftcases.SFTCase, tp: int, tol: _forward.Tolerances = _forward.FP32) -> _layouts.LayoutResult:
    """``case``'s offline packed micro-batches at TP = ``tp`` with SP against TP 1 (no violations when MB holds)."""
    return run_tp_sp_batches(list(_sftcases.built(case).batches), tp, tol)


def run_tp_sp_batches(
    batches: list[dict[str, Any]], tp: int, tol: _forward.Tolerances = _forward.FP32
) -> _layouts.LayoutResult:
    """MB's packed micro-batches ``batches`` (offline rows, or an in-batch packed collate's THD row)
    at TP = ``tp`` with SP against MB's TP 1 step on the same batches."""
    gpt, _ = _forward.models()
    tp1 = [step.gpt_step(gpt, batch) for batch in batches]
    full = {k: v.detach().clone() for k, v in gpt.gpt.state_dict().items() if isinstance(v, torch.Tensor)}
    layout = Layout(tp=tp)
    widths = [int(ref.kwargs["input_ids"].shape[-1]) for ref in tp1]
    refused = misaligned(layout, tp1)
    if refused:
        return _layouts.LayoutResult(refused, {"widths": widths})
    ranks = run_world(layout, _rank_runs(full, batches))
    golden = {"micro_batches": [{"width": w, "trained": ranks[0][b].num_tokens} for b, w in enumerate(widths)]}
    return _layouts.LayoutResult(compare(layout, tp1, ranks, tol), golden)
