"""What the forward cases compare across devices and tolerances: the inputs no device changes, and
the negative control that proves a tolerance can see a wrong boundary.

Why apart from suites/_forward.py: running MB's steps against the unpacked path is one job; the
GPU suite (and the GPU readiness tests) also need to say that the device received what the CPU
received (:func:`inputs_golden`, :func:`same_inputs`) and that the tolerance the comparison used
would have seen a boundary moved by one token (:func:`wrong_boundary_error`, :func:`check_control`).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import torch

from harness.suite.adapters import step
from harness.suite.oracle import stepcheck
from suites._forward import CONTROL_MARGIN, ForwardResult, Tolerances
from suites._model_view import loss_mask_of, params_view


def inputs_golden(result: ForwardResult) -> dict[str, Any]:
    """What MB handed the model per packed micro-batch that no device changes: the boundaries,
    ``max_seqlen``, the positions that train and how many (the GPU suite's golden, recorded on
    the CPU and compared with what the GPU run's model received)."""
    rows = []
    for run in result.runs:
        view = params_view(run.kwargs.get("packed_seq_params"))
        bounds = view.boundaries if view else {}
        mask = loss_mask_of(run).reshape(-1).tolist()
        rows.append(
            {
                "cu_seqlens_q": bounds.get("cu_seqlens_q"),
                "cu_seqlens_q_padded": bounds.get("cu_seqlens_q_padded"),
                "max_seqlen_q": view.max_seqlen_q if view else None,
                "trained_positions": [i for i, m in enumerate(mask) if m],
                "num_tokens": run.num_tokens,
            }
        )
    return {"micro_batches": rows}


def _moved(params: Any, k: int) -> Any:
    """``params`` with interior boundary ``k`` one token earlier in every boundary field (the
    previous segment's last slot now starts the next one), ``max_seqlen`` still covering all."""
    changed: dict[str, Any] = {}
    longest = 0
    for name in stepcheck.BOUNDARY_FIELDS:
        value = getattr(params, name, None)
        if value is None:
            continue
        moved = value.clone()
        moved.reshape(-1)[k] -= 1
        changed[name] = moved
        flat = moved.reshape(-1).tolist()
        longest = max(longest, max(b - a for a, b in itertools.pairwise(flat)))
    for name in ("max_seqlen_q", "max_seqlen_kv"):
        value = getattr(params, name, None)
        if value is not None:
            changed[name] = torch.as_tensor(longest).to(value) if isinstance(value, torch.Tensor) else longest
    return dataclasses.replace(params, **changed)


def wrong_boundary_error(result: ForwardResult, model: step.RecordingModel) -> float | None:
    """Negative control on real batches: the largest real-token logit error against the unpacked
    runs when one boundary of a packed micro-batch is moved by a token (None: no micro-batch
    holds two examples with a real token to spare). A tolerance below this sees a wrong boundary."""
    for r, (run, row) in enumerate(zip(result.runs, result.report.rows)):
        params = run.kwargs.get("packed_seq_params")
        segs = row.segments
        k = next((i for i in range(1, len(segs)) if segs[i - 1].real >= 2), None)
        if params is None or k is None:
            continue
        logits, token_loss = step.call_model(model, {**run.kwargs, "packed_seq_params": _moved(params, k)})
        outputs = stepcheck.TokenOutputs(logits[0].tolist(), token_loss.reshape(logits.shape[0], -1)[0].tolist())
        _, errs = stepcheck.check_outputs(
            r, [], segs, outputs, result.refs, logit_atol=float("inf"), loss_atol=float("inf")
        )
        return errs.logits
    return None


def check_control(result: ForwardResult, control: float | None, tol: Tolerances) -> str:
    """The sentence a reader needs to trust the tolerance (both numbers); raises when the
    tolerance could not see a wrong boundary (the harness's problem: an ERROR, not MB's)."""
    note = (
        f"{tol.name}: packed vs unpacked, largest real-token logit error {result.errors.logits:.3g} "
        f"(tolerance {tol.logits:g}); one boundary moved by a token: "
        + ("no micro-batch to move a boundary in" if control is None else f"{control:.3g}")
    )
    if control is not None and control <= CONTROL_MARGIN * tol.logits:
        raise ToleranceBlind(f"the {tol.name} tolerance cannot see a wrong boundary: {note}")
    return note


class ToleranceBlind(RuntimeError):
    """The negative control moved less than the tolerance allows: the check cannot judge MB."""


def same_inputs(cpu: ForwardResult, device: ForwardResult, device_name: str) -> None:
    """The model received the same boundaries and trained positions on ``device`` as on the CPU
    (what the golden, recorded on the CPU, pins)."""
    want, got = inputs_golden(cpu)["micro_batches"], inputs_golden(device)["micro_batches"]
    if want != got:
        from suites._explain import first_difference

        raise AssertionError(
            f"MB handed the model different inputs on {device_name} than on the CPU: "
            + first_difference(want, got, "micro-batch")
        )
