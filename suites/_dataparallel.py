"""Data parallelism over packed rows: MB's batch sampler per rank, with the last global batch padded.

Shared by the hand-written ``padding_loss_masks`` cases and the exploration (suites/_explore.py).
Documented contract (MB's ``MegatronPretrainingBatchSampler``; docs/training/packed-sequences.md):
with ``drop_last=False`` the incomplete last global batch is padded with negative indices, each
data-parallel rank takes ``global / DP`` rows a step, and the packed datasets turn a negative
index into a padding row with loss mask 0. So across ranks every real packed row is sampled once
per epoch, every rank takes as many steps (a rank short of rows hangs the step's collectives), the
padding adds up to what the global batch lacks, and no padding row, on any rank, trains.
"""

from __future__ import annotations

from typing import Any

from harness.records.impact import Impact, require
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import sampler
from harness.suite.oracle import differential
from suites import _sftcases
from suites._explain import multiset_difference


def rows_of(ds: Any, indices: list[int]) -> list[differential.PackedRow]:
    """The packed rows ``ds`` collates for ``indices`` as one micro-batch (negative: a padding row)."""
    padding = {r for r, i in enumerate(indices) if i < 0}
    return batch_ops.packed_rows(ds.collate_fn([ds[i] for i in indices]), padding_rows=padding)


def check_padding_per_rank(case: _sftcases.SFTCase, dp: int, mbs: int, gbs: int) -> list[list[list[int]]]:
    """Every rank's padded global batches of ``case``'s packed rows, held to the contract above
    (raises on a violation); returns the indices each rank sampled, step by step."""
    b = _sftcases.built(case)
    ds = b.build.train
    per_rank = [sampler.padded_global_batches(len(ds), gbs, mbs, case.seed, r, dp) for r in range(dp)]
    steps = {len(batches) for batches in per_rank}
    require(len(steps) == 1, Impact.CRASH, f"every DP rank takes as many steps: {[len(p) for p in per_rank]}")
    for step in range(steps.pop()):
        sizes = [len(per_rank[r][step]) for r in range(dp)]
        require(
            sizes == [gbs // dp] * dp,
            Impact.CRASH,
            f"step {step}: every DP rank gets global/DP = {gbs // dp} rows, got {sizes}",
        )
    flat = [i for batches in per_rank for batch in batches for i in batch]
    sampled = sorted(i for i in flat if i >= 0)
    require(
        sampled == list(range(len(ds))),
        Impact.DROPS_TRAINED_TOKEN if len(set(sampled)) < len(ds) else Impact.WRONG_LOSS_NORMALISATION,
        "across DP ranks every packed row is sampled once per epoch: "
        + multiset_difference(range(len(ds)), sampled, "row index"),
    )
    n_pad, want_pad = sum(1 for i in flat if i < 0), (-len(ds)) % gbs
    require(
        n_pad == want_pad,
        Impact.WRONG_LOSS_NORMALISATION,
        f"the last global batch is padded up to its size across the DP ranks: {len(ds)} rows in global batches of "
        f"{gbs} need {want_pad} padding rows in all, got {n_pad}",
    )
    for batches in per_rank:
        rows = [row for batch in batches for row in rows_of(ds, batch)]
        pads = [row for row in rows if row.padding_row]
        _sftcases.compare(case, [], pads, b.special_ids, expect_all_packed=False).assert_ok()
        real = [row for row in rows if not row.padding_row]
        _sftcases.compare(case, b.examples, real, b.special_ids, expect_all_packed=False).assert_ok()
    return per_rank
