"""The checks of MB's direct Hugging Face SFT path, shared by its suite and by exploration.

One request (rows, processor, preprocessing, collate knobs, an optional (CP, TP, SP) layout MB
finalises) through ``direct_sft``; the reference is the same rows through the same builder with
no layout and every padding knob off (MB's own unpadded path). :func:`check` holds the batch to
what its knobs document: unpacked rows at the documented width (``pad_to_multiple_of`` capped at
``seq_length``, exactly ``seq_length`` with ``pad_to_max_length``, divisible as CP/SP split them)
and equal to the reference per real token with untrained padding; in-batch packed rows on MB's
multiple and held to the differential oracle. Used by suites/test_direct_sft.py and the direct
space of suites/_explore.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harness.records.impact import Impact, fail, require
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import vlmstep
from harness.suite.adapters.chatcollate import collated_examples
from harness.suite.adapters.directsft import DirectSFTBuild, DirectSFTRequest, direct_sft
from harness.suite.oracle import corpus, differential, tokenizer
from harness.suite.oracle.padded import require_documented_width, require_same_real_tokens
from suites import _sftcases
from suites._inputs import IGNORE_INDEX


def corpus_request(
    kind: str,
    seed: int,
    *,
    n: int = 5,
    seq: int = 64,
    layout: tuple[int, int, bool] | None = None,
    knobs: dict[str, Any] | None = None,
    long_rate: float = 0.3,
    truncation_method: str | None = None,
    pipeline: int = 1,
) -> DirectSFTRequest:
    """A user's own corpus for the direct path: ``n`` seeded rows of ``kind`` ("chat" or
    "completion"), some past ``seq`` (``long_rate``), the offline tokenizer, the config knobs."""
    spec = corpus.CorpusSpec(
        seed=seed,
        n=n,
        layout="chat" if kind == "chat" else "prompt",
        eos_inside_rate=0.0,
        eos_last_rate=0.0,
        pad_rate=0.0 if truncation_method else 0.2,
        long_rate=long_rate,
    )
    return DirectSFTRequest(
        tuple(corpus.examples(spec)),
        tokenizer.write_tokenizer_dir(),
        seq,
        kind=kind,
        layout=layout,
        truncation_method=truncation_method,
        knobs=dict(knobs or {}),
        pipeline=pipeline,
    )


def need(layout: tuple[int, int, bool] | None) -> int:
    """What CP's and SP's splits need a row's width to divide by (the documented lcm, 1 without a layout)."""
    return vlmstep.in_batch_multiple(*layout) if layout is not None else 1


def accepted(build: DirectSFTBuild) -> None:
    if build.validation is not None and not build.validation["accepted"]:
        raise fail(
            Impact.REFUSES_VALID_CONFIG,
            f"MB refuses a valid layout: {build.validation['error_class']}: {build.validation['message']}",
        )


def reference(req: DirectSFTRequest, seq: int | None = None) -> dict[str, Any]:
    """MB's own unpadded, unpacked batch of the same rows (no layout, multiple 1)."""
    plain = replace(req, layout=None, pipeline=1, knobs={"pad_to_multiple_of": 1})
    if seq:
        plain = replace(plain, seq_length=seq)
    return direct_sft(plain).batch


def check_padded(req: DirectSFTRequest) -> dict[str, Any]:
    """Unpacked rows: the documented width, equal to the unpadded path per real token, padding untrained."""
    build = direct_sft(req)
    accepted(build)
    got, ref = build.batch, reference(req)
    width, multiple = got["tokens"].shape[1], int(build.config.pad_to_multiple_of)
    longest = max(ref["token_count"])
    require(width <= req.seq_length, Impact.CRASH, f"rows {width} wide, past seq_length {req.seq_length}")
    split = need(req.layout)
    require(
        width % split == 0, Impact.CRASH, f"rows {width} wide: CP/SP split {req.layout} needs a multiple of {split}"
    )
    # pipeline stages exchange activations of one fixed shape: with PP > 1 every row is seq_length
    # wide whatever the user set (MB's validation turns pad_to_max_length on)
    to_max = bool(req.knobs.get("pad_to_max_length")) or req.pipeline > 1
    require_documented_width(
        f"PP {req.pipeline}: " if req.pipeline > 1 else "", width, longest, multiple, req.seq_length, to_max
    )
    require_same_real_tokens(got, ref, IGNORE_INDEX)
    return {"multiple": multiple, "width": width, "token_count": list(ref["token_count"])}


def check_in_batch(req: DirectSFTRequest) -> dict[str, Any]:
    """In-batch packing in the collate: one THD row, each sequence on MB's multiple, held to the oracle."""
    build = direct_sft(req)
    accepted(build)
    multiple = int(build.config.in_batch_packing_pad_to_multiple_of)
    split = need(req.layout)
    require(multiple % split == 0, Impact.CRASH, f"MB's in-batch multiple {multiple} misses CP/SP's {split}")
    examples = collated_examples(reference(req))
    (row,) = batch_ops.packed_rows(build.batch)
    ids = tokenizer.special_ids(_sftcases.load_tokenizer())
    differential.compare([row], examples, pad_seq_to_mult=multiple, special_ids=ids).assert_ok()
    return {"multiple": multiple, "cu_seqlens_q_padded": list(row.cu_seqlens_q_padded or ())}


def check(req: DirectSFTRequest) -> dict[str, Any]:
    """Whichever of the two the request's knobs ask for (in-batch packing in the collate or not)."""
    return check_in_batch(req) if req.knobs.get("enable_in_batch_packing") else check_padded(req)
