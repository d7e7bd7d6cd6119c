"""MB's Nemotron Omni collate, as its Energon task encoder runs it: a packing implementation of its own.

``NemotronOmniTaskEncoder(processor, seq_length, pad_to_max_length, pad_to_multiple_of,
enable_in_batch_packing, in_batch_packing_pad_to_multiple_of).collate_fn(examples)`` is what the
encoder's ``batch()`` calls for each micro-batch; with in-batch packing it flattens the rows into one
MCore THD row by its own code (``models/nemotron_omni/data/collate_fn._pack_omni_rows_to_mcore_thd``),
not the shared in-batch packing the other collates use.

Nemotron Omni's own processor is remote code (``trust_remote_code``) that cannot be built offline. The
cases hand the encoder another model's processor, Qwen2.5-VL's written offline
(:mod:`harness.suite.oracle.vlprocessor`), and text-only conversations: no MB producer pairs the two, so the
cases are in the hypothetical tier. The reference is the same encoder without packing.

Operation ``omni_collate(examples, processor, seq_length, **knobs)`` -> the collated batch, with the
``tokens`` alias of ``input_ids`` (as the encoder's ``encode_batch`` adds it).

Era: ledger feature ``omni-in-batch-collate``; the encoder's ``collate_fn`` since 179e0160f (2026-07-16);
between the two it packs in ``batch()`` over Energon ``ChatMLSample``s, which the harness does not build
(untestable there, said so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.suite.adapters import Candidate, NotHere, Operation, Untestable, accepts, symbol

KNOBS = ("pad_to_max_length", "pad_to_multiple_of", "enable_in_batch_packing", "in_batch_packing_pad_to_multiple_of")


def _probe() -> Callable[..., dict[str, Any]]:
    cls = symbol("megatron.bridge.data.energon.nemotron_omni_task_encoder", "NemotronOmniTaskEncoder")
    if not accepts(cls.__init__, *KNOBS):
        raise NotHere("NemotronOmniTaskEncoder takes no in-batch packing knobs")
    if not hasattr(cls, "collate_fn"):  # ebd55d7bc..179e0160f: encode_sample(ChatMLSample) then batch()
        raise Untestable(
            "this NemotronOmniTaskEncoder packs in its batch() over Energon ChatMLSamples (no collate_fn, "
            "before 179e0160f); the harness hands conversations to collate_fn only"
        )

    def call(
        examples: list[dict[str, object]], processor: object, seq_length: int, **knobs: object
    ) -> dict[str, object]:
        out = dict(cls(processor, seq_length=seq_length, **knobs).collate_fn(examples))
        out["tokens"] = out["input_ids"]
        return out

    return call


omni_collate = Operation(
    "omni_collate",
    [Candidate("data/energon/nemotron_omni_task_encoder.NemotronOmniTaskEncoder", _probe)],
    before="no Nemotron Omni task encoder with in-batch packing",
    feature="omni-in-batch-collate",
)
