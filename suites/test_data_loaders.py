"""Which rows each data-parallel rank trains: MB's loader factory over packed datasets, per rank.

MB's data loader builder hands every dataset to ``build_pretraining_data_loader`` with the
config's ``dataloader_type``: "batch" (the global-batch sampler, checked in
``padding_loss_masks``), "single" (``MegatronPretrainingSampler``: sequential, each rank its slice
of every ``micro * DP`` indices; ``drop_last`` decides the incomplete tail) or "cyclic"
(``MegatronPretrainingRandomSampler``: a seeded permutation per epoch, with MB's default
``data_sharding`` each rank its own bucket; an incomplete tail is dropped). Here each rank's loader
is built with its rank (the factory takes rank and size as arguments, as each rank's builder
does) and read for one epoch.

Invariants: every rank takes as many steps (a rank short of a step hangs the step's collectives)
and no micro-batch is empty (MB's collate cannot pad nothing) or larger than the micro-batch
size; across the ranks no row is trained twice in an epoch; "single" trains every row of the
complete ``micro * DP`` strides (and the tail with ``drop_last=False``), "cyclic" drops fewer rows
than one stride; every row the loaders collate is held to the oracle (MB's unpacked path, per
real token; padding never trains).
"""

from __future__ import annotations

import pytest

from harness.records.impact import Impact, require
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import sampler
from suites import _epochs, _mapping, _sftcases
from suites._explain import multiset_difference

pytestmark = pytest.mark.import_group("light")

# an odd number of rows (max_train_samples: MB's samples mapping over the packs), so the last stride is
# incomplete whatever the era's packing makes of the examples
PROMPT = _sftcases.CleanCase("loader-prompt-mult4", seed=91, mult=4, n=20, max_samples=7)
SHORT = _sftcases.CleanCase("loader-prompt-mult1", seed=93, n=16, max_samples=5)

# (case, dataloader_type, drop_last, data-parallel size, micro-batch size)
CASES = [
    (PROMPT, "single", True, 2, 1),
    (PROMPT, "single", False, 2, 1),
    (SHORT, "single", True, 2, 2),
    (SHORT, "single", False, 2, 2),
    (PROMPT, "cyclic", True, 2, 1),
    (SHORT, "cyclic", True, 4, 1),
    (SHORT, "cyclic", True, 2, 2),
]


def _id(case: _sftcases.SFTCase, kind: str, drop_last: bool, dp: int, mbs: int) -> str:
    tail = "" if kind == "cyclic" else ("-drop-last" if drop_last else "-keep-last")
    return f"{case.id}-{kind}{tail}-dp{dp}-mbs{mbs}"


@pytest.mark.parametrize("case,kind,drop_last,dp,mbs", [_sftcases.case_param(*c, id=_id(*c)) for c in CASES])
def test_rows_per_data_parallel_rank(golden, case, kind, drop_last, dp, mbs):
    b = _sftcases.built(case)
    ds = b.build.train
    total, stride = len(ds), mbs * dp
    epochs = [sampler.pretraining_loader(ds, kind, mbs, r, dp, drop_last=drop_last, seed=case.seed) for r in range(dp)]
    per_rank = [e.indices for e in epochs]
    require(
        len({len(p) for p in per_rank}) == 1,
        Impact.CRASH,
        f"every DP rank takes as many steps: {[len(p) for p in per_rank]} ({total} rows, {dp} ranks, micro {mbs})",
    )
    for r, batches in enumerate(per_rank):
        for step, batch in enumerate(batches):
            require(
                0 < len(batch) <= mbs,
                Impact.CRASH,
                f"rank {r} step {step}: a micro-batch of {len(batch)} rows (micro-batch size {mbs}; an empty one "
                "leaves MB's collate nothing to pad and the rank's step without data)",
            )
            if kind == "cyclic" or step < len(batches) - 1:
                require(len(batch) == mbs, Impact.CRASH, f"rank {r} step {step}: {len(batch)} rows, not {mbs}")
    # a negative index is a padding row (MB's GPT SFT datasets turn it into one that trains nothing)
    flat = [i for batches in per_rank for batch in batches for i in batch if i >= 0]
    require(
        len(set(flat)) == len(flat),
        Impact.WRONG_LOSS_NORMALISATION,
        "a row trained twice in one epoch across the DP ranks: "
        + multiset_difference(sorted(set(flat)), sorted(flat), "row index"),
    )
    require(all(i < total for i in flat), Impact.CRASH, f"an index outside the {total} rows: {sorted(flat)}")
    complete = total - total % stride
    if kind == "single":
        want = list(range(total if not drop_last else complete))
        require(
            sorted(flat) == want,
            Impact.DROPS_TRAINED_TOKEN,
            f"'single' with drop_last={drop_last} trains rows {want[0]}..{want[-1]} once each: "
            + multiset_difference(want, sorted(flat), "row index"),
        )
    else:
        require(
            len(flat) >= complete,
            Impact.DROPS_TRAINED_TOKEN,
            f"'cyclic' drops only an incomplete stride ({total % stride} of {total} rows): it trained {len(flat)}",
        )
    for e in epochs:  # what each rank's loader collates, held to MB's unpacked path; padding trains nothing
        rows = [
            row
            for indices, batch in zip(e.indices, e.loader)
            for row in batch_ops.packed_rows(batch, padding_rows={k for k, i in enumerate(indices) if i < 0})
        ]
        require(
            len(rows) == sum(len(x) for x in e.indices),
            Impact.CRASH,
            f"the loader collated {len(rows)} rows, its sampler handed out {sum(len(x) for x in e.indices)}",
        )
        real = [row for row in rows if not row.padding_row]
        _sftcases.compare(case, b.examples, real, b.special_ids, expect_all_packed=False).assert_ok()
        pads = [row for row in rows if row.padding_row]
        _sftcases.compare(case, [], pads, b.special_ids, expect_all_packed=False).assert_ok()
    golden.check({"rows": total, "per_rank": per_rank})


# (case, dataloader_type, drop_last, data-parallel size, micro-batch size, global batch size): a run's
# life past its first epoch: several epochs of one loader, and a loader resumed from a checkpoint
LIFE = [
    (PROMPT, "batch", False, 2, 1, 4),
    (PROMPT, "batch", True, 2, 1, 4),
    (SHORT, "batch", False, 2, 2, 4),
    (PROMPT, "cyclic", True, 2, 1, 2),
    (PROMPT, "single", True, 2, 1, 2),
]


def _life_id(case: _sftcases.SFTCase, kind: str, drop_last: bool, dp: int, mbs: int, gbs: int) -> str:
    return f"{case.id}-{kind}-{'drop' if drop_last else 'keep'}-last-dp{dp}-mbs{mbs}-gbs{gbs}"


@pytest.mark.parametrize("case,kind,drop_last,dp,mbs,gbs", [_sftcases.case_param(*c, id=_life_id(*c)) for c in LIFE])
def test_every_epoch_and_a_resumed_run_train_every_row_once(case, kind, drop_last, dp, mbs, gbs):
    """Past the first epoch and across a restart, as a user's run lives: MB's loader for each
    data-parallel rank is read for several epochs (its sampler re-iterated, as ``cyclic_iter``
    does for multi-epoch finetuning; a "single" loader has one epoch), and again built from a
    checkpoint's ``consumed_samples`` (after 1 step, mid-epoch, and past the first epoch).

    Each epoch, over the ranks: every rank takes as many steps; with ``drop_last=False`` every row
    trains exactly once and the padding (negative indices) fills only the last global batch, as
    many rows as it lacks; with ``drop_last=True`` only complete global batches, each row at most
    once; every epoch takes as many global batches. A resumed loader hands every rank exactly
    what the uninterrupted loader hands it after the same number of samples. Padding rows of every
    epoch train nothing."""
    _epochs.check_life(case, kind, drop_last, dp, mbs, gbs)


def test_mapped_epochs_hold_every_row_once():
    """``max_train_samples`` beyond the dataset (MB's samples mapping: the packed rows repeated over
    epochs, shuffled within each epoch, as the packed dataset documents it) is a run's later epochs:
    every complete epoch of the mapping holds every packed row exactly once, the partial last one
    distinct rows of the dataset, and a padding index through the mapping is a row that trains
    nothing. (One build: the packed rows are the distinct rows the mapping hands out.)"""
    rows = len(_sftcases.built(_sftcases.CleanCase("mapped-epochs", seed=95, mult=2, n=12)).build.train)
    mapped = _sftcases.CleanCase("mapped-epochs", seed=95, mult=2, n=12, max_samples=3 * rows - 1)
    b = _sftcases.built(mapped)
    _mapping.check_mapped_epochs(b.build.train, 3 * rows - 1, mapped, b.special_ids)
