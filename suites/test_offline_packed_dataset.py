"""Offline packed SFT dataset: preparation (strategy + filling) and the runtime packed dataset.

Documented contract (docs/training/packed-sequences.md and MB's docstrings): examples are packed
whole into rows of at most ``packed_sequence_size`` tokens; every sequence is aligned to
``pad_seq_to_mult`` (the CP/SP multiple) with padding that never reaches the loss; at runtime
tokens/labels are the row shifted by one *within each sequence*, the loss mask covers answer
tokens only, position ids restart at 0 for every sequence, ``cu_seqlens`` mark sequence
boundaries (``cu_seqlens_padded`` the physical, aligned ones when ``pad_seq_to_mult > 1``),
``max_seqlen`` is the longest (aligned) sequence, ``pad_to_max_length`` fixes the row width and
``pad_cu_seqlens`` fixes the boundary-array shape (CUDA graphs). Preparation is deterministic
for a seed and does not depend on (or disturb) the global RNG state.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from harness.adapters import dataset as ds_ops
from suites import _sft_inputs
from suites._inputs import EOS_ID

pytestmark = pytest.mark.import_group("full")

TOK = ds_ops.TinyTokenizer(eos_id=EOS_ID)

# seed, examples, max example length, pack size, pad_seq_to_mult, pad_to_max_length, algorithm
CASES = [
    (0, 12, 20, 48, 1, False, "first_fit_shuffle"),
    (1, 20, 16, 64, 4, False, "first_fit_decreasing"),
    (2, 9, 30, 32, 2, True, "first_fit_shuffle"),
    (3, 25, 12, 40, 8, False, "first_fit_decreasing"),
    (4, 6, 24, 64, 1, True, "first_fit_decreasing"),
]


def _prepare(tmp_path, seed, n, max_len, pack, mult, algorithm, name="a"):
    examples = _sft_inputs.sft_examples_with_specials(seed, n, max_len=max_len)
    out = ds_ops.prepare_packed(
        examples, tmp_path / name, tokenizer=TOK, pack_size=pack, pad_seq_to_mult=mult, algorithm=algorithm, seed=seed
    )
    return examples, out


def _segments(row: dict) -> list[list[int]]:
    b = row["seq_start_id"] + [len(row["input_ids"])]
    return [row["input_ids"][b[i] : b[i + 1]] for i in range(len(b) - 1)]


def _match(segment: list[int], examples: list[dict], used: set[int], mult: int) -> int:
    """The example a stored segment came from: its ids, then EOS alignment padding only."""
    for i, ex in enumerate(examples):
        ids = ex["input_ids"]
        if i in used or segment[: len(ids)] != ids:
            continue
        tail = segment[len(ids) :]
        if all(t == EOS_ID for t in tail) and len(tail) < max(mult, 1):
            used.add(i)
            return i
    raise AssertionError(f"packed segment {segment} is not an example plus alignment padding")


def check_rows(examples: list[dict], rows: list[dict], pack: int, mult: int) -> list[list[int]]:
    """Every fitting example is packed exactly once, whole, aligned; returns example ids per row."""
    used: set[int] = set()
    owners = []
    for row in rows:
        segs = _segments(row)
        assert row["seq_start_id"][0] == 0 and row["seq_start_id"] == sorted(row["seq_start_id"])
        assert len(row["loss_mask"]) == len(row["input_ids"])
        assert sum(len(s) - 1 for s in segs) <= pack, "a pack exceeds packed_sequence_size"
        for s in segs:
            assert (len(s) - 1) % mult == 0, f"segment runtime length {len(s) - 1} not a multiple of {mult}"
        owners.append([_match(s, examples, used, mult) for s in segs])
    fitting = {i for i, ex in enumerate(examples) if math.ceil((len(ex["input_ids"]) - 1) / mult) * mult <= pack}
    assert used == fitting, "every example that fits must be packed exactly once"
    return owners


def check_collated(
    batch: dict,
    rows: list[dict],
    owners: list[list[int]],
    examples: list[dict],
    *,
    mult: int,
    max_seq_length: int,
    pad_to_max_length: bool,
    pad_len_mult: int = 16,
) -> None:
    width = len(batch["tokens"][0])
    longest = max(len(r["input_ids"]) - len(r["seq_start_id"]) for r in rows)
    expected_width = (
        max_seq_length if pad_to_max_length else min(max_seq_length, math.ceil(longest / pad_len_mult) * pad_len_mult)
    )
    assert width == expected_width, f"row width {width}, expected {expected_width}"
    for r, (row, who) in enumerate(zip(rows, owners)):
        tokens, labels, loss, pos = (batch[k][r] for k in ("tokens", "labels", "loss_mask", "position_ids"))
        phys, logical = [0], [0]
        for seg, ex_i in zip(_segments(row), who):
            ex = examples[ex_i]
            s, n = phys[-1], len(seg) - 1
            assert tokens[s : s + n] == seg[:-1], "tokens = segment without its last token"
            assert labels[s : s + n] == seg[1:], "labels = tokens shifted by one within the sequence"
            assert pos[s : s + n] == list(range(n)), "position ids restart at every sequence"
            real = len(ex["input_ids"]) - 1
            want = [int(i < real and i + 1 >= ex["answer_start_idx"] and seg[i] != EOS_ID) for i in range(n)]
            assert loss[s : s + n] == want, "loss mask = answer tokens only (never alignment padding or EOS inputs)"
            phys.append(s + n)
            logical.append(logical[-1] + real)
        end = phys[-1]
        assert all(m == 0 for m in loss[end:]), "padding after the last sequence has loss mask 0"
        assert all(t == EOS_ID for t in tokens[end:]) and all(t == EOS_ID for t in labels[end:])
        if end != width:
            phys.append(width)
            logical.append(logical[-1])
        cu = batch["cu_seqlens_q"][r]
        cu_p = batch["cu_seqlens_q_padded"][r] if batch["cu_seqlens_q_padded"] is not None else None
        bounds = cu_p if mult > 1 else cu
        k = len(phys)
        assert bounds[:k] == phys and all(x == phys[-1] for x in bounds[k:]), f"boundaries {bounds} != {phys}"
        if mult > 1:
            assert cu[:k] == logical and all(x == logical[-1] for x in cu[k:]), f"logical cu_seqlens {cu} != {logical}"
            assert all(p >= q for p, q in zip(cu_p, cu)), "logical boundaries never pass physical ones"
        assert batch["cu_seqlens_kv"][r] == cu
        assert batch["max_seqlen_q"][r] == [max(b - a for a, b in zip(phys, phys[1:]))], "max_seqlen = longest segment"


@pytest.mark.parametrize("seed,n,max_len,pack,mult,pad_max,algorithm", CASES)
def test_packed_dataset_rows(golden, tmp_path, seed, n, max_len, pack, mult, pad_max, algorithm):
    examples, out = _prepare(tmp_path, seed, n, max_len, pack, mult, algorithm)
    rows = out["rows"]
    owners = check_rows(examples, rows, pack, mult)
    ds = ds_ops.packed_dataset(out["npy"], TOK, max_seq_length=pack, pad_seq_to_mult=mult, pad_to_max_length=pad_max)
    assert len(ds) == len(rows)
    batch = ds_ops.collated(ds.collate_fn([ds[i] for i in range(len(ds))]))
    check_collated(batch, rows, owners, examples, mult=mult, max_seq_length=pack, pad_to_max_length=pad_max)
    # collated micro-batches of one row agree with the whole-batch collation on that row's tokens
    single = ds_ops.collated(ds.collate_fn([ds[0]]))
    w = len(single["tokens"][0])
    assert single["tokens"][0] == batch["tokens"][0][:w] or pad_max
    meta = out["metadata_doc"][-1]
    assert meta["max_samples_per_bin"] == max(len(r["seq_start_id"]) for r in rows)
    golden.check({"rows": rows, "metadata": meta, "batch": ds_ops.trimmed(batch)})


@pytest.mark.parametrize("seed,mult", [(5, 1), (6, 4)])
def test_pad_cu_seqlens_fixed_shape(golden, tmp_path, seed, mult):
    pack = 48
    examples, out = _prepare(tmp_path, seed, 18, 20, pack, mult, "first_fit_shuffle")
    ds = ds_ops.packed_dataset(
        out["npy"],
        TOK,
        max_seq_length=pack,
        pad_seq_to_mult=mult,
        pad_to_max_length=True,
        pad_cu_seqlens=True,
        metadata=out["metadata"],
    )
    meta = out["metadata_doc"]
    most = max(p["max_samples_per_bin"] for p in meta)
    safe_max = max(max(p["dataset_max_seqlen"] for p in meta), pack - min(p["min_packed_seqlen"] for p in meta))
    shapes, batches = set(), []
    for i in range(len(ds)):  # every micro-batch of one row has the same static shapes
        b = ds_ops.collated(ds.collate_fn([ds[i]]))
        keys = ["cu_seqlens_q"] + (["cu_seqlens_q_padded"] if mult > 1 else [])
        for k in keys:
            shapes.add((k, len(b[k][0])))
            assert b[k][0] == sorted(b[k][0]) and b[k][0][0] == 0
        assert len(b["tokens"][0]) == pack
        assert np.ravel(b["max_seqlen_q"]).tolist() == [safe_max], (
            "pad_cu_seqlens uses the dataset-wide safe max_seqlen"
        )
        batches.append({k: ds_ops.trimmed(b)[k] for k in ("cu_seqlens_q", "cu_seqlens_q_padded", "max_seqlen_q")})
    lengths = {k: {n for kk, n in shapes if kk == k} for k, _ in shapes}
    assert all(len(v) == 1 for v in lengths.values()), f"cu_seqlens shapes vary between micro-batches: {shapes}"
    assert all(n >= most + 1 for _, n in shapes), (
        f"a fixed shape must hold the fullest row ({most} sequences): {shapes}"
    )
    golden.check({"fixed_shape": True, "batches": batches})


_CHILD = r"""
import json, sys
from pathlib import Path
from harness.adapters import dataset as d
from suites import _sft_inputs
ex = _sft_inputs.sft_examples_with_specials(11, 15, max_len=20)
out = d.prepare_packed(ex, Path(sys.argv[1]), tokenizer=d.TinyTokenizer(), pack_size=40, pad_seq_to_mult=2,
                       algorithm="first_fit_shuffle", seed=11)
print("ROWS=" + json.dumps(out["rows"]))
"""


def test_deterministic_and_rng_independent(golden, tmp_path):
    ex = _sft_inputs.sft_examples_with_specials(11, 15, max_len=20)

    def run(name):
        return ds_ops.prepare_packed(
            ex, tmp_path / name, tokenizer=TOK, pack_size=40, pad_seq_to_mult=2, algorithm="first_fit_shuffle", seed=11
        )["rows"]

    first = run("one")
    np.random.seed(999)
    random.seed(999)
    import torch

    torch.manual_seed(999)
    np_state = np.random.get_state()[1].copy()
    second = run("two")
    assert first == second, "same seed, different global RNG state: packing must not change"
    assert (np.random.get_state()[1] == np_state).all(), "preparation must restore the global numpy RNG state"
    env = dict(os.environ, PYTHONHASHSEED="123")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "child")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=os.getcwd(),
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS=")]
    assert line, f"child failed: {proc.stderr[-2000:]}"
    assert json.loads(line[-1][5:]) == first, "a fresh process must pack identically"
    golden.check({"rows": first})
