"""Offline packed SFT, end to end through MB's own data path, checked against MB's unpacked path.

What a user runs: JSONL examples in a ``dataset_root``, a real tokenizer, MB's dataset builder
with offline packing specs (``packed_sequence_size``, ``pad_seq_to_mult``, ``pad_cu_seqlens``,
``pad_to_max_length``), then MB's packed dataset and its ``collate_fn``. The reference is MB's own
unpacked dataset over the same examples at the same commit (the one MB's packing preparation
builds), each example collated alone. Invariants (harness/suite/oracle/differential.py): per real token
the packed tokens, labels, loss mask and position ids equal the unpacked ones; padding never
trains; every example is packed once; physical/logical boundaries and alignment to
``pad_seq_to_mult``; int32 boundaries; ``max_seqlen``. Broken invariant: FAIL. The golden (packed
rows) only detects change: a mismatch with every invariant holding is CHANGED.

Documented rules also checked here: ``pad_cu_seqlens`` gives every micro-batch the same
boundary shape (CUDA graphs) holding the fullest row; preparation is deterministic for a seed
in a fresh process and does not depend on the global RNG state.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from harness.records.impact import Impact, fail
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import rules, sft
from harness.suite.oracle import corpus, truncation
from suites import _sftcases
from suites._explain import first_difference, first_offender

pytestmark = pytest.mark.import_group("light")


@pytest.mark.parametrize("case", [_sftcases.case_param(c) for c in _sftcases.CASES])
def test_packed_equals_unpacked(golden, case):
    b = _sftcases.built(case)
    assert b.examples, "MB's unpacked reference is empty"
    if case.pad_to_max_length:  # a documented shape rule, checked before the oracle's comparison
        widths = [len(r.tokens) for r in b.rows]
        assert all(w == _sftcases.SEQ for w in widths), (
            f"pad_to_max_length pads every packed row to the maximum length {_sftcases.SEQ}: "
            + first_offender(widths, lambda w: w == _sftcases.SEQ, "row width of micro-batch")
        )
    b.report.assert_ok()
    golden.check({"special_ids": b.special_ids, "rows": _sftcases.canonical_rows(b.rows)})


@pytest.mark.parametrize("case", _sftcases.ALGORITHM_CASES, ids=[c.id for c in _sftcases.ALGORITHM_CASES])
def test_packing_algorithm_the_user_chooses(golden, case):
    """``prepare_gpt_sft_packed_data(packing_algorithm=...)`` (``prepare_packed_sequence_data``
    before): MB's preparation with the algorithm a user chooses, every other argument as MB's
    builder passes it. Whatever the algorithm puts together, the packed rows must hold each
    example once with its unpacked tokens, labels, loss mask and position ids."""
    b = _sftcases.built(case)
    assert b.examples, "MB's unpacked reference is empty"
    b.report.assert_ok()
    golden.check({"special_ids": b.special_ids, "rows": _sftcases.canonical_rows(b.rows)})


DEFAULT_SIZE = _sftcases.CleanCase("prompt-default-pack-size", seed=64, n=10)


def test_specs_at_the_default_pack_size_pack_nothing(golden):
    """``PackedSequenceSpecs()`` leaves ``packed_sequence_size`` at -1, which MB documents as no
    packing: either MB refuses offline packing specs that pack nothing, by its check naming the
    size (configs since 2026), or it trains the unpacked split, example for example what the same
    config without specs trains (the builder's ``packed_sequence_size <= 0`` path before). A packed
    dataset, or any other exception, is a failure."""
    case = DEFAULT_SIZE
    root = corpus.write_dataset_root(Path(tempfile.mkdtemp(prefix="harness-default-size-")), case.corpus)
    packing = dataclasses.replace(case.packing, pack_size=-1)
    try:
        got = sft.build_sft(_sftcases.request(case, root, packing=packing))
    except Exception as exc:  # attributed, never counted blindly
        rules.require_refused_by(exc, rules.Rule.PACK_SIZE_POSITIVE, "specs at the default pack size (packing nothing)")
        golden.check({"refused_by": rules.Rule.PACK_SIZE_POSITIVE.value})
        return
    unpacked = sft.build_sft(_sftcases.request(case, root, packing=None)).train
    if "Packed" in type(got.train).__name__:
        raise fail(Impact.CRASH, f"a packed dataset ({type(got.train).__name__}) for packed_sequence_size -1")
    want = [(e.tokens, e.labels, e.loss_mask) for e in batch_ops.unpacked_examples(unpacked)]
    have = [(e.tokens, e.labels, e.loss_mask) for e in batch_ops.unpacked_examples(got.train)]
    if have != want:
        raise fail(
            Impact.WRONG_TARGETS,
            "specs at the default pack size train other examples than no specs: "
            + first_difference(want, have, "example"),
        )
    golden.check({"unpacked_examples": len(have)})


FIXED = _sftcases.FIXED_SHAPE_CASES + _sftcases.SHORT_PACK_CASES


@pytest.mark.parametrize("case", FIXED, ids=[c.id for c in FIXED])
def test_pad_cu_seqlens_fixed_shape(golden, case):
    """``pad_cu_seqlens``: one boundary shape for every micro-batch, able to hold the fullest row.
    The shape rules are checked before the oracle's comparison (a known MB bug there must not
    hide a broken shape)."""
    b = _sftcases.built(case)
    meta_path = b.build.metadata_path
    assert meta_path is not None and meta_path.is_file(), "pad_cu_seqlens needs MB's packing metadata file"
    meta = json.loads(meta_path.read_text())
    fullest = max(p["max_samples_per_bin"] for p in meta)
    shapes = {}
    for key in ("cu_seqlens_q", "cu_seqlens_q_padded"):
        lengths = {len(getattr(r, key)) for r in b.rows if getattr(r, key) is not None}
        if lengths:
            assert len(lengths) == 1, f"{key}: boundary shapes vary between micro-batches: {sorted(lengths)}"
            shapes[key] = lengths.pop()
            # 0, one end per sequence, and the boundary tail padding appends (MB: "plus 2 since
            # cu_seqlens additionally contains 0 and may append max_length")
            assert shapes[key] >= fullest + 2, (
                f"{key}: static shape {shapes[key]} cannot hold the fullest bin ({fullest} sequences) "
                f"with its tail padding: needs {fullest + 2}"
            )
    assert shapes, "pad_cu_seqlens batches carry no boundaries"
    widths = [len(r.tokens) for r in b.rows]
    assert len(set(widths)) == 1, "pad_cu_seqlens needs fixed-width rows (pad_to_max_length): " + first_difference(
        [widths[0]] * len(widths), widths, "row width of micro-batch"
    )
    b.report.assert_ok()
    max_seqlen = sorted({r.max_seqlen_q for r in b.rows}, key=lambda v: -1 if v is None else v)
    golden.check({"shapes": shapes, "max_seqlen_q": max_seqlen})


_CHILD = r"""
import json, sys
from suites import _sftcases
b = _sftcases.built(_sftcases.SFTCase("determinism", seed=61, kind=sys.argv[1], mult=2))
print("ROWS=" + json.dumps(_sftcases.canonical_rows(b.rows)))
"""


@pytest.mark.parametrize("kind", ["prompt", "chat"])
def test_deterministic_and_rng_independent(golden, kind):
    case = _sftcases.SFTCase("determinism", seed=61, kind=kind, mult=2)
    first = _sftcases.canonical_rows(_sftcases.built(case).rows)
    np.random.seed(999)
    random.seed(999)
    _sftcases.built.cache_clear()
    rebuilt = _sftcases.built(case)
    again = _sftcases.canonical_rows(rebuilt.rows)
    if again != first:
        raise fail(
            Impact.IRREPRODUCIBLE,
            "same seed, different global RNG state: the packed rows must not change: "
            + first_difference(first, again, "packed row"),
        )
    if rebuilt.build.prep_rng_kept is False:
        raise fail(
            Impact.IRREPRODUCIBLE,
            "offline packing preparation must leave the caller's global numpy RNG state as it found it "
            "(it shuffles with its own seed): the state differs after prepare_packed_data",
        )
    env = dict(os.environ, PYTHONHASHSEED="123")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, kind], capture_output=True, text=True, env=env, timeout=600, cwd=os.getcwd()
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS=")]
    assert line, f"child process failed: {proc.stderr[-2000:]}"
    fresh = json.loads(line[-1][5:])
    if fresh != first:
        raise fail(
            Impact.IRREPRODUCIBLE,
            "a fresh process must pack identically: " + first_difference(first, fresh, "packed row"),
        )
    rebuilt.report.assert_ok()  # the rows the golden pins are checked by the oracle too: padding never trains
    golden.check({"rows": first})


# overlong prompts (80 words, a 64-token pack) cut on either side; no literal EOS (0.6.2's known EOS bug);
# truncation_field: the user's own "{text} {output}" template cutting its text, and the answer named
# as the field to cut (overlong answers)
TRUNCATION_CASES = [
    _sftcases.CleanCase("prompt-left-truncation", seed=61, long_rate=0.4, truncation_method="left"),
    _sftcases.CleanCase(
        "text-field-right-truncation",
        seed=64,
        long_rate=0.4,
        truncation_method="right",
        prompt_key="text",
        truncation_field="text",
    ),
    _sftcases.CleanCase(
        "answer-field-right-truncation",
        seed=67,
        long_rate=0.0,
        long_answer_rate=0.4,
        truncation_method="right",
        truncation_field="output",
    ),
    _sftcases.CleanCase(
        "answer-field-left-truncation",
        seed=67,
        long_rate=0.0,
        long_answer_rate=0.4,
        truncation_method="left",
        truncation_field="output",
    ),
    _sftcases.CleanCase(
        "completion-left-truncation", seed=62, kind="completion", long_rate=0.4, truncation_method="left"
    ),
    _sftcases.CleanCase(
        "completion-right-truncation", seed=62, kind="completion", long_rate=0.4, truncation_method="right"
    ),
]


@pytest.mark.parametrize("case", TRUNCATION_CASES, ids=[c.id for c in TRUNCATION_CASES])
def test_truncation_keeps_the_side_asked_for(golden, case):
    """``truncation_method`` and ``truncation_field``: packed rows equal MB's unpacked path (oracle),
    and every overlong example kept the side of its prompt the user asked for, with its whole
    answer; with the answer as the field to cut, its whole prompt and the answer's side asked for."""
    b = _sftcases.built(case)
    b.report.assert_ok()
    full = _sftcases.reference(dataclasses.replace(case, id=case.id + "-whole", seq=1024, truncation_method=None))
    assert len(full) == len(b.examples), f"{len(b.examples)} examples truncated, {len(full)} whole"
    cut = 0
    for k, (ex, whole) in enumerate(zip(b.examples, full)):
        check = truncation.check_cut_answer if case.truncation_field == "output" else truncation.check_kept_side
        cut += check(
            f"example {k}", (whole.tokens, whole.loss_mask), (ex.tokens, ex.loss_mask), str(case.truncation_method)
        )
    if not cut:  # the input's fault, not MB's: the case would test nothing
        raise RuntimeError(f"{case.id}: no example long enough to be truncated")
    golden.check({"truncated": cut, "rows": _sftcases.canonical_rows(b.rows)})


CONSTRUCTOR_CASE = _sftcases.CleanCase("constructor-prompt-mult2", seed=81, mult=2, long_rate=0.4)


def test_deprecated_constructor_builds_what_the_config_builds(golden, tmp_path):
    """``FinetuningDatasetBuilder(dataset_root, tokenizer, seq_length, enable_offline_packing,
    offline_packing_specs, dataset_kwargs)``, kept as a "constructor-compatible adapter" for older
    configs: packed, its rows are ``GPTSFTDatasetBuilder``'s for the same settings and held to the
    oracle; packing off at its default ``seq_length`` (2048), its examples are the config builder's."""
    # the same global RNG state for both builds: older eras' packing reads it (known bug
    # packing-depends-on-global-rng, its own case), which must not pass for a constructor difference
    np.random.seed(0)
    legacy = _sftcases.built(CONSTRUCTOR_CASE, constructor=True)
    legacy.report.assert_ok()
    np.random.seed(0)
    want = _sftcases.canonical_rows(_sftcases.built(CONSTRUCTOR_CASE).rows)
    got = _sftcases.canonical_rows(legacy.rows)
    if got != want:
        raise fail(
            Impact.WRONG_TARGETS,
            "FinetuningDatasetBuilder packs other rows than GPTSFTDatasetBuilder for the same settings: "
            + first_difference(want, got, "packed row"),
        )
    counts = {}
    for seq in (_sftcases.SEQ, 2048):  # packing off, seq_length decides the truncation (2048: its default)
        unpacked = {}
        for name, build in (("config", sft.build_sft), ("constructor", sft.build_sft_constructor)):
            root = corpus.write_dataset_root(tmp_path / f"{name}-{seq}", CONSTRUCTOR_CASE.corpus)
            req = dataclasses.replace(_sftcases.request(CONSTRUCTOR_CASE, root, packing=None), seq_length=seq)
            unpacked[name] = [(e.tokens, e.labels, e.loss_mask) for e in batch_ops.unpacked_examples(build(req).train)]
        if unpacked["constructor"] != unpacked["config"]:
            raise fail(
                Impact.WRONG_TARGETS,
                f"unpacked at seq_length {seq}, FinetuningDatasetBuilder gives other examples than "
                "GPTSFTDatasetBuilder: " + first_difference(unpacked["config"], unpacked["constructor"], "example"),
            )
        counts[str(seq)] = max(len(t) for t, _, _ in unpacked["config"])
    golden.check({"rows": got, "longest_unpacked": counts})
