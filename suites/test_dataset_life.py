"""The packed data's life past one preparation, through MB's own data path (issue 48).

A training run outlives the one moment ``offline_packed_dataset`` checks (one split prepared once
into a fresh directory): a user's dataset root holds the training and validation splits with one
metadata file, is prepared again when a knob that decides the packs changes, is left half written
when a preparation is killed, and holds examples at and past the caps MB applies. Each case is
built the way a user's data is, through MB's dataset builder, and held to the same reference: MB's
own unpacked path over the same examples at the same commit (suites/_sftcases.py), per real token;
padding never trains; every segment keeps ``pad_seq_to_mult``.

* every split of one root: each split's rows hold exactly its examples, its own metadata entry,
  the static ``pad_cu_seqlens`` shape that entry gives;
* a re-prepared root: after one knob changes (pack size, multiple, loss, truncation, one example's
  cap, tokenizer, chat template) MB packs again or refuses, never trains the old packs;
* an interrupted preparation: MB prepares again or refuses by an error of its own, never trains
  from what was left;
* the length caps: a pack size off the multiple and ``max_single_sequence_length``: an example up
  to the cap trains whole, one past it its first ``cap`` tokens, every segment keeps the multiple.

Epochs and a resumed run are the ``data_loaders`` suite's; the same dimensions are drawn by the
data exploration (suites/_explore.py, suites/_explore_life.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.records.impact import Impact, fail
from harness.suite.adapters import sft
from harness.suite.oracle import corpus, tokenizer
from suites import _sftcases

pytestmark = pytest.mark.import_group("light")


# clean answers (no literal EOS): MB 0.6.2's EOS masking, a known bug of its own, cannot hide these
LIFE_CASE = _sftcases.CleanCase("life-prompt-mult2-pad-cu-seqlens", seed=301, mult=2, pad_cu_seqlens=True, n=20)


def _held(case: _sftcases.SFTCase, ds, what: str):
    """``ds``'s packed rows held to MB's own unpacked path of ``case``'s examples; the report."""
    _, rows = _sftcases.collated_rows(ds)
    examples = list(_sftcases.reference(case))
    report = _sftcases.compare(case, examples, rows, _sftcases.special_ids(case))
    if not report.ok:
        from harness.records.oracle import InvariantFailure

        raise InvariantFailure(f"{what}: {report.summary()}", report.violations)
    return report, rows


def test_every_split_is_packed_from_its_own_rows_with_its_own_metadata(tmp_path):
    """Training and validation prepared into one dataset root, as MB's builder does for a user (one
    metadata file, one packed file per split): each split's packed rows hold exactly that split's
    examples by MB's own unpacked path, the metadata has one entry per split whose
    ``max_samples_per_bin`` and ``pack_size`` are that split's own, and with ``pad_cu_seqlens`` every
    row of every split has the static boundary shape the metadata gives."""
    train = LIFE_CASE
    valid = dataclasses.replace(LIFE_CASE, seed=LIFE_CASE.seed + 500, n=9)
    root = _sftcases.split_root(tmp_path / "root", train, valid)
    build = sft.build_sft(_sftcases.request(train, root, validation=True))
    if build.valid is None:
        raise fail(Impact.DROPS_TRAINED_TOKEN, "do_validation: MB's builder built no validation split")
    reports = {}
    for split, case, ds in (("training", train, build.train), ("validation", valid, build.valid)):
        reports[split] = _held(case, ds, split)
    meta_path = build.metadata_path or build.packed_files.get("metadata")
    if meta_path is None or not Path(meta_path).is_file():
        raise fail(Impact.CRASH, f"no packing metadata where MB's builder says: {meta_path}")
    entries = json.loads(Path(meta_path).read_text())
    if not isinstance(entries, list) or len(entries) != 2:
        raise fail(Impact.CRASH, f"one metadata entry per split prepared (2), got {entries!r}"[:400])
    widest = max(int(e["max_samples_per_bin"]) for e in entries)
    for entry, split in zip(entries, ("training", "validation")):
        report, rows = reports[split]
        most = max(len(r.segments) for r in report.rows)
        if int(entry["max_samples_per_bin"]) != most or int(entry.get("pack_size", train.seq)) != train.seq:
            raise fail(
                Impact.CRASH,
                f"{split}: its metadata says {entry['max_samples_per_bin']} sequences at most in a pack of "
                f"{entry.get('pack_size')}, its packed rows hold up to {most} in packs of {train.seq}",
            )
        shapes = {len(r.cu_seqlens_q) for r in rows if r.cu_seqlens_q is not None}
        if len(shapes) > 1:  # CUDA graphs need one shape
            raise fail(
                Impact.CRASH, f"{split}: cu_seqlens_q: boundary shapes vary between micro-batches: {sorted(shapes)}"
            )
        if shapes != {widest + 2}:
            raise fail(
                Impact.CRASH,
                f"{split}: pad_cu_seqlens boundary shape {sorted(shapes)}, the metadata's static one is {widest + 2}",
            )


# (id, the first preparation's configuration over LIFE_CASE, the knob a user changes before the second)
REPREPARED = [
    ("pack-size", {}, {"seq": 48}),
    ("pad-seq-to-mult", {}, {"mult": 4}),
    ("full-loss", {}, {"full_loss": True}),
    ("truncation-left", {"long_rate": 0.4}, {"truncation_method": "left"}),
    ("max-single", {"long_rate": 0.4}, {"max_single": 40}),
    ("tokenizer", {}, {"other_tokenizer": True}),
    ("chat-template", {"kind": "chat", "long_rate": 0.0, "seq": 128}, {"chat_template": tokenizer.OTHER_CHAT_TEMPLATE}),
]


@pytest.mark.parametrize(("first", "knob"), [r[1:] for r in REPREPARED], ids=[r[0] for r in REPREPARED])
def test_a_reprepared_root_never_trains_packs_made_for_other_knobs(tmp_path, first, knob):
    """Prepare, change one knob that decides the packs (the pack size, the multiple, the loss, the
    truncation, one example's cap, the tokenizer, the chat template), prepare again into the same
    dataset root (a user's second run): MB must pack again (or refuse), never train the packs it
    made for the old knob: the second build's rows hold the second configuration's examples by MB's
    own unpacked path."""
    first_case = dataclasses.replace(LIFE_CASE, pad_cu_seqlens=False, mult=1, **first)
    second = dataclasses.replace(first_case, **knob)
    root = corpus.write_dataset_root(tmp_path / "root", first_case.corpus)
    sft.build_sft(_sftcases.request(first_case, root))
    again = sft.build_sft(_sftcases.request(second, root))
    _held(second, again.train, f"prepared again with {sorted(knob)}")


# What a preparation killed part way leaves behind (MB's writer writes the packed file in place,
# then the metadata): the packed file cut short, or the packed file whole and no metadata.
# Or, with a validation split, killed after the training file and before its metadata entry: the
# restart prepares the validation split only, and the metadata then holds its entry alone.
INTERRUPTED = ["packed-file-cut-short", "metadata-never-written", "killed-after-the-training-file"]


@pytest.mark.parametrize("state", INTERRUPTED)
def test_an_interrupted_preparation_is_prepared_again_or_refused(tmp_path, record_property, state):
    """Prepare, leave the dataset root as a preparation killed part way leaves it, build again (the
    user's restart): MB must prepare again (the rows then hold the examples by MB's own unpacked
    path, with one static boundary shape) or stop with an error of its own; it must never train
    from what was left."""
    case = LIFE_CASE
    validation = state == "killed-after-the-training-file"
    root = (
        _sftcases.split_root(tmp_path / "root", case, dataclasses.replace(case, seed=case.seed + 500, n=9))
        if validation
        else corpus.write_dataset_root(tmp_path / "root", case.corpus)
    )
    first = sft.build_sft(_sftcases.request(case, root, validation=validation))
    packed, meta = first.packed_files.get("train"), first.packed_files.get("metadata")
    if packed is None or meta is None or not packed.is_file() or not meta.is_file():
        raise RuntimeError(f"the first preparation left no packed file and metadata: {first.packed_files}")
    if state == "packed-file-cut-short":
        data = packed.read_bytes()
        packed.write_bytes(data[: len(data) // 2])
    elif validation:
        first.packed_files["validation"].unlink()
        meta.unlink()
    else:
        meta.unlink()
    try:
        again = sft.build_sft(_sftcases.request(case, root, validation=validation))
        _, rows = _held(case, again.train, f"built again after an interrupted preparation ({state})")
    except (Exception, SystemExit) as exc:  # 0.3.1 logs the unreadable file and exits
        if not _sftcases.raised_in_mb(exc) or type(exc).__name__ == "InvariantFailure":
            raise
        record_property("harness_note", f"MB refused what was left ({state}): {type(exc).__name__}: {exc}"[:400])
        return
    shapes = {len(r.cu_seqlens_q) for r in rows if r.cu_seqlens_q is not None}
    if len(shapes) > 1:
        raise fail(
            Impact.CRASH, f"{state}: pad_cu_seqlens boundary shapes vary between micro-batches: {sorted(shapes)}"
        )


# The length caps: a pack size that is not a multiple of pad_seq_to_mult (2 * CP for THD context
# parallelism) with many overlong prompts. MB's packing preparation caps a runtime segment at the
# largest multiple of pad_seq_to_mult that fits the pack (64 of 66 with 4, 56 of 62 with 8) and
# keeps the first tokens of an example past it; the seeds give examples at, just below and past
# the cap.
CAP_CASES = [
    _sftcases.CleanCase("cap-66-mult4", seed=401, mult=4, seq=66, long_rate=0.5, n=16),
    _sftcases.CleanCase("cap-62-mult8", seed=401, mult=8, seq=62, long_rate=0.5, n=16),
    _sftcases.CleanCase("cap-62-mult8-left", seed=403, mult=8, seq=62, long_rate=0.5, n=16, truncation_method="left"),
    _sftcases.CleanCase("cap-66-mult4-chat", seed=405, kind="chat", mult=4, seq=66, long_rate=0.5, n=16),
]


@pytest.mark.parametrize("case", CAP_CASES, ids=[c.id for c in CAP_CASES])
def test_length_caps_keep_the_multiple_and_cut_only_past_the_cap(golden, case):
    """Every packed segment keeps the multiple and fits the pack, and the packed rows equal MB's own
    unpacked examples cut at the documented cap, per real token: an example up to the cap trains
    whole, one past it trains its first ``cap`` tokens, nothing past the cap trains and padding
    never does. (Releases before the cap kept such an example whole up to the pack size: rows
    read that way are held to it, and its segment must still keep the multiple.) The golden pins
    how many examples and trained tokens the cap cuts, so a change in
    what the cap cuts is a change in what trains."""
    b = _sftcases.built(case)
    cap = case.seq // case.mult * case.mult
    capped = [_sftcases.cut_at(ex, cap) for ex in b.examples]
    how, report, _held = _sftcases.at_the_cap(b)
    if not report.ok:
        from harness.records.oracle import InvariantFailure

        raise InvariantFailure(f"held to MB's unpacked examples {how}: {report.summary()}", report.violations)
    cut = [(ex.key, len(ex.tokens)) for ex in b.examples if len(ex.tokens) > cap]
    if not cut or len(cut) == len(b.examples):  # the input's fault: the case would test nothing
        raise RuntimeError(f"{case.id}: {len(cut)} of {len(b.examples)} examples past the cap {cap}")
    lost = sum(sum(ex.loss_mask) - sum(c.loss_mask) for ex, c in zip(b.examples, capped))
    golden.check({"cap": cap, "cut": len(cut), "trained_tokens_cut": lost, "rows": _sftcases.canonical_rows(b.rows)})


# One example's cap below the pack size (max_single_sequence_length; MB's GLM recipes set it to the
# sequence length less the alignment): prompts long enough that some examples pass the cap.
MAX_SINGLE_CASES = [
    _sftcases.CleanCase("max-single-40-mult4", seed=411, mult=4, long_rate=0.5, n=16, max_single=40),
    _sftcases.CleanCase("max-single-60-mult4-chat", seed=413, kind="chat", mult=4, long_rate=0.5, n=16, max_single=60),
]


@pytest.mark.parametrize("case", MAX_SINGLE_CASES, ids=[c.id for c in MAX_SINGLE_CASES])
def test_one_examples_cap_cuts_it_as_unpacked_training_at_that_length_does(golden, case):
    """With ``max_single_sequence_length`` below the pack size, the packed rows equal, per real
    token, MB's own unpacked examples of a user training at that length (the runtime length, after
    the next-token shift, when segments are aligned: MB's preparation says so), cut at the largest
    multiple that fits: an example past the cap is cut there as that user's is, nothing past it
    trains, every segment keeps the multiple and padding never trains. The golden pins how many
    examples the cap cuts and the rows."""
    b = _sftcases.built(case)
    cap = case.max_single // case.mult * case.mult if case.max_single and case.mult > 1 else case.max_single
    examples = [_sftcases.cut_at(ex, cap) for ex in _sftcases.reference(case)] if cap else []
    report = _sftcases.compare(case, examples, b.rows, b.special_ids)
    if not report.ok:
        from harness.records.oracle import InvariantFailure

        raise InvariantFailure(
            f"held to MB's unpacked examples at {case.max_single}: {report.summary()}", report.violations
        )
    whole = _sftcases.reference(dataclasses.replace(case, id=case.id + "-whole", max_single=None))
    cut = sum(1 for ex in whole if len(ex.tokens) > (case.max_single or case.seq))
    if not cut or cut == len(whole):  # the input's fault: the case would test nothing
        raise RuntimeError(f"{case.id}: {cut} of {len(whole)} examples past the cap {case.max_single}")
    golden.check({"max_single": case.max_single, "cut": cut, "rows": _sftcases.canonical_rows(b.rows)})
