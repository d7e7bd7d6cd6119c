"""MB's multimodal steps beside ``vlm_step`` with in-batch packing: the audio-language step, which packs
itself (``training/audio_lm_step``), and the LLaVA and Nemotron Omni steps, which read the THD keys MB's
in-batch collate writes (``training/llava_step``, ``training/nemotron_omni_step``).

Why apart from :mod:`.vlmstep`: Qwen2-Audio's collate hands the step right-padded rows (its audio
features must stay batch-aligned until the model's input preparation), so ``audio_lm_step.get_batch``
packs them itself, with the multiple it derives from CP, TP and SP, after a ``_padding_mask`` its
iterator keeps from the collate's attention mask. Unpacked, the same step pads each micro-batch to
a multiple of 128 capped at ``seq_length``. Two eras of the flag that turns it on: the dataset
config's ``pack_sequences_in_batch`` (226a3b80b, through ``vlm_step.pack_batch_sequences``) and
``enable_in_batch_packing`` (e577829e1, MB's shared THD packer).

Operation ``audio_in_batch(model, right_padded_batch, cp=, tp=, sp=)`` -> :class:`~.vlmstep.VLMRun`:
the batch through MB's audio step packed, and without packing (the reference).

The LLaVA step (also Nemotron-VL's) takes batches MB's in-batch collate packed: it moves their
boundaries past each image placeholder's expansion into the image's embeddings (6420c8152) and
refuses packing under PP or CP. Operation ``llava_in_batch(model, right_padded_batch, pad_token_id=, tp=, sp=)``
-> :class:`~.vlmstep.VLMRun`: the batch packed by MB's collate-time packer (on the multiple MB's config
chooses for the TP/SP layout) through MB's LLaVA step, and the right-padded batch through it unpacked.
``omni_in_batch``: the same through the Nemotron Omni step (59ae409f5), which refuses packing deferred
to the step.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.suite.adapters import Candidate, NotHere, Operation, source_text, symbol, thd
from harness.suite.adapters.mbtypes import Batch
from harness.suite.adapters.step import RecordingModel, minimal_state, run_step, sized_groups
from harness.suite.adapters.vlmstep import VLMRun, collate_time_run

STEP = "megatron.bridge.training.audio_lm_step"
PACKS_IN_STEP = ("pack_right_padded_sequence_batch_to_mcore_thd", "pack_batch_sequences")
"""MB's packers the audio step calls on the device-resident batch, by design (see above): the lengths
they read back to the host are that design's; a host read anywhere else in the step is not."""


def _probe_for(flag: str) -> Callable[[], Callable[..., VLMRun]]:
    def probe() -> Callable[..., VLMRun]:
        fn = symbol(STEP, "forward_step")
        if flag not in source_text(symbol(STEP, "get_batch")):
            raise NotHere(f"audio_lm_step.get_batch does not read the dataset config's {flag}")

        def call(model: RecordingModel, batch: Batch, *, cp: int, tp: int, sp: bool) -> VLMRun:
            packed = run_step(
                fn, minimal_state(**{flag: True}, sequence_parallel=sp), batch, model, groups=sized_groups(cp, tp)
            )
            unpacked = run_step(fn, minimal_state(**{flag: False}), batch, model)
            return VLMRun(packed, unpacked)

        return call

    return probe


audio_in_batch = Operation(
    "audio_in_batch_step",
    [
        Candidate("training/audio_lm_step, enable_in_batch_packing (e577829e1)", _probe_for("enable_in_batch_packing")),
        Candidate("training/audio_lm_step, pack_sequences_in_batch (226a3b80b)", _probe_for("pack_sequences_in_batch")),
    ],
    feature="audio-lm-step",
)
"""``audio_in_batch(model, right_padded_batch, cp=, tp=, sp=)``: the batch through MB's audio step with
its in-batch packing as the era spells it, and without (the reference)."""


LLAVA = "megatron.bridge.training.llava_step"
OMNI = "megatron.bridge.training.nemotron_omni_step"
LLAVA_IN_STEP = ("_expand_packed_metadata_for_visual_embeddings",)
"""Where the LLaVA step moves the collate's boundaries past each image's embeddings on the device batch (it
must find the placeholders there, by design): its host reads are that design's; any other read is not."""


def _collate_time_probe(module: str, marker: str) -> Callable[[], Callable[..., VLMRun]]:
    """A step that reads the THD keys MB's in-batch collate writes (``marker``: what the era has)."""

    def probe() -> Callable[..., VLMRun]:
        fn = symbol(module, "forward_step")
        symbol(module, marker)
        collate = thd.in_batch_collate.resolved[1]

        def call(model: RecordingModel, batch: Batch, *, pad_token_id: int, tp: int, sp: bool) -> VLMRun:
            return collate_time_run(fn, collate, model, batch, pad_token_id=pad_token_id, cp=1, tp=tp, sp=sp)

        return call

    return probe


llava_in_batch = Operation(
    "llava_in_batch_step",
    [
        Candidate(
            "training/llava_step with collate-time THD keys (6420c8152)",
            _collate_time_probe(LLAVA, "_expand_packed_metadata_for_visual_embeddings"),
        )
    ],
    feature="llava-step-packing",
)
"""``llava_in_batch(model, right_padded_batch, pad_token_id=, tp=, sp=)``: the batch packed by MB's in-batch collate
through MB's LLaVA step, and unpacked (the reference)."""

omni_in_batch = Operation(
    "omni_in_batch_step",
    [
        Candidate(
            "training/nemotron_omni_step with collate-time THD keys (59ae409f5)",
            _collate_time_probe(OMNI, "_PACKED_SEQ_DEVICE_KEYS"),
        )
    ],
    feature="omni-step-packing",
)
"""``omni_in_batch(model, right_padded_batch, pad_token_id=, tp=, sp=)``: the same through MB's Nemotron Omni
step (its vision and sound inputs absent: a text-only batch gets the step's empty image sentinel)."""


__all__ = ["LLAVA_IN_STEP", "PACKS_IN_STEP", "audio_in_batch", "llava_in_batch", "omni_in_batch"]
