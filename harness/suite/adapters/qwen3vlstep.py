"""Qwen3-VL's own training step: the rows it pads and packs itself, and what its model receives.

Operation ``qwen3_vl_step(model, batch, packing=, groups=)`` -> :class:`~.step.StepRun`: one right-padded
micro-batch (MB's loader with ``defer_in_batch_packing_to_step``: the collate leaves the rows alone)
through MB's ``models/qwen_vl/qwen3_vl_step.forward_step`` and its loss function, with the dataset
config's ``enable_in_batch_packing`` as given.

Why: Qwen3-VL refuses collate-time packing and keeps sequence preparation in its step
(``_pad_and_pack_qwen3_vl_step``): it pads the rows to the TP/CP multiple, builds ``PackedSeqParams``
with one sequence per row, and under in-batch packing hands its model the rows with those params,
an all-ones attention mask and the labels and loss mask flattened to one packed row; the model packs
internally from there. What the step hands over, and what MB's loss function counts of it, are held
to the same step with packing off (MB's own unpacked path).

Why a recording model (:class:`Qwen3VLRecordingModel`, named in the results): Qwen3-VL's model
(``modelling_qwen3_vl``) builds its attention and vision tower from Transformer Engine specs, which
do not run on a CPU. The double records its call and returns a per-token loss shaped like the labels
it was handed, a fixed function of each position's label and input token (of its label alone under
CP, where the step hands over whole rows of tokens and splits only the labels), so a label, a token
or a loss-mask entry out of place shows in MB's loss totals.

Era: the step-owned padding and packing (ebd55d7bc, 2026-06-25, feature ``qwen3-vl-step-packing``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch

from harness.suite import standins
from harness.suite.adapters import Candidate, NotHere, Operation, module_source, symbol
from harness.suite.adapters.step import RecordingModel, StepRun, minimal_state, plain, run_step, snapshot

QWEN3_VL_STEP = "megatron.bridge.models.qwen_vl.qwen3_vl_step"
STANDIN_QWEN3_VL_MODEL = "Qwen3-VL's model recorded (its TE attention and vision tower need a GPU)"


class Qwen3VLRecordingModel(RecordingModel):
    """Stands for ``Qwen3VLModel``: records the step's keyword arguments and returns a per-token loss
    shaped like the labels (``[1, B*S]`` packed, ``[B, S]`` not)."""

    def __init__(self, gpt: torch.nn.Module, seq_length: int, tokens_in_loss: bool = True) -> None:
        super().__init__(gpt)  # the tiny GPTModel only answers what MB reads off a model (config, groups)
        # under CP the step splits the labels and hands over the whole rows of tokens (the model
        # splits them itself): a loss of the label alone is then the same per position at any CP
        self.tokens_in_loss = tokens_in_loss
        # the config of a model MB's provider built: a TransformerConfig that also carries the
        # provider's fields, of which the step reads seq_length
        config: Any = copy.copy(gpt.config)
        config.seq_length = seq_length
        self.config = config

    def forward(self, **kwargs: object) -> torch.Tensor:
        standins.record(STANDIN_QWEN3_VL_MODEL)
        self.calls.append({k: snapshot(v) for k, v in kwargs.items()})
        labels = plain(kwargs["labels"])
        loss = 1.0 + 1e-2 * (labels.float() % 97)
        if self.tokens_in_loss:
            loss = loss + 1e-3 * (plain(kwargs["input_ids"]).reshape(labels.shape).float() % 89)
        self.logits.append(loss.detach().unsqueeze(-1).clone())  # [b, s, 1]: the only "logits" there are
        return loss


def _probe() -> Callable[..., StepRun]:
    source = module_source(QWEN3_VL_STEP)
    if source is None:
        raise NotHere(f"no module {QWEN3_VL_STEP}")
    if "_pad_and_pack_qwen3_vl_step" not in source:
        raise NotHere("qwen3_vl_step does not pad and pack the rows itself")
    fn = symbol(QWEN3_VL_STEP, "forward_step")

    def call(
        model: Qwen3VLRecordingModel, batch: Mapping[str, object], *, packing: bool, groups: object = None
    ) -> StepRun:
        state = minimal_state(enable_in_batch_packing=packing, defer_in_batch_packing_to_step=packing)
        return run_step(fn, state, batch, model, groups)

    return call


qwen3_vl_step = Operation(
    "qwen3_vl_step_forward",
    [Candidate("models/qwen_vl/qwen3_vl_step.forward_step (step-owned packing)", _probe)],
    before="Qwen3-VL's step did not pad and pack the rows itself",
    feature="qwen3-vl-step-packing",
)
"""``qwen3_vl_step(model, batch, packing=, groups=)``: one micro-batch through Qwen3-VL's ``forward_step``
and loss function (``groups``: the rank's process groups in a parallel world)."""
