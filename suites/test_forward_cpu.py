"""CPU forward through MB's own step functions: packed == MB's unpacked path, per real token.

Documented contract (docs/training/packed-sequences.md): packing concatenates examples while
"preserving sequence boundaries", carried to attention as ``cu_seqlens`` so no token attends
across a boundary; position ids restart per sequence; padding never reaches the loss. So what
the model computes for a real token must not depend on whether its example was packed.

What runs is what training runs: MB's collated micro-batches go through MB's real
``forward_step`` (``gpt_step`` for offline packed SFT, ``vlm_step`` for in-batch packing: MB's
``get_batch``, ``get_packed_seq_params``, model call, loss function); only the model (a
recording double around MCore's real tiny ``GPTModel`` whose THD attention consumes exactly
the ``PackedSeqParams`` MB built), the state and the process groups are doubles
(harness/suite/adapters/step.py). The reference is MB's unpacked path at the same commit, through
the same step function (suites/_forward.py).

Invariants (harness/suite/oracle/differential.py, harness/suite/oracle/stepcheck.py), a broken one is FAIL:
what the model received, read as a packed row, equals the unpacked examples per real token
(tokens, labels, loss mask, position ids), padding never trains, boundaries and alignment
match the examples found by content; ``PackedSeqParams`` contract (``thd``, int32 1-D non-empty
boundaries, ``max_seqlen``, no field beyond what MB sets for a non-hybrid model); logits and
per-token loss equal per real token (fp32, tolerance justified in suites/_forward.py); the loss
function's (sum, count) per micro-batch equal the unpacked runs'. Goldens (loss sums, counts,
boundaries) only detect change.

``clean-*`` cases use corpora without literal EOS in answers, which MB 0.6.2's packed collate
mishandles (genuine EOS inputs masked by token id; logical ``cu_seqlens`` cut at the last
non-EOS token): they show the machinery passes where MB is right.
"""

from __future__ import annotations

import dataclasses

import pytest

from suites import _forward, _no_packing_steps, _sftcases, _step37

pytestmark = pytest.mark.import_group("full")

_BY_ID = {c.id: c for c in _sftcases.CASES + _sftcases.FIXED_SHAPE_CASES}
_OFFLINE_IDS = (
    "prompt-mult1",
    "prompt-mult4",
    "completion-mult2",
    "chat-mult1",
    "chat-mult4",
    "prompt-mult1-full-loss",
    "chat-mult4-eod-not-eos",
    "prompt-mult1-pad-cu-seqlens",
)
_CLEAN_IDS = (
    "prompt-mult1",
    "prompt-mult4",
    "completion-mult2",
    "chat-mult1",
    "chat-mult4",
    "completion-mult1-full-loss",
    "prompt-mult1-pad-cu-seqlens",
)


def _clean(case: _sftcases.SFTCase) -> _forward.CleanCase:
    return _forward.CleanCase(**{**dataclasses.asdict(case), "id": "clean-" + case.id})


OFFLINE = [_BY_ID[i] for i in _OFFLINE_IDS] + [_clean(_BY_ID[i]) for i in _CLEAN_IDS]
VLM_SOURCE = _sftcases.SFTCase("vlm-chat", seed=71, kind="chat", n=14)
VLM = [
    _forward.VLMCase("chat-mult1", VLM_SOURCE),
    _forward.VLMCase("chat-cp2-mult4", VLM_SOURCE, cp=2),
    _forward.VLMCase("chat-cp2-tp3-sp-mult12", VLM_SOURCE, cp=2, tp=3, sp=True),
]

# the same right-padded chat micro-batches through MB's audio-language step, which packs them itself
# (Qwen2-Audio's collate hands it right-padded rows; a text-only conversation has no audio features)
AUDIO = [
    _forward.VLMCase("audio-chat-mult1", VLM_SOURCE, step="audio"),
    _forward.VLMCase("audio-chat-cp2-tp3-sp-mult12", VLM_SOURCE, cp=2, tp=3, sp=True, step="audio"),
]
# and MB's in-batch collate's packed batches through the LLaVA step (Nemotron-VL's, refusing PP and CP) and
# the Nemotron Omni step (text only: no image, no sound)
LLAVA = [
    _forward.VLMCase("llava-chat-mult1", VLM_SOURCE, step="llava"),
    _forward.VLMCase("llava-chat-tp2-sp-mult2", VLM_SOURCE, tp=2, sp=True, step="llava"),
]
OMNI = [_forward.VLMCase("omni-chat-tp2-sp-mult2", VLM_SOURCE, tp=2, sp=True, step="omni")]


@pytest.mark.parametrize("case", [_sftcases.case_param(c) for c in OFFLINE])
def test_offline_gpt_step(golden, case):
    """Each offline packed micro-batch through MB's ``gpt_step.forward_step`` == each example alone."""
    result = _forward.cpu_offline(case)
    result.assert_ok()
    golden.check(result.golden, tolerances=_forward.GOLDEN_TOLERANCES)


# a model family's own step over the same offline packed batches: DeepSeek-V4's (gpt_step's common
# forward with its own get_batch and packed-metadata extraction; ledger feature dsv4-step). Clean corpora:
# the step exists only in MBs past 0.6.2's EOS bugs, whose known entries list the gpt_step cases
DSV4 = [_clean(_BY_ID[i]) for i in ("prompt-mult4", "chat-mult4", "prompt-mult1-pad-cu-seqlens")]


@pytest.mark.parametrize("case", [_sftcases.case_param(c) for c in DSV4])
def test_offline_dsv4_step(golden, case):
    """Each offline packed micro-batch through MB's DeepSeek-V4 ``forward_step`` (the step a user training
    that family calls) == each example alone through the same step: per real token the logits, the loss
    and its totals, boundaries and alignment as for ``gpt_step`` (the contract above)."""
    result = _forward.cpu_offline(case, through="dsv4")
    result.assert_ok()
    golden.check(result.golden, tolerances=_forward.GOLDEN_TOLERANCES)


@pytest.mark.parametrize("case", AUDIO, ids=[c.id for c in AUDIO])
def test_in_batch_audio_lm_step(golden, case):
    """Right-padded chat micro-batches packed in batch by MB's ``audio_lm_step.forward_step`` itself ==
    the same step unpacked: per real token the logits, the loss and its totals, padding trains nothing,
    segments on the documented multiple of the layout (CP, TP, SP). MB packs on the device batch by design
    here (Qwen2-Audio's collate says why): its packer's host reads are that design's, any other is judged."""
    result = _forward.cpu_vlm(case)
    result.assert_ok()
    golden.check(
        _forward.physical_as_logical({**result.golden, "multiple": case.multiple}),
        tolerances=_forward.GOLDEN_TOLERANCES,
    )


@pytest.mark.parametrize("case", LLAVA, ids=[c.id for c in LLAVA])
def test_in_batch_llava_step(golden, case):
    """Right-padded chat micro-batches packed by MB's in-batch collate through MB's ``llava_step.forward_step``
    == the same step unpacked: per real token the logits, the loss and its totals, padding trains nothing
    (text only: no placeholder to expand, the boundaries are the collate's). The step's host reads where
    it expands the boundaries on the device batch are its design's (harness/suite/adapters/mmstep.py)."""
    result = _forward.cpu_vlm(case)
    result.assert_ok()
    golden.check(_forward.physical_as_logical(result.golden), tolerances=_forward.GOLDEN_TOLERANCES)


@pytest.mark.parametrize("case", OMNI, ids=[c.id for c in OMNI])
def test_in_batch_omni_step(golden, case):
    """Right-padded chat micro-batches packed by MB's in-batch collate through MB's Nemotron Omni step
    (``nemotron_omni_step.forward_step``; text only: the step's empty image sentinel, no sound) == the same
    step unpacked: per real token the logits, the loss and its totals, padding trains nothing."""
    result = _forward.cpu_vlm(case)
    result.assert_ok()
    golden.check(_forward.physical_as_logical(result.golden), tolerances=_forward.GOLDEN_TOLERANCES)


@pytest.mark.parametrize("case", VLM, ids=[c.id for c in VLM])
def test_in_batch_vlm_step(golden, case):
    """Right-padded VLM micro-batches packed in batch through MB's ``vlm_step.forward_step`` == unpacked."""
    result = _forward.cpu_vlm(case)
    result.assert_ok()
    golden.check({**result.golden, "multiple": case.multiple}, tolerances=_forward.GOLDEN_TOLERANCES)


@pytest.mark.parametrize("case", _step37.CASES, ids=[c.id for c in _step37.CASES])
def test_step37_own_packing(golden, case):
    """Step-3.7's model-owned packing (MB's Flickr8k provider: greedy non-truncating packs, the pack
    transform's shift and padding sub-sequence) through its own ``step37_flickr8k_step.forward_step`` == each
    sample alone through the same pipeline and step: per real token the logits, the loss and its totals,
    padding trains nothing, sub-sequence boundaries at the samples, an oversize sample as its policy says."""
    result = _step37.run(case)
    result.assert_ok()
    golden.check(result.golden, tolerances=_forward.GOLDEN_TOLERANCES)


# MB's diffusion step (Nemotron-Labs-Diffusion's DGPTStep) documents packing as not supported: the same offline
# packed micro-batches must be refused before its model runs (suites/_no_packing_steps.py). Prompt corpora: the
# step reads the batch's attention_mask key, which MB's unpacked chat collate (the control) does not write
DGPT = [_clean(_BY_ID[i]) for i in ("prompt-mult1", "prompt-mult4")]


@pytest.mark.parametrize("case", [_sftcases.case_param(c) for c in DGPT])
def test_offline_packing_refused_by_dgpt_step(case):
    """MB's offline packed micro-batches through MB's diffusion step: refused ("Packed sequence support is not
    currently implemented for DGPTStep"), never handed to its model as one sequence (a packed row without
    boundaries attends across documents); an unpacked example reaches the model (the control)."""
    refused = _no_packing_steps.dgpt(case)
    assert refused == len(_sftcases.built(case).batches)


# Qwen3-Omni's step refuses in-batch packing (suites/_no_packing_steps.py): MB's in-batch collate's packed batches
# with the flag on must be refused before its model runs
QWEN3_OMNI = [_forward.VLMCase("qwen3-omni-chat-mult1", VLM_SOURCE, step="qwen3-omni")]


@pytest.mark.parametrize("case", QWEN3_OMNI, ids=[c.id for c in QWEN3_OMNI])
def test_in_batch_packing_refused_by_qwen3_omni_step(case):
    """Right-padded chat micro-batches packed by MB's in-batch collate through MB's Qwen3-Omni step with in-batch
    packing enabled: refused ("Qwen3-Omni packed sequence support is not implemented yet"), never handed to its
    model as one sequence; the same micro-batch unpacked reaches the model (the control)."""
    refused = _no_packing_steps.qwen3_omni(case)
    assert refused == -(-len(_forward.unpacked(case.source).examples) // case.micro_batch)


@pytest.mark.parametrize("buffer", [3, 6], ids=["buffer3", "buffer6"])
def test_wan_packs_train_each_video_as_its_pack_of_one(buffer):
    """Wan's text-to-video training, which always packs: micro-batches of MB's Energon Wan data module
    (its task encoder patchifies, pads and packs the videos) held sample by sample to MB's own pack of
    one (packing buffer 1), then through MB's ``WanForwardStep`` to its loss function: the boundaries
    of self- and cross-attention are the samples', and the loss trains every real position and no
    padding. Wan's DiT is recorded (Transformer Engine only), named in the result."""
    from harness.suite.adapters import needs, wan
    from suites import _wan

    needs(wan.wan_batches, wan.wan_step)
    single = _wan.singles(wan.wan_batches(_wan.reference()))
    packed = wan.wan_batches(wan.WanRequest(_wan.SAMPLES, 32, packing_buffer_size=buffer, batches=3))
    for b, batch in enumerate(packed):
        _wan.check_pack(f"micro-batch {b}", batch, single)
        _wan.check_step(f"micro-batch {b}", batch, [wan.wan_step(batch)])


def test_wan_under_cp_splits_each_pack_as_mcores_thd_layout():
    """Wan under context parallelism (its recipes train with CP): every rank of a CP 2 gloo world reads
    MB's Wan data module built with its process groups (videos padded to a multiple of 2 x CP) and runs
    ``WanForwardStep``. The CP ranks read the same packs, each sample in a pack is its pack of one, the
    padding trains nothing, each rank's loss mask is the pack's at its positions of MCore's THD
    layout, and the ranks' token counts sum to the pack's real positions. Wan's DiT is recorded."""
    from harness.suite.adapters import needs, wan
    from suites import _wan

    needs(wan.wan_batches, wan.wan_step)
    single = _wan.reference(data_parallel=True)
    packed = wan.WanRequest(_wan.SAMPLES, 48, packing_buffer_size=4, batches=2, data_parallel=True)
    _wan.check_step_under_cp(single, packed, cp=2)
