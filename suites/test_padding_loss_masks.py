"""Padding never reaches the loss: alignment padding, tail padding, whole padding rows.

Documented contract (docs/training/packed-sequences.md; MB's sampler and packed dataset
docstrings): when the last global batch is incomplete and ``drop_last=False``, MB's batch sampler
pads it with negative indices and the packed SFT datasets turn those into padding rows with loss
mask 0; rows reached through a samples mapping (``max_train_samples``) behave the same. The data
loader collates every row of a data-parallel rank's global batch at once, so that is what is
collated here. Real rows are checked by the oracle against MB's own unpacked path (per real
token equal, padding inside and after the packs never trains); padding rows must train nothing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from harness.records.impact import Impact, fail, require
from harness.suite.adapters import loaders, packed_artifact, rules, sampler
from suites import _dataparallel, _loader_epoch, _sftcases
from suites._explain import first_offender, multiset_difference

pytestmark = pytest.mark.import_group("light")

# (case, global batch size)
CASES = [
    (_sftcases.SFTCase("padding-prompt-mult4", seed=81, mult=4, n=20), 3),
    (_sftcases.SFTCase("padding-chat-mult2", seed=82, kind="chat", mult=2, n=18, pad_to_max_length=True), 4),
    (_sftcases.SFTCase("padding-completion-mult1", seed=83, kind="completion", n=16), 5),
    (_sftcases.SFTCase("padding-prompt-mult8-eod-not-eos", seed=84, mult=8, n=16, distinct_eod=True), 3),
    # the full loss (answer_only_loss=False) builds its mask from the row's tokens: a padding row too
    (_sftcases.CleanCase("padding-chat-mult2-full-loss", seed=86, kind="chat", mult=2, n=16, full_loss=True), 5),
]


def _every_row(ds):
    """Every row of ``ds`` in index order, collated as one micro-batch."""
    return _dataparallel.rows_of(ds, list(range(len(ds))))


@pytest.mark.parametrize("case,gbs", [_sftcases.case_param(c, g, id=f"{c.id}-gbs{g}") for c, g in CASES])
def test_padding_rows_and_alignment(golden, case, gbs):
    b = _sftcases.built(case)
    ds = b.build.train
    batches = sampler.padded_global_batches(len(ds), gbs, seed=case.seed)
    flat = [i for batch in batches for i in batch]
    sampled = sorted(i for i in flat if i >= 0)
    assert sampled == list(range(len(ds))), "every packed row is sampled once per epoch: " + multiset_difference(
        range(len(ds)), sampled, "row index"
    )
    n_pad, want_pad = sum(1 for i in flat if i < 0), (-len(ds)) % gbs
    assert n_pad == want_pad, (
        f"the last global batch is padded up to its size: {len(ds)} rows in batches of {gbs} need "
        f"{want_pad} padding rows, got {n_pad} (batches {batches})"
    )
    rows = [row for batch in batches for row in _dataparallel.rows_of(ds, batch)]
    report = _sftcases.compare(case, b.examples, rows, b.special_ids)
    report.assert_ok()
    golden.check({"batches": batches, "trained_per_row": [sum(r.loss_mask) for r in rows]})


# (case, data-parallel size, micro-batch size, global batch size): global = micro * DP * steps
# (answers without a literal EOS: MB 0.6.2's known EOS masking is checked elsewhere, not here)
DP_CASES = [
    (_sftcases.CleanCase("dp-prompt-mult4", seed=81, mult=4, n=20), 2, 1, 4),
    (_sftcases.CleanCase("dp-chat-mult2", seed=82, kind="chat", mult=2, n=18, pad_to_max_length=True), 4, 1, 8),
    (_sftcases.CleanCase("dp-completion-mult1", seed=83, kind="completion", n=16), 2, 2, 12),
    (_sftcases.CleanCase("dp-prompt-mult4-full-loss", seed=85, mult=4, n=20, full_loss=True), 2, 1, 6),
]


@pytest.mark.parametrize(
    "case,dp,mbs,gbs",
    [_sftcases.case_param(c, dp, m, g, id=f"{c.id}-dp{dp}-mbs{m}-gbs{g}") for c, dp, m, g in DP_CASES],
)
def test_padding_rows_per_data_parallel_rank(golden, case, dp, mbs, gbs):
    """Data parallelism: each rank's loader samples its part of every global batch (MB's sampler
    with that rank), so across ranks every packed row is sampled once per epoch, every rank gets
    ``global / DP`` rows a step (equal micro-batch counts: a rank short of rows hangs the step's
    collectives), the padding of the last global batch adds up to what the global batch lacks,
    and every padding row, on whichever rank, trains nothing."""
    per_rank = _dataparallel.check_padding_per_rank(case, dp, mbs, gbs)
    golden.check({"per_rank": per_rank})


@pytest.mark.parametrize(
    "case,dp,mbs,gbs",
    [_sftcases.case_param(c, dp, m, g, id=f"{c.id}-dp{dp}-mbs{m}-gbs{g}") for c, dp, m, g in DP_CASES],
)
def test_drop_last_per_data_parallel_rank(golden, case, dp, mbs, gbs):
    """The sampler's defaults (``drop_last=True``, no padding): the incomplete last global batch is
    dropped on every rank alike, every row of the complete global batches is sampled exactly once
    across the ranks, and no padding row appears."""
    ds = _sftcases.built(case).build.train
    if len(ds) < gbs:  # nothing would train: MB's explicit check must refuse, not hand out empty epochs
        try:
            sampler.padded_global_batches(len(ds), gbs, mbs, case.seed, 0, dp, drop_last=True, pad=False)
        except (AssertionError, ValueError, RuntimeError) as exc:
            rules.require_refused_by(
                exc, rules.Rule.DROP_LAST_NEEDS_A_GLOBAL_BATCH, f"drop_last with {len(ds)} rows < global batch {gbs}"
            )
            golden.check({"refused": type(exc).__name__})
            return
        raise fail(Impact.ACCEPTS_INVALID_CONFIG, f"{len(ds)} rows < global batch {gbs} with drop_last: accepted")
    per_rank = [
        sampler.padded_global_batches(len(ds), gbs, mbs, case.seed, r, dp, drop_last=True, pad=False) for r in range(dp)
    ]
    steps = {len(batches) for batches in per_rank}
    require(len(steps) == 1, Impact.CRASH, f"every DP rank takes as many steps: {[len(p) for p in per_rank]}")
    complete = len(ds) // gbs
    require(steps == {complete}, Impact.DROPS_TRAINED_TOKEN, f"{steps} steps for {complete} complete global batches")
    flat = [i for batches in per_rank for batch in batches for i in batch]
    require(all(i >= 0 for i in flat), Impact.TRAINS_PADDING, "drop_last without padding sampled padding rows")
    # the seed orders the epoch: which rows the dropped remainder holds is the sampler's, not fixed
    require(
        len(set(flat)) == len(flat),
        Impact.WRONG_LOSS_NORMALISATION,
        "a row sampled twice in one epoch across the DP ranks: "
        + multiset_difference(sorted(set(flat)), sorted(flat), "row index"),
    )
    require(
        len(flat) == complete * gbs and all(i < len(ds) for i in flat),
        Impact.DROPS_TRAINED_TOKEN,
        f"{len(flat)} rows sampled from {len(ds)}, {complete} complete global batches of {gbs} hold {complete * gbs}",
    )
    golden.check({"per_rank": per_rank, "dropped": len(ds) - complete * gbs})


def test_legacy_npy_padding_rows(golden, tmp_path):
    """Packed rows in MB's legacy ``.npy`` layout (what earlier MB releases wrote; MB still loads
    them through ``GPTSFTPackedDataset``) behave like the rows MB's builder serves: real rows
    collate identically, and padding rows (negative indices from the batch sampler) train
    nothing and keep their shape. The rows are the ones MB's own builder packed for the case."""
    case = _sftcases.SFTCase("padding-npy", seed=87, mult=2, n=12)
    b = _sftcases.built(case)
    ds = b.build.train
    items = [ds[i] for i in range(len(ds))]
    stored = [
        {
            "input_ids": [int(t) for t in it["input_ids"]],
            "loss_mask": [int(m) for m in it["loss_mask"]],
            "seq_start_id": [int(x) for x in list(it["seq_boundaries"])[:-1]],
        }
        for it in items
    ]
    npy = packed_artifact.write_rows_npy(stored, tmp_path / "training.npy")
    legacy = packed_artifact.packed_dataset(
        npy,
        max_seq_length=_sftcases.SEQ,
        metadata=None,
        pad_to_max_length=False,
        pad_cu_seqlens=False,
        tokenizer=_sftcases.load_tokenizer(case.distinct_eod),
    )
    served = [(r.tokens, r.labels, r.loss_mask, r.position_ids) for r in _every_row(ds)]
    loaded = [(r.tokens, r.labels, r.loss_mask, r.position_ids) for r in _every_row(legacy)]
    assert loaded == served, "a packed row loaded from .npy must collate as the builder's row: " + first_offender(
        zip(served, loaded), lambda sl: sl[0] == sl[1], "row (builder's, from .npy)"
    )
    pads = _dataparallel.rows_of(legacy, [0, -1, -2])[1:]
    assert all(sum(p.loss_mask) == 0 for p in pads), "a padding row trains nothing: " + first_offender(
        (list(p.loss_mask) for p in pads), lambda m: sum(m) == 0, "padding row loss mask"
    )
    assert all(len(p.loss_mask) == len(p.tokens) > 0 for p in pads), "a padding row keeps its shape: " + (
        first_offender(((len(p.tokens), len(p.loss_mask)) for p in pads), lambda tm: tm[1] == tm[0] > 0, "padding row")
    )
    golden.check({"rows": len(stored), "pad_widths": [len(p.tokens) for p in pads]})


def test_samples_mapping_follows_seed(golden):
    """The configured seed decides the samples mapping's epoch shuffles (``max_train_samples``):
    the same corpus under different seeds must not map to one order (an ignored seed gives every
    run the same order). The order is read as a permutation of the packed rows in their stored
    order (packing itself may depend on the seed too). Every mapped epoch holds every packed row
    once. Checked apart from the oracle comparison, so a known MB bug there cannot hide it."""
    perms = {}
    for mb_seed in (1, 2, 3):
        case = _sftcases.SFTCase(f"padding-seeded-{mb_seed}", seed=86, mult=2, n=12, mb_seed=mb_seed)
        # the same global RNG state before both builds: this test reads the mapping only (packing's
        # independence of the global RNG, broken in 0.3.1-0.5.1, is test_deterministic_and_rng_independent's)
        np.random.seed(0)
        packed = _sftcases.built(case).build.train
        stored = [tuple(r.tokens) for r in _every_row(packed)]
        np.random.seed(0)
        ds = _sftcases.built(replace(case, max_samples=2 * len(stored))).build.train
        assert len(ds) == 2 * len(stored), (
            f"max_train_samples sets the mapped length: expected {2 * len(stored)}, got {len(ds)}"
        )
        mapped = [tuple(r.tokens) for r in _every_row(ds)]
        for epoch in (mapped[: len(stored)], mapped[len(stored) :]):
            assert sorted(epoch) == sorted(stored), f"seed {mb_seed}: every packed row is mapped once per epoch: " + (
                multiset_difference(sorted(stored), sorted(epoch), "packed row")
            )
        perms[mb_seed] = [stored.index(t) for t in mapped]
    same_size = [p for p in perms.values() if len(p) == len(perms[1])]
    assert len(same_size) < 2 or len({tuple(p) for p in same_size}) > 1, (
        f"seeds 1, 2 and 3 map the packed rows in the same order {perms[1]}: the configured seed is ignored"
    )
    golden.check({"perms": {str(k): v for k, v in perms.items()}})


def test_samples_mapping_negative_indices(golden):
    """``max_train_samples`` maps indices over epochs of the packed rows; a negative index through
    the mapping is a padding row. Every mapped row is checked by the oracle (examples may repeat
    across epochs); the first epoch holds every example once."""
    case = _sftcases.SFTCase("padding-mapped", seed=85, mult=2, n=12)
    rows = len(_sftcases.built(case).build.train)
    mapped_case = _sftcases.SFTCase("padding-mapped", seed=85, mult=2, n=12, max_samples=2 * rows + 1)
    b = _sftcases.built(mapped_case)
    ds = b.build.train
    assert len(ds) == 2 * rows + 1, (
        f"max_train_samples sets the mapped length (epochs of shuffled rows): expected {2 * rows + 1}, got {len(ds)}"
    )
    mapped = _every_row(ds)
    _sftcases.compare(case, b.examples, mapped[:rows], b.special_ids).assert_ok()  # one epoch: each example once
    report = _sftcases.differential.compare(
        mapped,
        b.examples,
        pad_seq_to_mult=case.mult,
        pack_size=_sftcases.SEQ,
        padding_ids=b.padding_ids,
        special_ids=b.special_ids,
        repeats=True,
    )
    report.assert_ok()
    pads = _dataparallel.rows_of(ds, [-1, -2, -3])
    _sftcases.compare(case, [], pads, b.special_ids, expect_all_packed=False).assert_ok()
    assert all(len(p.loss_mask) == len(p.tokens) > 0 for p in pads), "a padding row keeps its shape: " + first_offender(
        ((len(p.tokens), len(p.loss_mask)) for p in pads),
        lambda tm: tm[1] == tm[0] > 0,
        "padding row (tokens, loss mask)",
    )
    golden.check(
        {"mapped_rows": [[s.key for s in r.segments] for r in report.rows], "pad_widths": [len(p.tokens) for p in pads]}
    )


# (case, data-parallel size, global batch size): offline packed rows (one per micro-batch) that
# leave an incomplete last global batch, and one with fewer rows than one global batch
LOADER_CASES = [
    (_sftcases.CleanCase("loader-prompt-mult4", seed=81, mult=4, n=20), 2, 4),
    (_sftcases.CleanCase("loader-chat-mult2", seed=82, kind="chat", mult=2, n=18, pad_to_max_length=True), 2, 6),
    (_sftcases.CleanCase("loader-completion-short", seed=83, kind="completion", n=6), 2, 64),
]


@pytest.mark.import_group("full")  # MB's loader builder reads the training config
@pytest.mark.parametrize("drop_last", [False, True], ids=["keep-last", "drop-last"])
@pytest.mark.parametrize(
    "case,dp,gbs", [_sftcases.case_param(c, dp, g, id=f"{c.id}-dp{dp}-gbs{g}") for c, dp, g in LOADER_CASES]
)
def test_dataset_drop_last_through_mb_loader(golden, case, dp, gbs, drop_last):
    """The dataset config's ``drop_last`` as a user sets it, through MB's loader builder on every
    rank of a data-parallel world (suites/_loader_epoch.py): kept, every packed row trains once per
    epoch and the padding of the last global batch trains nothing; dropped, the complete global
    batches train and nothing else. With fewer rows than one global batch, dropping it leaves
    nothing to train: MB's loader must refuse that by its own check."""
    ds = _sftcases.built(case).build.train
    if drop_last and len(ds) < gbs:
        config = loaders.make_dataset_config(seq_length=case.seq, seed=case.seed, drop_last=True)
        ranks = _loader_epoch.epoch(case.seq, case.seed, dp, 1, gbs, config, dataset=ds)
        what = f"drop_last=True with {len(ds)} rows < global batch {gbs}"
        golden.check(_loader_epoch.require_refused_by(ranks, rules.Rule.DROP_LAST_NEEDS_A_GLOBAL_BATCH, what))
        return
    golden.check(_loader_epoch.check_epoch(case, dp, 1, gbs, drop_last))
