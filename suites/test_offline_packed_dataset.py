"""Offline packed SFT, end to end through MB's own data path, checked against MB's unpacked path.

What a user runs: JSONL examples in a ``dataset_root``, a real tokenizer, MB's dataset builder
with offline packing specs (``packed_sequence_size``, ``pad_seq_to_mult``, ``pad_cu_seqlens``,
``pad_to_max_length``), then MB's packed dataset and its ``collate_fn``. The reference is MB's own
unpacked dataset over the same examples at the same commit (the one MB's packing preparation
builds), each example collated alone. Invariants (harness/oracle/differential.py): per real token
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

import numpy as np
import pytest

from harness.oracle import truncation
from harness.oracle.impact import Impact, fail
from suites import _oracle
from suites._explain import first_difference, first_offender

pytestmark = pytest.mark.import_group("light")


@pytest.mark.parametrize("case", [_oracle.case_param(c) for c in _oracle.CASES])
def test_packed_equals_unpacked(golden, case):
    b = _oracle.built(case)
    assert b.examples, "MB's unpacked reference is empty"
    if case.pad_to_max_length:  # a documented shape rule, checked before the oracle's comparison
        widths = [len(r.tokens) for r in b.rows]
        assert all(w == _oracle.SEQ for w in widths), (
            f"pad_to_max_length pads every packed row to the maximum length {_oracle.SEQ}: "
            + first_offender(widths, lambda w: w == _oracle.SEQ, "row width of micro-batch")
        )
    b.report.assert_ok()
    golden.check({"special_ids": b.special_ids, "rows": _oracle.canonical_rows(b.rows)})


FIXED = _oracle.FIXED_SHAPE_CASES + _oracle.SHORT_PACK_CASES


@pytest.mark.parametrize("case", FIXED, ids=[c.id for c in FIXED])
def test_pad_cu_seqlens_fixed_shape(golden, case):
    """``pad_cu_seqlens``: one boundary shape for every micro-batch, able to hold the fullest row.
    The shape rules are checked before the oracle's comparison (a known MB bug there must not
    hide a broken shape)."""
    b = _oracle.built(case)
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
    golden.check({"shapes": shapes, "max_seqlen_q": sorted({r.max_seqlen_q for r in b.rows})})


_CHILD = r"""
import json, sys
from suites import _oracle
b = _oracle.built(_oracle.SFTCase("determinism", seed=61, kind=sys.argv[1], mult=2))
print("ROWS=" + json.dumps(_oracle.canonical_rows(b.rows)))
"""


@pytest.mark.parametrize("kind", ["prompt", "chat"])
def test_deterministic_and_rng_independent(golden, kind):
    case = _oracle.SFTCase("determinism", seed=61, kind=kind, mult=2)
    first = _oracle.canonical_rows(_oracle.built(case).rows)
    np.random.seed(999)
    random.seed(999)
    _oracle.built.cache_clear()
    rebuilt = _oracle.built(case)
    again = _oracle.canonical_rows(rebuilt.rows)
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


# overlong prompts (80 words, a 64-token pack) cut on either side; no literal EOS (0.6.2's known EOS bug)
TRUNCATION_CASES = [
    _oracle.CleanCase("prompt-left-truncation", seed=61, long_rate=0.4, truncation_method="left"),
    _oracle.CleanCase(
        "completion-left-truncation", seed=62, kind="completion", long_rate=0.4, truncation_method="left"
    ),
    _oracle.CleanCase(
        "completion-right-truncation", seed=62, kind="completion", long_rate=0.4, truncation_method="right"
    ),
]


@pytest.mark.parametrize("case", TRUNCATION_CASES, ids=[c.id for c in TRUNCATION_CASES])
def test_truncation_keeps_the_side_asked_for(golden, case):
    """``truncation_method``: packed rows equal MB's unpacked path (oracle), and every overlong example
    kept the side of its prompt the user asked for, with its whole answer."""
    b = _oracle.built(case)
    b.report.assert_ok()
    full = _oracle.reference(dataclasses.replace(case, id=case.id + "-whole", seq=1024, truncation_method=None))
    assert len(full) == len(b.examples), f"{len(b.examples)} examples truncated, {len(full)} whole"
    cut = 0
    for k, (ex, whole) in enumerate(zip(b.examples, full)):
        cut += truncation.check_kept_side(
            f"example {k}", (whole.tokens, whole.loss_mask), (ex.tokens, ex.loss_mask), str(case.truncation_method)
        )
    if not cut:  # the input's fault, not MB's: the case would test nothing
        raise RuntimeError(f"{case.id}: no example long enough to be truncated")
    golden.check({"truncated": cut, "rows": _oracle.canonical_rows(b.rows)})
