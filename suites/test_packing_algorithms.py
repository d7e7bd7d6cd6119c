"""Offline packing algorithms: first-fit family, histogram, strategy, strategy filling.

Documented behaviour pinned here (MB's docstrings and docs/training/packed-sequences.md):
every sequence is placed exactly once, no bin exceeds ``pack_size``, first-fit puts each
sequence in the first bin with room, results are deterministic for a seed, and the packed
rows concatenate whole sequences with ``seq_start_id`` at their starts. Which positions train is
not decided here: the offline suite checks the filled rows' loss masks against MB's own
unpacked path (the oracle).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from harness.suite.adapters import packing
from suites import _inputs
from suites._explain import first_difference, first_offender, multiset_difference

pytestmark = pytest.mark.import_group("light")

CASES = [(0, 40, 1, 60, 64), (1, 100, 5, 128, 128), (2, 25, 30, 31, 64), (3, 1, 7, 7, 8), (4, 60, 1, 16, 16)]


def _first_fit_reference(seqlens: list[int], pack_size: int) -> list[list[int]]:
    """Textbook first-fit: each item goes to the lowest-index bin with enough room."""
    bins: list[list[int]] = []
    for s in seqlens:
        for b in bins:
            if sum(b) + s <= pack_size:
                b.append(s)
                break
        else:
            bins.append([s])
    return bins


def _check_bins(seqlens: list[int], bins: list[list[int]], pack_size: int) -> None:
    placed = [x for b in bins for x in b]
    assert Counter(placed) == Counter(seqlens), "every sequence must be placed exactly once: " + multiset_difference(
        seqlens, placed, "sequence length"
    )
    assert all(sum(b) <= pack_size for b in bins), f"a bin exceeds pack_size {pack_size}: " + first_offender(
        ((sum(b), b) for b in bins), lambda sb: sb[0] <= pack_size, "bin (total, lengths)"
    )
    assert all(b for b in bins), "no empty bin: " + first_offender(bins, bool, "bin")


@pytest.mark.parametrize("seed,n,low,high,pack_size", CASES)
def test_first_fit(golden, seed, n, low, high, pack_size):
    lens = _inputs.seqlens(seed, n, low, high)
    bins = packing.first_fit(lens, pack_size)
    _check_bins(lens, bins, pack_size)
    reference = _first_fit_reference(lens, pack_size)
    assert bins == reference, "first_fit must place each sequence in the first bin with room: " + first_difference(
        reference, bins, "bin"
    )
    golden.check({"seqlens": lens, "pack_size": pack_size, "bins": bins})


@pytest.mark.parametrize("seed,n,low,high,pack_size", CASES)
def test_first_fit_decreasing(golden, seed, n, low, high, pack_size):
    lens = _inputs.seqlens(seed, n, low, high)
    bins = packing.first_fit_decreasing(lens, pack_size)
    _check_bins(lens, bins, pack_size)
    reference = _first_fit_reference(sorted(lens, reverse=True), pack_size)
    assert bins == reference, "first_fit_decreasing must be first-fit over lengths sorted longest first: " + (
        first_difference(reference, bins, "bin")
    )
    golden.check({"seqlens": lens, "pack_size": pack_size, "bins": bins})


@pytest.mark.parametrize("seed,n,low,high,pack_size", CASES[:3])
def test_first_fit_shuffle(golden, seed, n, low, high, pack_size):
    lens = _inputs.seqlens(seed, n, low, high)
    np.random.seed(seed)  # MB's shuffle draws from numpy's global generator; a seed fixes it
    bins = packing.first_fit_shuffle(lens, pack_size)
    np.random.seed(seed)
    again = packing.first_fit_shuffle(lens, pack_size)
    _check_bins(lens, bins, pack_size)
    assert bins == again, "same seed, same packing: " + first_difference(bins, again, "bin")
    golden.check({"seqlens": lens, "pack_size": pack_size, "bins": bins})


@pytest.mark.parametrize(
    "seed,n,pack_size,algorithm",
    [
        (10, 30, 32, "first_fit_decreasing"),
        (11, 50, 64, "first_fit_shuffle"),
        (12, 12, 24, "first_fit_decreasing"),
        (13, 40, 48, "first_fit"),  # create_packing_strategy's default
    ],
)
def test_packing_strategy_pipeline(golden, seed, n, pack_size, algorithm):
    """create_hist -> create_packing_strategy -> fill_packing_strategy on seeded SFT examples."""
    examples = _inputs.sft_examples(seed, n, max_len=min(24, pack_size))
    sequences, histogram = packing.create_hist(np.array(examples), pack_size)
    expected_hist = [0] * (pack_size + 1)
    for ex in examples:
        if len(ex["input_ids"]) - 1 <= pack_size:
            expected_hist[len(ex["input_ids"]) - 1] += 1
    assert histogram == expected_hist, "histogram counts sequences by length minus one: " + first_difference(
        expected_hist, histogram, "count of length"
    )
    np.random.seed(seed)
    assignments, meta = packing.create_packing_strategy(histogram, pack_size, algorithm)
    _check_bins([i for i, c in enumerate(histogram) for _ in range(c)], assignments, pack_size)
    np.random.seed(seed)
    rows = packing.fill_packing_strategy(assignments, sequences, pack_size, _inputs.PAD_ID)
    assert len(rows) == len(assignments), f"one packed row per bin: {len(assignments)} bins, got {len(rows)} rows"
    packed_ids: Counter[tuple[int, ...]] = Counter()
    for r, (row, assignment) in enumerate(zip(rows, assignments)):
        starts = row["seq_start_id"] + [len(row["input_ids"])]
        assert row["seq_start_id"][0] == 0 and len(row["seq_start_id"]) == len(assignment), (
            f"row {r}: seq_start_id must start at 0 with one start per sequence of its bin "
            f"({len(assignment)} sequences {assignment}), got {row['seq_start_id']}"
        )
        assert len(row["loss_mask"]) == len(row["input_ids"]), (
            f"row {r}: loss_mask has {len(row['loss_mask'])} entries for {len(row['input_ids'])} tokens"
        )
        for k in range(len(assignment)):
            seq = tuple(row["input_ids"][starts[k] : starts[k + 1]])
            packed_ids[seq] += 1
    inputs = [tuple(ex["input_ids"]) for ex in examples]
    assert packed_ids == Counter(inputs), "packed rows hold exactly the input sequences: " + multiset_difference(
        inputs, packed_ids.elements(), "sequence"
    )
    golden.check({"histogram": histogram, "assignments": assignments, "metadata": meta, "rows": rows})
