"""The oracle's view of what MB's step handed the model: packed rows, ``PackedSeqParams``, outputs.

A recorded step call (:class:`harness.suite.adapters.step.StepRun`) holds tensors in whatever form the
era's step builds them; the checks of :mod:`harness.suite.oracle.stepcheck` and
:mod:`harness.suite.oracle.differential` read plain lists. Why apart from suites/_forward.py: the
forward cases, the device comparison (suites/_forward_control.py) and the layout worlds
(suites/_layouts.py) all read a step call the same way.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import step
from harness.suite.oracle import differential, stepcheck


def _rows(t: torch.Tensor | None) -> list[list[Any]]:
    if t is None:
        return []
    return t.reshape(t.shape[0], -1).tolist() if t.dim() > 1 else [t.tolist()]


def _int(value: Any) -> int | None:
    if value is None:
        return None
    return int(value.reshape(-1)[0].item()) if isinstance(value, torch.Tensor) else int(value)


def params_view(params: Any) -> stepcheck.ParamsView | None:
    if params is None:
        return None
    f = step.params_fields(params)
    bounds: dict[str, list[int] | None] = {}
    dtypes: dict[str, str] = {}
    ndims: dict[str, int] = {}
    for name in stepcheck.BOUNDARY_FIELDS:
        v = f.get(name)
        bounds[name] = None if v is None else [int(x) for x in torch.as_tensor(v).reshape(-1).tolist()]
        if isinstance(v, torch.Tensor):
            dtypes[name] = batch_ops.dtype_name(v) or "?"
            ndims[name] = v.dim()
    return stepcheck.ParamsView(
        getattr(params, "qkv_format", None),
        bounds,
        dtypes,
        ndims,
        _int(f.get("max_seqlen_q")),
        _int(f.get("max_seqlen_kv")),
        step.extra_fields(params),
    )


def loss_mask_of(run: step.StepRun) -> torch.Tensor:
    mask = run.loss_mask if run.loss_mask is not None else run.kwargs.get("loss_mask")
    if mask is None:
        raise AssertionError("cannot see the loss mask MB's loss function uses")
    return mask


def model_rows(run: step.StepRun) -> list[differential.PackedRow]:
    """What the model received, one packed row per batch row (boundaries from the PackedSeqParams)."""
    k = run.kwargs
    view = params_view(k.get("packed_seq_params"))
    cols = [_rows(k["input_ids"]), _rows(k["labels"]), _rows(loss_mask_of(run)), _rows(k["position_ids"])]
    return [stepcheck.model_row(stepcheck.ModelInputs(*row), view) for row in zip(*cols)]


def token_outputs(run: step.StepRun, r: int, n: int | None = None) -> stepcheck.TokenOutputs:
    logits, loss = run.logits[r], run.token_loss.reshape(run.logits.shape[0], -1)[r]
    return stepcheck.TokenOutputs(logits[:n].tolist(), loss[:n].tolist())
