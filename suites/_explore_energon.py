"""The Energon space of exploration: drawn image/chat samples through MB's Energon VLM data path.

A VLM user's data reaches the step through WebDataset shards, Energon's loader and a task encoder
whose collate pads or packs the micro-batch; the hand-written cases (suites/test_energon_dataset.py)
fix a few sample sets and knob settings. Here Hypothesis draws the samples (how many, how long an
answer can be, so that some are longer than ``seq_length`` and some exactly fill it, how many have
a second turn, one shard or two) and the loader's knobs (``micro_batch_size``, ``seq_length``,
``pad_to_multiple_of`` with MB's default 128, ``pad_to_max_length``, ``enable_in_batch_packing``
with ``in_batch_packing_pad_to_multiple_of``, ``defer_in_batch_packing_to_step``, and the task
encoder: MB's HF encoder or the model-owned Qwen-VL one). A drawn case is an
:class:`~suites._explore.ExploredCase` with ``energon=True``: ``n`` samples with answers of 1 to
``max_words`` words, ``mult`` the padding multiple of its mode; it is judged by the checks of the
``energon_dataset`` suite (suites/_energon.py) against MB's own unpadded path, and a case the
loader packs in batch also to the loss (suites/_energon_step.py: MB's VLM step and loss function
into a small real model, packed against unpacked).
"""

from __future__ import annotations

from typing import Any

from harness.suite.adapters import needs
from suites import _energon
from suites._explore import ExploredCase, named

ENCODERS = ("hf", "qwen-vl")
# sequence lengths around a sample's length: the chat template, an image's placeholders and a question
# take about 18 tokens, so answers of a few words to a few dozen end under, at and past each
ENERGON_SEQS = (24, 32, 64)


def energon_cases() -> Any:
    """The Hypothesis strategy of the Energon space (see the module docstring)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: Any) -> ExploredCase:
        n = d(st.integers(1, 8))
        in_batch = d(st.booleans())
        defer = in_batch and d(st.booleans())
        fields: dict[str, Any] = {
            "seed": d(st.integers(0, 2**31 - 1)),
            "n": n,
            "mbs": d(st.integers(1, 4)),
            "seq": d(st.sampled_from(ENERGON_SEQS)),
            "max_words": d(st.integers(1, 40)),
            "multi_turn_rate": d(st.sampled_from((0.0, 0.3, 1.0))),
            "shards": d(st.sampled_from((1, 2))) if n > 1 else 1,
            "encoder": d(st.sampled_from(ENCODERS)),
            "in_batch": in_batch,
            "defer": defer,
            # the padding multiple of the drawn mode: in_batch_packing_pad_to_multiple_of when packing in the
            # loader, else pad_to_multiple_of (128: MB's default)
            "mult": d(st.sampled_from((1, 2, 4, 8) if in_batch and not defer else (1, 8, 16, 128))),
            "pad_to_max_length": not (in_batch and not defer) and d(st.booleans()),
        }
        return named(ExploredCase(id="", energon=True, long_rate=0.0, **fields))

    return draw()


def energon_case(case: ExploredCase) -> _energon.Case:
    """The Energon request ``case`` names, as a case of the ``energon_dataset`` suite."""
    if case.in_batch:
        knobs: dict[str, Any] = {"enable_in_batch_packing": True}
        if case.defer:
            knobs |= {"defer_in_batch_packing_to_step": True, "pad_to_multiple_of": case.mult}
        else:
            knobs["in_batch_packing_pad_to_multiple_of"] = case.mult
    else:
        knobs = {"pad_to_multiple_of": case.mult}
    if case.pad_to_max_length:
        knobs["pad_to_max_length"] = True
    return _energon.Case(
        case.id,
        case.seed,
        mbs=case.mbs,
        seq=case.seq,
        n=case.n,
        shards=case.shards,
        knobs=knobs,
        encoder=case.encoder,
        max_answer=case.max_words,
        multi_turn_rate=case.multi_turn_rate,
    )


def check(case: ExploredCase) -> dict[str, Any]:
    """Hold the drawn case to the Energon checks; returns what it trains in golden form."""
    from harness.suite.adapters.energon import energon_batches

    needs(energon_batches)  # an era without MB's Energon builder: untestable before building anything
    ecase = energon_case(case)
    ref = _energon.check_reference(ecase)
    build = energon_batches(ecase.request())
    tokens = {k: len(e.tokens) for k, e in sorted(ref.items())}
    if not case.in_batch:
        return {"widths": _energon.check_padded(ecase, build), "token_count": tokens}
    if case.defer:
        return {**_energon.check_deferred(ecase, build), "token_count": tokens}
    packed = _energon.check_packed(ecase, build)
    from suites._energon_step import check_step

    check_step(ecase, build)  # to the loss: MB's VLM step and loss function, packed against unpacked
    return {**packed, "token_count": tokens}
