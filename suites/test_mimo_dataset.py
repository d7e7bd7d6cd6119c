"""MIMO samples: one placeholder per encoder embedding, then the text, padded to the sequence length.

MB's MIMO dataset (through its mock provider: synthetic images preprocessed by a real image
processor, here a ``CLIPImageProcessor`` written offline, and the offline tokenizer) inserts, for
every modality present in a sample, ``encoder_seq_lengths[modality]`` placeholder tokens at the
start of the sequence, the encoder's embeddings replace them one to one in the model; then the
text, truncated and padded to ``seq_length``. Checked per sample against the tokenizer's own
encoding of the sample's text:

* exactly ``encoder_seq_lengths`` placeholders, at the start, when the image is present (its
  processed pixels beside), none otherwise (``wrong-logits``: embeddings would land on text);
  with MB's default (no length named for the modality) at least one, at the start, the same count
  in every sample (the golden pins how many);
* then the text's tokens, as many as fit; the row is ``seq_length`` wide;
* labels are the next tokens; the loss trains every text target and nothing else: no placeholder
  target, no padding, not the last position;
* ``seq_length`` that leaves no room for text is refused by MB's check.
"""

from __future__ import annotations

import functools

import pytest

from harness import features
from harness.records.impact import Impact, require
from harness.suite.adapters import loaders, mimo
from harness.suite.oracle import tokenizer
from suites import _mimo, _mimo_dp, _mimo_pack

pytestmark = pytest.mark.import_group("light")

PLACEHOLDER = _mimo.PLACEHOLDER
PROMPT = " ".join(tokenizer.WORDS[:5])
# (id, seq_length, encoder_seq_length; None: MB's default, no length named for the modality)
CASES = [
    ("seq48-enc8", 48, 8),
    ("seq32-enc16", 32, 16),
    ("seq12-enc8-truncated", 12, 8),
    ("seq24-enc-default", 24, None),
]


@functools.cache
def _text_ids(i: int) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer.write_tokenizer_dir()))
    return list(tok(f"{PROMPT} Sample {i}.")["input_ids"])  # the mock provider's text of sample i


def _samples(seq: int, enc: int | None) -> mimo.MimoSamples:
    req = mimo.MimoRequest(tokenizer.write_tokenizer_dir(), seq, tokenizer.vocab()[PLACEHOLDER], enc, PROMPT)
    return mimo.mimo_samples(req)


@pytest.mark.parametrize("seq,enc", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_placeholders_text_and_padding(golden, seq, enc):
    built = _samples(seq, enc)
    samples = built.samples
    require(samples, Impact.CRASH, "MB built no MIMO samples")
    seen = [_mimo.check_sample(i, s, seq, enc, _text_ids(i)) for i, s in enumerate(samples)]
    _mimo.same_default_count(seen, enc)
    want = {True, False} if built.mixed else {True}  # before modality_presence_prob every sample has it
    if {x["image"] for x in seen} != want:
        raise RuntimeError(f"the case needs samples with and without the image (presence 0.5): {seen}")
    if not all("loss_mask" in s for s in samples):  # placeholders and text held; no loss policy to check
        raise features.missing("mimo-dataset-loss-mask", "the MIMO dataset emits no labels shift or loss mask")
    golden.check({"samples": seen})


def test_no_room_for_text_is_refused():
    """``seq_length`` no larger than the encoder tokens leaves no text: MB's provider refuses it."""
    _mimo.require_no_room_refused(lambda: _samples(8, 8), "8 encoder tokens in seq_length 8")


# (id, seq_length, encoder_seq_length): a user's image folder through the Hugging Face provider
HF_CASES = [
    ("imagefolder-seq40-enc8", 40, 8),
    ("imagefolder-seq12-enc4-truncated", 12, 4),
    ("imagefolder-seq24-enc-default", 24, None),
]


@pytest.mark.parametrize("seq,enc", [c[1:] for c in HF_CASES], ids=[c[0] for c in HF_CASES])
def test_hf_provider_over_a_local_image_folder(golden, seq, enc):
    """The Hugging Face provider over the user's own image folder keeps the mock provider's contract."""
    # the marker first, so a truncated sample still names its row; lengths 3 to 11 words
    texts = tuple(f"{tokenizer.MARKERS[i]} {' '.join(tokenizer.WORDS[5 * i : 5 * i + 3 + 2 * i])}" for i in range(5))
    req = mimo.MimoHFRequest(tokenizer.write_tokenizer_dir(), seq, tokenizer.vocab()[_mimo.PLACEHOLDER], enc, texts)
    golden.check({"samples": _mimo.check_hf_samples(mimo.mimo_hf_samples(req).samples, texts, seq, enc)})


LOADER_SEQ = 24


def _loader_texts(n: int) -> tuple[str, ...]:
    return _mimo.marked_texts([4] * n)  # n rows of 4 words each


@pytest.mark.import_group("full")  # MB's loader builder reads the training config
@pytest.mark.parametrize("provider", ["mock", "hf"])
@pytest.mark.parametrize("drop_last", [False, True], ids=["keep-last", "drop-last"])
def test_drop_last_through_mb_mimo_loader(golden, provider, drop_last):
    """A MIMO provider's ``drop_last`` as a user sets it, through MB's loader builder on its MIMO
    path (the model's grids, the provider's datasets and MB's sampler; a world of one): 3 steps of
    global batch 4 in micro-batches of 2 take every sample of the split MB sizes once, each as the
    provider built it, whichever ``drop_last`` (a split of whole global batches has nothing to drop)."""
    knobs = {"drop_last": drop_last, **loaders.WORKERS_OFF}
    placeholder = tokenizer.vocab()[PLACEHOLDER]
    if provider == "mock":
        req = mimo.MimoRequest(
            tokenizer.write_tokenizer_dir(), LOADER_SEQ, placeholder, 8, PROMPT, samples=12, presence=1.0, knobs=knobs
        )
        built = mimo.mimo_samples(req)
    else:
        built = _mimo.hf_built(_loader_texts(12), LOADER_SEQ, 8, drop_last=drop_last)
    golden.check(_mimo.loader_epoch(built, seq=LOADER_SEQ, mbs=2, gbs=4, steps=3))


# (id, data-parallel size per module: the encoder's ranks first, then the language module's)
MODULE_LAYOUTS = [
    ("fan-out-vision-dp1-language-dp2", {_mimo_dp.ENCODER: 1, _mimo_dp.LANGUAGE: 2}),
    ("fan-in-vision-dp2-language-dp1", {_mimo_dp.ENCODER: 2, _mimo_dp.LANGUAGE: 1}),
]


@pytest.mark.import_group("full")  # MB's loader builder reads the training config
@pytest.mark.parametrize("modules", [c[1] for c in MODULE_LAYOUTS], ids=[c[0] for c in MODULE_LAYOUTS])
def test_module_data_parallel_keeps_text_and_image_together(golden, modules):
    """A heterogeneous MIMO world (the encoder on its ranks, the language module on the next, each with
    its own data-parallel size): 3 steps of global batch 4 in micro-batches of 2 through MB's loader
    and MB's MIMO forward step; every module's ranks hold whole samples, the encoder's rows are the
    images of the language's texts position by position, and the language ranks train every sample
    once (suites/_mimo_dp.py)."""
    built = _mimo.hf_built(_loader_texts(12), LOADER_SEQ, 8)
    ranks = _mimo_dp.world(built, modules, seq=LOADER_SEQ, mbs=2, gbs=4, steps=3)
    golden.check(_mimo_dp.check_world(built, ranks, mbs=2, gbs=4, steps=3))


@pytest.mark.import_group("full")  # MB's loader builder reads the training config
@pytest.mark.parametrize("modules", [c[1] for c in MODULE_LAYOUTS], ids=[c[0] for c in MODULE_LAYOUTS])
def test_step_packing_trains_what_the_unpacked_step_trains(golden, modules):
    """MB's step-time in-batch packing of the language shards (the dataset config's
    ``enable_in_batch_packing`` deferred to the step) in the heterogeneous worlds above: each language
    rank's packed sequence is its unpacked rows' real tokens, labels, loss mask and positions, with
    boundaries and ``max_seqlen`` of those segments, MB's loss counting the same tokens, and the
    encoder's inputs untouched (suites/_mimo_pack.py). Texts of different lengths, so the labels and loss
    masks differ; MB's MIMO dataset marks every position of a row real in its attention mask, so each
    segment is a whole padded row."""
    built = _mimo.hf_built(_mimo.marked_texts([2, 6, 3, 5] * 3), LOADER_SEQ, 8)
    unpacked = _mimo_dp.world(built, modules, seq=LOADER_SEQ, mbs=2, gbs=4, steps=3)
    packed = _mimo_dp.world(built, modules, seq=LOADER_SEQ, mbs=2, gbs=4, steps=3, pack=True)
    _mimo_dp.check_world(built, unpacked, mbs=2, gbs=4, steps=3)
    golden.check(_mimo_pack.check(unpacked, packed))


# (id, data-parallel sizes as above, context-parallel size per module): the language module's replica
# on 2 CP ranks, among which megatron-core's MIMO model partitions each sequence after MB's step
CP_LAYOUTS = [
    ("vision-dp1-language-dp1-cp2", {_mimo_dp.ENCODER: 1, _mimo_dp.LANGUAGE: 1}, {_mimo_dp.LANGUAGE: 2}),
]


@pytest.mark.import_group("full")  # MB's loader builder reads the training config
@pytest.mark.parametrize("modules,cp", [c[1:] for c in CP_LAYOUTS], ids=[c[0] for c in CP_LAYOUTS])
def test_step_packing_under_context_parallel(golden, modules, cp):
    """The language module under context parallelism, unpacked and with MB's step-time packing: every CP
    rank of a replica gets the replica's rows (the model splits one sequence among them), the unpacked
    world holds the contract above, and the packed stream splits as the model splits it, each padded
    boundary on 2*CP (MB's documented CP multiple, which TE's THD partition asserts), each real token on
    one CP rank (suites/_mimo_pack.py). The sequence length is on 2*CP, as MB's unpacked CP path
    requires."""
    built = _mimo.hf_built(_mimo.marked_texts([2, 6, 3, 5] * 3), LOADER_SEQ, 8)
    unpacked = _mimo_dp.world(built, modules, seq=LOADER_SEQ, mbs=2, gbs=4, steps=3, cp=cp)
    packed = _mimo_dp.world(built, modules, seq=LOADER_SEQ, mbs=2, gbs=4, steps=3, pack=True, cp=cp)
    _mimo_dp.check_world(built, unpacked, mbs=2, gbs=4, steps=3)
    golden.check(_mimo_pack.check(unpacked, packed))


@pytest.mark.import_group("full")
def test_micro_batch_must_divide_among_module_ranks(golden):
    """Micro-batches of 3 with the language module on 2 data-parallel ranks: the forward step could
    not slice them evenly, and MB's MIMO loader builder refuses the layout by its own check (only that
    rule broken: the encoder's DP 1 and the global batch 6 divide)."""
    built = _mimo.hf_built(_loader_texts(6), LOADER_SEQ, 8)
    ranks = _mimo_dp.world(built, {_mimo_dp.ENCODER: 1, _mimo_dp.LANGUAGE: 2}, seq=LOADER_SEQ, mbs=3, gbs=6, steps=1)
    golden.check(_mimo_dp.require_refused(ranks, "micro-batches of 3 over 2 language data-parallel ranks"))
