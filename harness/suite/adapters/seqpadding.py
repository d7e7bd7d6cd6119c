"""MB's collate-time sequence policy with packing off: pad (or truncate) a right-padded micro-batch.

Operation ``sequence_batch(batch, **knobs)``: ``data/collators/sequence.prepare_sequence_batch``
(what MB's model collates, Qwen-VL, Gemma-VL, GLM-VL, Kimi-VL..., call on the right-padded batch
their processor made), with in-batch packing off, so it hands the batch to
``sequence_padding.pad_or_truncate_sequence_batch``: every sequence-aligned tensor padded to the
width the knobs give (``sequence_length``; ``pad_to_max_length``; ``pad_to_multiple_of``; the pad
values ``pad_token_id`` and ``sequence_tensor_pad_values``) or truncated to it. Returns the batch
(the function edits it in place). Before its era (e577829e1, 2026-07-09): untestable.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.suite.adapters import Candidate, Operation, symbol
from harness.suite.adapters.mbtypes import Batch


def _probe() -> Callable[..., Batch]:
    prepare = symbol("megatron.bridge.data.collators.sequence", "prepare_sequence_batch")

    def call(batch: Batch, **knobs: object) -> Batch:
        prepare(batch, enable_in_batch_packing=False, **knobs)
        return batch

    return call


sequence_batch = Operation(
    "sequence_batch",
    [Candidate("data/collators/sequence.prepare_sequence_batch", _probe)],
    before="no collator sequence policy",
    feature="collator-sequence-policy",
)
