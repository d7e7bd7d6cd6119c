"""The pretraining space of exploration: documents packed into fixed-length samples by megatron-core's
``GPTDataset`` through MB's ``GPTDatasetConfig``, with the document lengths and the knobs drawn.

Pretraining packs too: a sample is a window of the document stream, so the bugs live where a
document ends at a sample's edge (a document of exactly ``seq_length`` tokens, one under, one
over, one token long) and where a knob meets that edge (``eod_mask_loss``, ``reset_position_ids``,
``reset_attention_mask``, ``drop_last_partial_validation_sequence``). Hypothesis draws the document
count, each document's length (around ``seq_length`` and far past it) and the knobs, and with
``reset_attention_mask`` a variant of MB's step (suites/_pretrain.STEP: the dataset's mask, MB's
default, megatron-core's ``inter_document_masking``) whose model input must keep documents apart; the documents
are written with megatron-core's ``IndexedDatasetBuilder`` and built with MB's provider
(:mod:`harness.suite.adapters.pretrain`), and every training and validation sample is held to the checks
of the ``pretraining_dataset`` suite (suites/_pretrain.py). A drawn case is an
:class:`~suites._explore.ExploredCase` with ``pretrain=True``: ``n`` documents of ``min_words`` to
``max_words`` words, a share ``long_rate`` of them ``long_words`` long, ``seq`` the sample length.
"""

from __future__ import annotations

import random
from typing import Any

from harness.errors import Untestable
from harness.records.impact import Impact, require
from harness.suite.oracle import tokenizer
from suites._explore import ExploredCase, named

# sample lengths: small, so that a few short documents already span several samples
PRETRAIN_SEQS = (16, 32, 64)
STEP_SAMPLES = 8  # training samples a drawn step variant hands the model, one micro-batch each


def pretrain_cases() -> Any:
    """The Hypothesis strategy of the pretraining space (see the module docstring)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: Any) -> ExploredCase:
        seq = d(st.sampled_from(PRETRAIN_SEQS))
        min_words = d(st.integers(1, 8))
        fields: dict[str, Any] = {
            "seed": d(st.integers(0, 2**31 - 1)),
            # enough documents that MB's 8,2,0 split leaves the validation split at least one
            "n": d(st.integers(5, 24)),
            "seq": seq,
            "min_words": min_words,
            "max_words": d(st.integers(min_words, 2 * seq)),
            "long_rate": d(st.sampled_from((0.0, 0.25, 1.0))),
            # a document is its words and EOD: these put its end one short of, at, and one past a sample's edge
            "long_words": d(st.sampled_from((seq - 2, seq - 1, seq, 2 * seq - 1, 3 * seq))),
            "eod_mask_loss": d(st.booleans()),
            "reset_position_ids": d(st.booleans()),
            "reset_attention_mask": d(st.booleans()),
            "keep_partial_validation": d(st.booleans()),
        }
        # with reset_attention_mask, what MB's step hands the model is checked too, for a drawn step variant
        steps = step_variants()
        fields["step"] = d(st.sampled_from(("", *steps))) if fields["reset_attention_mask"] and steps else ""
        return named(ExploredCase(id="", kind="prompt", pretrain=True, **fields))

    return draw()


def step_variants() -> tuple[str, ...]:
    """The step variants (suites/_pretrain.STEP) this MB and megatron-core can run (none: no step check)."""
    from suites import _pretrain

    out = []
    for name in _pretrain.STEP:
        try:
            _pretrain.step_knobs(name)
        except Untestable:
            continue
        out.append(name)
    return tuple(out)


def documents(case: ExploredCase) -> tuple[str, ...]:
    """The case's documents as a user's text: ``n`` documents of plain words (no EOS or pad inside:
    EOD, appended when written, ends a document), lengths as the case draws them, seeded."""
    rng = random.Random(case.seed)
    words = [w for w in tokenizer.WORDS if w.startswith("w")]
    out = []
    for _ in range(case.n):
        k = case.long_words if rng.random() < case.long_rate else rng.randint(case.min_words, case.max_words)
        out.append(" ".join(rng.choice(words) for _ in range(k)))
    return tuple(out)


def knobs(case: ExploredCase) -> dict[str, Any]:
    """The ``GPTDatasetConfig`` packing knobs the case sets (and its step variant's fields)."""
    from suites import _pretrain

    return {
        "eod_mask_loss": case.eod_mask_loss,
        "reset_position_ids": case.reset_position_ids,
        "reset_attention_mask": case.reset_attention_mask,
        "drop_last_partial_validation_sequence": not case.keep_partial_validation,
        **(_pretrain.step_knobs(case.step) if case.step else {}),
    }


def check(case: ExploredCase) -> dict[str, Any]:
    """Build the case's splits through MB and hold every sample to the pretraining checks (raises on
    a violation); returns the sample counts and training tokens in golden form (change only)."""
    from harness.suite.adapters import pretrain
    from suites import _pretrain, _sftcases

    tok = _sftcases.load_tokenizer()
    build = pretrain.pretraining_splits(pretrain.PretrainRequest(documents(case), tok, case.seq, knobs=knobs(case)))
    eod, pad = int(tok.eod), _pretrain.pad_id(build.train)
    padded: dict[str, list[int]] = {}
    for split, ds in (("train", build.train), ("validation", build.valid)):
        samples = range(len(ds)) if ds is not None else range(0)
        padded[split] = [
            k
            for k in samples
            if _pretrain.check_sample(f"{split} sample {k}", ds[k], build.documents, knobs(case), eod, pad)
        ]
    require(not padded["train"], Impact.TRAINS_PADDING, f"training samples padded: {padded['train']}")
    seen: list[dict[str, Any]] = []
    if case.step:
        _, seen = _pretrain.check_step(build, STEP_SAMPLES, eod)
    if not case.keep_partial_validation:
        require(
            not padded["validation"],
            Impact.WRONG_LOSS_NORMALISATION,
            f"drop_last_partial_validation_sequence (MB's default): validation samples padded {padded['validation']}",
        )
    return {
        "samples": {
            s: len(ds) if ds is not None else 0 for s, ds in (("train", build.train), ("validation", build.valid))
        },
        "padded_validation": padded["validation"],
        "step": seen,
        "train": [_pretrain.plain(build.train[k], "tokens") for k in range(len(build.train))],
    }
