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
from typing import Any

import pytest

from harness.adapters import loaders, mimo, mimoloader, mimostep, rules
from harness.eras import features
from harness.oracle import tokenizer
from harness.oracle.impact import Impact, fail, require
from suites import _mimo_dp
from suites._explain import multiset_difference

pytestmark = pytest.mark.import_group("light")

PLACEHOLDER = "<|im_start|>"  # a special token of the offline tokenizer, as MIMO recipes reserve one
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
    seen = [_check_sample(i, s, seq, enc, _text_ids(i)) for i, s in enumerate(samples)]
    _same_default_count(seen, enc)
    want = {True, False} if built.mixed else {True}  # before modality_presence_prob every sample has it
    if {x["image"] for x in seen} != want:
        raise RuntimeError(f"the case needs samples with and without the image (presence 0.5): {seen}")
    if not all("loss_mask" in s for s in samples):  # placeholders and text held; no loss policy to check
        raise features.missing("mimo-dataset-loss-mask", "the MIMO dataset emits no labels shift or loss mask")
    golden.check({"samples": seen})


def _leading(ids: list[int], token: int) -> int:
    return next((k for k, t in enumerate(ids) if t != token), len(ids))


def _same_default_count(seen: list[dict[str, Any]], enc: int | None) -> None:
    """Under MB's default length every sample with the image holds the same number of placeholders:
    one encoder, one output length."""
    if enc is not None:  # a named length: every sample was held to it
        return
    counts = {x["placeholders"] for x in seen if x["image"]}
    if len(counts) > 1:
        raise fail(Impact.WRONG_LOGITS, f"placeholder counts {sorted(counts)} differ between samples of one encoder")


def _check_sample(i: int, s: dict, seq: int, enc: int | None, text_ids: list[int]) -> dict[str, Any]:
    """One sample: its placeholders first, then its text's tokens, ``seq`` wide, text targets trained.
    ``enc`` None: MB's default length, at least one placeholder (how many is reported, for the golden)."""
    placeholder = tokenizer.vocab()[PLACEHOLDER]
    ids, labels = s["input_ids"].tolist(), s["labels"].tolist()
    mask = s["loss_mask"].tolist() if "loss_mask" in s else []
    present = "vision" in (s.get("modality_inputs") or {})
    n_ph = (enc if enc is not None else max(1, _leading(ids, placeholder))) if present else 0
    require(len(ids) == seq, Impact.CRASH, f"sample {i}: {len(ids)} tokens, seq_length {seq}")
    require(
        ids[:n_ph] == [placeholder] * n_ph and ids[n_ph:].count(placeholder) == 0,
        Impact.WRONG_LOGITS,
        f"sample {i} (image {'present' if present else 'absent'}): placeholders at "
        f"{[k for k, t in enumerate(ids) if t == placeholder]}, documented the first {n_ph}",
    )
    text = text_ids[: seq - n_ph]
    n_real = n_ph + len(text)
    require(
        ids[n_ph:n_real] == text,
        Impact.WRONG_TARGETS,
        f"sample {i}: text tokens {ids[n_ph:n_real]}, the tokenizer's {text}",
    )
    shown: dict[str, Any] = {"image": present, "real": n_real}
    if enc is None:  # MB's default count: pinned by the golden (a change is a change, not a break)
        shown["placeholders"] = n_ph
    if "loss_mask" not in s:  # the dataset's own loss policy came later (checked by the caller, from its era)
        return shown
    for k in range(seq):
        trains = k + 1 < n_real and ids[k + 1] != placeholder
        if bool(mask[k]) != trains:
            impact = Impact.DROPS_TRAINED_TOKEN if trains else Impact.TRAINS_PADDING
            raise fail(impact, f"sample {i} position {k}: loss mask {mask[k]}, documented {float(trains)}")
        if trains and labels[k] != ids[k + 1]:
            raise fail(Impact.WRONG_TARGETS, f"sample {i} position {k}: label {labels[k]}, next token {ids[k + 1]}")
    return shown


def test_no_room_for_text_is_refused():
    """``seq_length`` no larger than the encoder tokens leaves no text: MB's provider refuses it."""
    try:
        _samples(8, 8)
    except (ValueError, AssertionError) as exc:
        if rules.raising_check(exc) is None or "seq_length" not in str(exc):
            raise fail(Impact.CRASH, f"refused, but not by MB's check on seq_length: {exc}") from exc
        return
    raise fail(Impact.ACCEPTS_INVALID_CONFIG, "8 encoder tokens in seq_length 8 accepted: no room for text")


# (id, seq_length, encoder_seq_length): a user's image folder through the Hugging Face provider
HF_CASES = [
    ("imagefolder-seq40-enc8", 40, 8),
    ("imagefolder-seq12-enc4-truncated", 12, 4),
    ("imagefolder-seq24-enc-default", 24, None),
]


@pytest.mark.parametrize("seq,enc", [c[1:] for c in HF_CASES], ids=[c[0] for c in HF_CASES])
def test_hf_provider_over_a_local_image_folder(golden, seq, enc):
    """The Hugging Face provider over the user's own image folder keeps the mock provider's contract."""
    from transformers import AutoTokenizer

    # the marker first, so a truncated sample still names its row; lengths 3 to 11 words
    texts = tuple(f"{tokenizer.MARKERS[i]} {' '.join(tokenizer.WORDS[5 * i : 5 * i + 3 + 2 * i])}" for i in range(5))
    req = mimo.MimoHFRequest(tokenizer.write_tokenizer_dir(), seq, tokenizer.vocab()[PLACEHOLDER], enc, texts)
    samples = mimo.mimo_hf_samples(req).samples
    require(len(samples) == len(texts), Impact.CRASH, f"MB built {len(samples)} samples of {len(texts)} rows")
    tok = AutoTokenizer.from_pretrained(str(tokenizer.write_tokenizer_dir()))
    by_marker = {tokenizer.vocab()[tokenizer.MARKERS[i]]: i for i in range(len(texts))}
    seen = []
    for i, s in enumerate(samples):
        ids = s["input_ids"].tolist()
        row = next((by_marker[t] for t in ids if t in by_marker), None)
        if row is None:
            raise fail(Impact.WRONG_TARGETS, f"sample {i}: the text of no row of the folder ({ids})")
        require("vision" in (s.get("modality_inputs") or {}), Impact.WRONG_LOGITS, f"sample {i}: its image is gone")
        if "loss_mask" not in s:
            raise features.missing("mimo-dataset-loss-mask", "the MIMO dataset emits no labels shift or loss mask")
        seen.append(_check_sample(i, s, seq, enc, list(tok(texts[row])["input_ids"])))
    _same_default_count(seen, enc)
    golden.check({"samples": seen})


def _loader_epoch(built: mimo.MimoSamples, *, mbs: int, gbs: int, steps: int) -> dict[str, Any]:
    """``steps`` steps of MB's MIMO loader over ``built.provider`` (sized by MB to ``steps x gbs``
    samples, as ``built`` was): every micro-batch ``mbs`` rows wide, every row one of the
    provider's samples as built (tokens with their own image, labels, loss mask), every sample once."""
    batches = mimoloader.mimo_train_micro_batches(
        built.provider, seq_length=LOADER_SEQ, micro_batch_size=mbs, global_batch_size=gbs, steps=steps
    ).micro_batches
    index = {(tuple(s["input_ids"].tolist()), _mimo_dp.pixels(s)): i for i, s in enumerate(built.samples)}
    texts = {key[0] for key in index}
    if len(index) < len(built.samples) or len(built.samples) != steps * gbs:  # the case's data, not MB's
        raise RuntimeError(f"{len(built.samples)} samples, {len(index)} distinct: rows cannot be told apart")
    widths = [int(b["input_ids"].shape[0]) for b in batches]
    require(
        widths == [mbs] * (steps * gbs // mbs),
        Impact.CRASH,
        f"{steps} steps of global batch {gbs}: {steps * gbs // mbs} micro-batches of {mbs}, got {widths}",
    )
    seen = []
    for b, batch in enumerate(batches):
        for r in range(mbs):
            ids = tuple(batch["input_ids"][r].tolist())
            i = index.get((ids, _mimo_dp.pixels(batch, r)))
            if i is None:
                raise fail(
                    Impact.WRONG_LOGITS if ids in texts else Impact.WRONG_TARGETS,
                    f"micro-batch {b} row {r}: "
                    + ("a sample's text with another image" if ids in texts else "none of the provider's samples"),
                )
            for name, impact in (("labels", Impact.WRONG_TARGETS), ("loss_mask", Impact.TRAINS_PADDING)):
                require(
                    batch[name][r].tolist() == built.samples[i][name].tolist(),
                    impact,
                    f"micro-batch {b} row {r} (sample {i}): {name} differ from the sample MB built",
                )
            seen.append(i)
    whole = list(range(len(built.samples)))
    require(
        sorted(seen) == whole,
        Impact.DROPS_TRAINED_TOKEN if set(seen) != set(whole) else Impact.WRONG_LOSS_NORMALISATION,
        f"{steps} steps train every sample once: " + multiset_difference(whole, seen, "sample"),
    )
    return {"micro_batches": len(batches), "order": seen}


LOADER_SEQ = 24


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
        built = _hf_built(12, drop_last=drop_last)
    golden.check(_loader_epoch(built, mbs=2, gbs=4, steps=3))


def _hf_built(n: int, **knobs: Any) -> mimo.MimoSamples:
    """``n`` samples of a user's image folder through MB's Hugging Face MIMO provider, each text and
    image distinct (a row names its sample), the loader's workers off, the provider's ``knobs`` set."""
    texts = tuple(f"{tokenizer.MARKERS[i]} {' '.join(tokenizer.WORDS[i : i + 4])}" for i in range(n))
    placeholder = tokenizer.vocab()[PLACEHOLDER]
    return mimo.mimo_hf_samples(
        mimo.MimoHFRequest(
            tokenizer.write_tokenizer_dir(), LOADER_SEQ, placeholder, 8, texts, knobs={**loaders.WORKERS_OFF, **knobs}
        )
    )


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
    built = _hf_built(12)
    ranks = _mimo_dp.world(built, modules, seq=LOADER_SEQ, mbs=2, gbs=4, steps=3)
    refused = [r for r in ranks if not isinstance(r, mimostep.ModuleRank)]
    if refused:
        raise fail(
            Impact.REFUSES_VALID_CONFIG, f"MB refused micro-batches of 2 for module DP sizes {modules}: {refused[0]}"
        )
    golden.check(_mimo_dp.check(built, [r for r in ranks if isinstance(r, mimostep.ModuleRank)], mbs=2, gbs=4, steps=3))


@pytest.mark.import_group("full")
def test_micro_batch_must_divide_among_module_ranks(golden):
    """Micro-batches of 3 with the language module on 2 data-parallel ranks: the forward step could
    not slice them evenly, and MB's MIMO loader builder refuses the layout by its own check (only that
    rule broken: the encoder's DP 1 and the global batch 6 divide)."""
    built = _hf_built(6)
    ranks = _mimo_dp.world(built, {_mimo_dp.ENCODER: 1, _mimo_dp.LANGUAGE: 2}, seq=LOADER_SEQ, mbs=3, gbs=6, steps=1)
    golden.check(_mimo_dp.require_refused(ranks, "micro-batches of 3 over 2 language data-parallel ranks"))
