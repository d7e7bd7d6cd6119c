"""The MIMO checks the ``mimo_dataset`` suite and the MIMO exploration space share.

A MIMO sample (MB's MIMO dataset, through its mock or Hugging Face provider) holds one placeholder
per encoder embedding at the start, then its text, padded to ``seq_length``; labels are the next
tokens and the loss trains every text target and nothing else (:func:`check_sample`). MB's MIMO
loader (:func:`loader_epoch`) hands every sample once, each as the provider built it. The user's
data here: an image folder with one distinct image and one marked text per row
(:func:`hf_built`, :func:`marked_texts`), so a row names its sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from harness import features
from harness.records.impact import Impact, fail, require
from harness.suite.adapters import loaders, mimo, mimoloader, rules
from harness.suite.oracle import tokenizer
from suites._explain import multiset_difference

PLACEHOLDER = "<|im_start|>"  # a special token of the offline tokenizer, as MIMO recipes reserve one
ENCODER = "vision"  # the modality name MB's MIMO providers are configured with here


def pixels(fields: dict[str, Any], row: int | None = None) -> str:
    """A digest of a sample's image (``row``: of a collated batch), '' without one."""
    values = (fields.get("modality_inputs") or {}).get(ENCODER, {}).get("pixel_values")
    if values is None:
        return ""
    values = values if row is None else values[row]
    return hashlib.sha1(values.detach().contiguous().numpy().tobytes()).hexdigest()


def leading(ids: list[int], token: int) -> int:
    return next((k for k, t in enumerate(ids) if t != token), len(ids))


def same_default_count(seen: list[dict[str, Any]], enc: int | None) -> None:
    """Under MB's default length every sample with the image holds the same number of placeholders:
    one encoder, one output length."""
    if enc is not None:  # a named length: every sample was held to it
        return
    counts = {x["placeholders"] for x in seen if x["image"]}
    if len(counts) > 1:
        raise fail(Impact.WRONG_LOGITS, f"placeholder counts {sorted(counts)} differ between samples of one encoder")


def check_sample(i: int, s: dict, seq: int, enc: int | None, text_ids: list[int]) -> dict[str, Any]:
    """One sample: its placeholders first, then its text's tokens, ``seq`` wide, text targets trained.
    ``enc`` None: MB's default length, at least one placeholder (how many is reported, for the golden)."""
    placeholder = tokenizer.vocab()[PLACEHOLDER]
    ids, labels = s["input_ids"].tolist(), s["labels"].tolist()
    mask = s["loss_mask"].tolist() if "loss_mask" in s else []
    present = ENCODER in (s.get("modality_inputs") or {})
    n_ph = (enc if enc is not None else max(1, leading(ids, placeholder))) if present else 0
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


def hf_built(texts: tuple[str, ...], seq: int, enc: int | None, **knobs: Any) -> mimo.MimoSamples:
    """A user's image folder (one distinct image per text) through MB's Hugging Face MIMO provider, the
    loader's workers off, the provider's ``knobs`` set."""
    placeholder = tokenizer.vocab()[PLACEHOLDER]
    return mimo.mimo_hf_samples(
        mimo.MimoHFRequest(
            tokenizer.write_tokenizer_dir(), seq, placeholder, enc, texts, knobs={**loaders.WORKERS_OFF, **knobs}
        )
    )


def marked_texts(lengths: list[int], offset: int = 0) -> tuple[str, ...]:
    """One text per length: a row marker first (a truncated sample still names its row), then that many
    words of the offline vocabulary."""
    words = tokenizer.WORDS
    return tuple(
        " ".join([tokenizer.MARKERS[i], *(words[(offset + i + k) % len(words)] for k in range(n))])
        for i, n in enumerate(lengths)
    )


def check_hf_samples(
    samples: list[dict[str, Any]], texts: tuple[str, ...], seq: int, enc: int | None
) -> list[dict[str, Any]]:
    """Every sample of the Hugging Face provider over ``texts``: one per row, its image kept, and the
    contract of :func:`check_sample` against the tokenizer's encoding of its row's text."""
    from transformers import AutoTokenizer

    require(len(samples) == len(texts), Impact.CRASH, f"MB built {len(samples)} samples of {len(texts)} rows")
    tok = AutoTokenizer.from_pretrained(str(tokenizer.write_tokenizer_dir()))
    by_marker = {tokenizer.vocab()[tokenizer.MARKERS[i]]: i for i in range(len(texts))}
    seen = []
    for i, s in enumerate(samples):
        ids = s["input_ids"].tolist()
        row = next((by_marker[t] for t in ids if t in by_marker), None)
        if row is None:
            raise fail(Impact.WRONG_TARGETS, f"sample {i}: the text of no row of the folder ({ids})")
        require(ENCODER in (s.get("modality_inputs") or {}), Impact.WRONG_LOGITS, f"sample {i}: its image is gone")
        if "loss_mask" not in s:
            raise features.missing("mimo-dataset-loss-mask", "the MIMO dataset emits no labels shift or loss mask")
        seen.append(check_sample(i, s, seq, enc, list(tok(texts[row])["input_ids"])))
    same_default_count(seen, enc)
    return seen


def loader_epoch(built: mimo.MimoSamples, *, seq: int, mbs: int, gbs: int, steps: int) -> dict[str, Any]:
    """``steps`` steps of MB's MIMO loader over ``built.provider`` (sized by MB to ``steps x gbs``
    samples, as ``built`` was): every micro-batch ``mbs`` rows wide, every row one of the
    provider's samples as built (tokens with their own image, labels, loss mask), every sample once."""
    batches = mimoloader.mimo_train_micro_batches(
        built.provider, seq_length=seq, micro_batch_size=mbs, global_batch_size=gbs, steps=steps
    ).micro_batches
    index = {(tuple(s["input_ids"].tolist()), pixels(s)): i for i, s in enumerate(built.samples)}
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
            i = index.get((ids, pixels(batch, r)))
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


def require_no_room_refused(build: Callable[[], Any], what: str) -> None:
    """``build`` (MB building samples whose encoder tokens fill ``seq_length``) must be refused by MB's
    own check naming ``seq_length``: accepted, no text would train; refused another way, MB crashed."""
    try:
        build()
    except (ValueError, AssertionError) as exc:
        if rules.raising_check(exc) is None or "seq_length" not in str(exc):
            raise fail(Impact.CRASH, f"refused, but not by MB's check on seq_length: {exc}") from exc
        return
    raise fail(Impact.ACCEPTS_INVALID_CONFIG, f"{what} accepted: no room for text")
