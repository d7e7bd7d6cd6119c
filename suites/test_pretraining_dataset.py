"""Pretraining packs documents into fixed-length samples: megatron-core's GPTDataset through MB's config.

What a user does: documents tokenized with a real tokenizer and written with megatron-core's
``IndexedDatasetBuilder`` (EOD appended, as ``preprocess_data.py --append-eod``), MB's
``GPTDatasetConfig`` (``blend``, ``split``, ``eod_mask_loss``, ``reset_position_ids``,
``reset_attention_mask``, ``drop_last_partial_validation_sequence``), ``finalize()``, MB's
``pretrain_train_valid_test_datasets_provider``. Every sample of the training and validation
splits is checked against the documents as written (the reference is the data itself, not the
dataset's own index):

* its tokens and labels (tokens shifted by one) are a window of the document stream: the tail of
  one document, whole documents, the head of the next, in that order (``wrong-targets``);
* the loss mask trains every real label, except, with ``eod_mask_loss``, an EOD input; a padded
  validation sample's padding trains nothing (in the validation split a wrong mask makes the
  validation loss wrong: ``wrong-loss-normalisation``);
* position ids count from 0, restarting after every EOD with ``reset_position_ids``;
* with ``reset_attention_mask`` no token attends to another document (the dataset's mask);
* ``drop_last_partial_validation_sequence=False`` keeps the incomplete last validation sample,
  padded (one sample more than with the default, which drops it).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from harness.records.impact import Impact, fail, require
from harness.suite.adapters import loaders, mbtokenizer, pretrain, rules
from harness.suite.oracle import corpus, tokenizer
from suites import _layouts, _loader_epoch, _pretrain, _pretrain_cp, _sftcases

pytestmark = pytest.mark.import_group("light")

# no literal EOS or pad inside a document: EOD (= EOS here) ends documents, the pad id pads samples
CORPUS = corpus.CorpusSpec(seed=5, n=20, eos_inside_rate=0.0, eos_last_rate=0.0, pad_rate=0.0)

CASES: dict[str, tuple[int, dict[str, Any]]] = {
    "seq32": (32, {"eod_mask_loss": False}),
    "seq32-eod-mask-loss": (32, {"eod_mask_loss": True}),
    "seq64-reset-positions-and-attention": (
        64,
        {"eod_mask_loss": True, "reset_position_ids": True, "reset_attention_mask": True},
    ),
    "seq32-drop-partial-validation": (32, {"drop_last_partial_validation_sequence": True}),
    "seq32-keep-partial-validation": (32, {"drop_last_partial_validation_sequence": False}),
    # a CP = 2 run declaring its CP size on the dataset config (megatron-core documents it as "needed
    # for padding in packed sequences"): the samples stay windows of the documents, the golden pins
    # them (padding for CP that megatron-core starts to add shows as a change)
    "seq32-cp2-declared": (32, {"eod_mask_loss": False, "context_parallel_size": 2}),
}


# a tokenizer that pads with its EOS (= EOD): megatron-core's documented guard moves the pad id off
# EOD unless allow_ambiguous_pad_tokens opts into the collision
COLLIDING = {
    "seq32-pad-is-eod": (32, {"eod_mask_loss": False, "allow_ambiguous_pad_tokens": False}),
    "seq32-pad-is-eod-allowed": (32, {"eod_mask_loss": False, "allow_ambiguous_pad_tokens": True}),
}


@functools.cache
def _pad_is_eos_tokenizer() -> Any:
    return mbtokenizer.load_tokenizer(tokenizer.write_tokenizer_dir(pad_is_eos=True))


@functools.cache
def _built(name: str) -> pretrain.PretrainBuild:
    seq, knobs = CASES[name] if name in CASES else COLLIDING[name]
    tok = _pad_is_eos_tokenizer() if name in COLLIDING else _sftcases.load_tokenizer()
    texts = tuple(f"{e['input']} {e['output']}" for e in corpus.examples(CORPUS))
    return pretrain.pretraining_splits(pretrain.PretrainRequest(texts, tok, seq, knobs=knobs))


@pytest.mark.parametrize("name", sorted(CASES))
def test_samples_are_windows_of_the_documents(golden, name):
    b = _built(name)
    knobs = CASES[name][1]
    tok = _sftcases.load_tokenizer()
    eod, pad = int(tok.eod), _pretrain.pad_id(b.train)
    padded = {}
    for split, ds in (("train", b.train), ("validation", b.valid)):
        require(ds is not None and len(ds) > 0, Impact.CRASH, f"MB built no {split} samples")
        padded[split] = [
            k
            for k in range(len(ds))
            if _pretrain.check_sample(f"{split} sample {k}", ds[k], b.documents, knobs, eod, pad)
        ]
    require(not padded["train"], Impact.TRAINS_PADDING, f"training samples padded: {padded['train']}")
    golden.check(
        {
            "samples": {"train": len(b.train), "validation": len(b.valid)},
            "padded_validation": padded["validation"],
            "train": [_pretrain.plain(b.train[k], "tokens") for k in range(len(b.train))],
        }
    )


def test_partial_validation_sequence_kept_or_dropped(golden):
    """``drop_last_partial_validation_sequence``: by default the incomplete last validation sample is
    dropped (no validation sample padded); ``False`` keeps it as one more sample, padded, its padding
    untrained (checked per sample above)."""
    dropped, kept = _built("seq32-drop-partial-validation"), _built("seq32-keep-partial-validation")
    tok = _sftcases.load_tokenizer()
    eod, pad = int(tok.eod), _pretrain.pad_id(dropped.valid)
    drop_pad = [
        k
        for k in range(len(dropped.valid))
        if _pretrain.check_sample(f"validation sample {k}", dropped.valid[k], dropped.documents, {}, eod, pad)
    ]
    keep_pad = [
        k
        for k in range(len(kept.valid))
        if _pretrain.check_sample(f"validation sample {k}", kept.valid[k], kept.documents, {}, eod, pad)
    ]
    require(not drop_pad, Impact.TRAINS_PADDING, f"drop_last_partial_validation_sequence: padded samples {drop_pad}")
    require(
        len(kept.valid) == len(dropped.valid) + 1 and len(keep_pad) == 1,
        Impact.WRONG_LOSS_NORMALISATION,
        f"keeping the partial validation sample: {len(kept.valid)} samples ({len(keep_pad)} padded), dropping it: "
        f"{len(dropped.valid)}: validation must see its last tokens once, in one padded sample",
    )
    golden.check({"dropped": len(dropped.valid), "kept": len(kept.valid)})


def test_pad_that_collides_with_eod_is_moved_off_it(golden):
    """A tokenizer whose pad is its EOS (= EOD): by default megatron-core pads with an id no document
    holds, so every EOD keeps its place in the inputs and every EOD label trains (checked per sample,
    as above); ``allow_ambiguous_pad_tokens=True`` is the documented opt-in to the collision (EOD
    then counts as padding), announced by a warning."""
    import warnings

    b = _built("seq32-pad-is-eod")
    eod = int(_pad_is_eos_tokenizer().eod)
    pad = int(getattr(b.train, "_pad_token_id", eod))
    require(pad != eod, Impact.DROPS_TRAINED_TOKEN, f"the pad id stays the EOD id {eod}: every EOD label is masked")
    for k in range(len(b.train)):
        _pretrain.check_sample(f"train sample {k}", b.train[k], b.documents, COLLIDING["seq32-pad-is-eod"][1], eod, pad)
    _built.cache_clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        allowed = _built("seq32-pad-is-eod-allowed")
    said = [str(w.message) for w in seen if "collides" in str(w.message)]
    require(
        said and int(getattr(allowed.train, "_pad_token_id", eod)) == eod,
        Impact.ACCEPTS_INVALID_CONFIG,
        "allow_ambiguous_pad_tokens=True keeps the colliding pad id with a warning; got "
        f"pad {getattr(allowed.train, '_pad_token_id', None)}, warnings {said}",
    )
    golden.check({"pad_moved_to": pad, "samples": len(b.train)})


def test_an_undefined_eod_mask_loss_is_refused(golden):
    """``GPTDatasetConfig.eod_mask_loss`` left at its default (None) is refused by MB's own check
    ("eod_mask_loss must be defined"): whether an EOD input trains is the user's statement to make,
    never a silent guess (``if eod_mask_loss:`` would read None as "train EOD" in packed samples).
    The valid neighbour is every case above, which states it."""
    texts = tuple(f"{e['input']} {e['output']}" for e in corpus.examples(CORPUS))
    req = pretrain.PretrainRequest(texts, _sftcases.load_tokenizer(), 32, knobs={"eod_mask_loss": None})
    try:
        pretrain.pretraining_splits(req)
    except Exception as exc:  # attributed, never counted blindly
        rules.require_refused_by(exc, rules.Rule.EOD_MASK_LOSS_DEFINED, "an undefined eod_mask_loss")
        golden.check({"refused_by": rules.Rule.EOD_MASK_LOSS_DEFINED.value})
        return
    raise fail(Impact.ACCEPTS_INVALID_CONFIG, "eod_mask_loss=None (undefined) was accepted: EOD's loss is a guess")


@pytest.mark.import_group("full")  # MB's gpt_step and MCore's parallel state
@pytest.mark.parametrize("name", sorted(_pretrain.STEP))
def test_step_keeps_documents_apart(golden, name):
    """With ``reset_attention_mask`` what MB's ``get_batch`` hands the model attends within documents:
    a mask that blocks every earlier document, or packed boundaries at every document start.
    One sample per micro-batch (packed boundaries need micro-batch 1)."""
    seq, knobs = CASES["seq64-reset-positions-and-attention"]
    texts = tuple(f"{e['input']} {e['output']}" for e in corpus.examples(CORPUS))
    req = pretrain.PretrainRequest(
        texts, _sftcases.load_tokenizer(), seq, knobs={**knobs, **_pretrain.step_knobs(name)}
    )
    build = pretrain.pretraining_splits(req)
    crossing, seen = _pretrain.check_step(build, 4, int(_sftcases.load_tokenizer().eod))
    if not crossing:  # the input's fault: the case would test nothing
        raise RuntimeError("no sample holds two documents")
    golden.check({"samples_with_two_documents": crossing, "seen": seen})


@pytest.mark.import_group("full")  # MB's loader builder reads the training config
@pytest.mark.parametrize("drop_last", [False, True], ids=["keep-last", "drop-last"])
def test_drop_last_through_mb_loader(golden, drop_last):
    """``drop_last`` on the pretraining config (``DataloaderConfig``'s, documented as whether to drop
    the last incomplete batch), through MB's loader builder with a "single" loader on 2
    data-parallel ranks (micro-batch 2, global batch 4, 3 steps; suites/_loader_epoch.py): MB
    builds the split for those 3 steps, so both ranks take 3 micro-batches and, between them,
    read samples 0..11 exactly once, whichever ``drop_last``."""
    texts = tuple(f"{e['input']} {e['output']}" for e in corpus.examples(CORPUS))
    knobs = {"eod_mask_loss": False, "dataloader_type": "single", "drop_last": drop_last, **loaders.WORKERS_OFF}
    build = pretrain.pretraining_splits(
        pretrain.PretrainRequest(texts, _sftcases.load_tokenizer(), 32, samples=(12, 1, 0), knobs=knobs)
    )
    golden.check(_loader_epoch.check_sampled(build.train, build.config, seq=32, dp=2, mbs=2, gbs=4, steps=3))


@pytest.mark.import_group("full")  # MB's config validation, gpt_step and MCore's parallel state
def test_inter_document_masking_under_cp(golden):
    """Pretraining with megatron-core's inter-document masking at CP = 2, the CP size declared on the
    dataset config (suites/_pretrain_cp.py): MB refuses the combination naming
    ``inter_document_masking``, or every CP rank of a gloo world gets TE's slice of each sample
    that holds two documents, the CP = 1 logits and loss totals."""
    seq, knobs = CASES["seq64-reset-positions-and-attention"]
    knobs = {**knobs, **_pretrain.step_knobs("inter-document-masking"), "context_parallel_size": 2}
    texts = tuple(f"{e['input']} {e['output']}" for e in corpus.examples(CORPUS))
    build = pretrain.pretraining_splits(pretrain.PretrainRequest(texts, _sftcases.load_tokenizer(), seq, knobs=knobs))
    outcome = _pretrain_cp.validate(build.config, seq, 2)
    if not outcome["accepted"]:
        if "inter_document_masking" not in outcome["message"]:  # the case's config, not the combination
            raise RuntimeError(f"MB refused the CP 2 pretraining config for another reason: {outcome['message']}")
        return
    eod = int(_sftcases.load_tokenizer().eod)
    crossing = [r for r in range(len(build.train)) if eod in build.train[r]["tokens"][:-1].tolist()]
    if not crossing:  # the input's fault: the case would test nothing
        raise RuntimeError("no sample holds two documents")
    result = _pretrain_cp.run(build, crossing, 2)
    _layouts.assert_ok(result.violations, "CP 2 over inter-document masked pretraining samples")
    golden.check(result.golden)
