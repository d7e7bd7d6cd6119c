"""A model family's own training step over offline packed batches: DeepSeek-V4's (``models/deepseek/
deepseek_v4_step``, ledger feature ``dsv4-step``).

Why: MB ships step functions beside a model family's code, and a user training that family calls them
instead of ``gpt_step`` (``--step_func dsv4_step``). DeepSeek-V4's runs ``gpt_step``'s common forward
with its own ``get_batch``: its own extraction of the packed metadata (current and legacy keys), and
under CP > 1 a contiguous partition where the model config asks for it. What it hands the model and
what its loss function counts are held, like ``gpt_step``'s, to the same step unpacked.

Operation ``dsv4_step(model, batch)`` -> :class:`~.step.StepRun`: one micro-batch through MB's
DeepSeek-V4 ``forward_step`` and its loss function, as :func:`~.step.gpt_step` runs ``gpt_step``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.adapters import Candidate, Operation, symbol
from harness.adapters.step import RecordingModel, StepRun, mcore_call_matches, minimal_state, run_step

DSV4 = "megatron.bridge.models.deepseek.deepseek_v4_step"


def _dsv4_probe() -> Callable[[RecordingModel, dict[str, Any]], StepRun]:
    fn = symbol(DSV4, "forward_step")
    mcore_call_matches(DSV4, "get_batch_on_this_cp_rank", "megatron.core.utils")

    def call(model: RecordingModel, batch: dict[str, Any]) -> StepRun:
        return run_step(fn, minimal_state(), batch, model)

    return call


dsv4_step = Operation(
    "dsv4_step_forward",
    [Candidate("models/deepseek/deepseek_v4_step.forward_step", _dsv4_probe)],
    feature="dsv4-step",
)
"""``dsv4_step(model, batch)``: one micro-batch through MB's DeepSeek-V4 ``forward_step`` and loss function."""
