"""A run's life past its first epoch, through MB's loader: several epochs, and a restart.

The contract a user's multi-epoch finetuning relies on, held by :func:`check_life` for one
configuration of MB's loader (``data_loaders``' hand-written cases, and the offline exploration
space's drawn ones, suites/_explore_life.py): each epoch, over the data-parallel ranks, every rank
takes as many steps; with ``drop_last=False`` every row trains exactly once and the padding
(negative indices) fills only the last global batch, as many rows as it lacks; with
``drop_last=True`` only complete global batches, each row at most once; every epoch takes as many
global batches; a loader built again from a checkpoint's ``consumed_samples`` hands every rank
exactly what the uninterrupted loader hands it after the same number of samples; padding rows of
every epoch train nothing. Every pass is bounded (:data:`STEP_BUDGET`): a sampler that never
ends is a failure, never a hung suite.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from harness.records.impact import Impact, require
from harness.suite.adapters import sampler
from suites import _dataparallel, _sftcases
from suites._explain import multiset_difference

EPOCHS = 3
STEP_BUDGET = 200  # global batches one epoch may take before it counts as never ending


def epoch(sampler_obj: Iterable[Any], what: str) -> list[list[int]]:
    """One pass of MB's sampler (a loader re-iterating it is its next epoch), bounded."""
    out = [[int(i) for i in b] for b in itertools.islice(iter(sampler_obj), STEP_BUDGET + 1)]
    require(len(out) <= STEP_BUDGET, Impact.CRASH, f"{what}: the sampler did not end within {STEP_BUDGET} batches")
    return out


def check_life(
    case: _sftcases.SFTCase,
    kind: str,
    drop_last: bool,
    dp: int,
    mbs: int,
    gbs: int,
    epochs: int = EPOCHS,
    resumes: Iterable[int] | None = None,
) -> None:
    """Hold MB's ``kind`` loader over ``case``'s packed rows to the module's contract for
    ``epochs`` epochs and restarts after each step count of ``resumes`` (None: after 1 step,
    mid-epoch and past the first epoch); raises on a violation."""
    b = _sftcases.built(case)
    ds = b.build.train
    total = len(ds)
    step_samples = gbs if kind == "batch" else mbs * dp  # what one sampler batch consumes, all ranks

    def loader(rank: int, consumed: int):
        built = sampler.pretraining_loader(
            ds,
            kind,
            mbs,
            rank,
            dp,
            drop_last=drop_last,
            global_batch_size=gbs,
            seed=case.seed,
            consumed_samples=consumed,
        )
        return built.loader.batch_sampler

    epochs = epochs if kind != "single" else 1
    fresh = [loader(r, 0) for r in range(dp)]
    runs = [[epoch(fresh[r], f"rank {r} epoch {e}") for e in range(epochs)] for r in range(dp)]
    per_epoch = []
    for e in range(epochs):
        batches = [runs[r][e] for r in range(dp)]
        require(
            len({len(x) for x in batches}) == 1,
            Impact.CRASH,
            f"epoch {e}: every DP rank takes as many steps: {[len(x) for x in batches]}",
        )
        per_epoch.append(len(batches[0]))
        flat = [i for x in batches for batch in x for i in batch]
        real, pads = [i for i in flat if i >= 0], [i for i in flat if i < 0]
        require(
            len(set(real)) == len(real),
            Impact.WRONG_LOSS_NORMALISATION,
            f"epoch {e}: a row trained twice: " + multiset_difference(sorted(set(real)), sorted(real), "row index"),
        )
        require(all(i < total for i in real), Impact.CRASH, f"epoch {e}: an index outside the {total} rows")
        if not drop_last:
            require(
                sorted(real) == list(range(total)),
                Impact.DROPS_TRAINED_TOKEN,
                f"epoch {e} with drop_last=False trains every row once: "
                + multiset_difference(list(range(total)), sorted(real), "row index"),
            )
            lacking = (-total) % gbs if kind == "batch" else 0
            require(
                len(pads) in (0, lacking),
                Impact.WRONG_LOSS_NORMALISATION,
                f"epoch {e}: {len(pads)} padding rows, the last global batch lacks {lacking}",
            )
        else:
            complete = total - total % (gbs if kind == "batch" else step_samples)
            require(
                len(real) == complete and not pads,
                Impact.DROPS_TRAINED_TOKEN if len(real) < complete else Impact.WRONG_LOSS_NORMALISATION,
                f"epoch {e} with drop_last=True trains the {complete} rows of the complete global batches once "
                f"each and no padding: {len(real)} rows, {len(pads)} padding",
            )
        if pads:
            for r in range(dp):
                for indices in batches[r]:
                    padding = _dataparallel.rows_of(ds, indices)
                    _sftcases.compare(
                        case, [], [p for p in padding if p.padding_row], b.special_ids, expect_all_packed=False
                    ).assert_ok()
    require(len(set(per_epoch)) == 1, Impact.DROPS_TRAINED_TOKEN, f"global batches per epoch: {per_epoch}")
    # a restart: the loader built from the checkpoint's consumed_samples hands each rank what the
    # uninterrupted one does from there
    steps = per_epoch[0]
    default = {1, max(steps // 2, 1), steps + 1} if epochs > 1 else {1, max(steps // 2, 1)}
    for k in sorted(default if resumes is None else set(resumes)):
        if k >= steps * epochs:
            continue
        for r in range(dp):
            after = [batch for epoch in runs[r] for batch in epoch][k:]
            resumed_sampler = loader(r, k * step_samples)
            resumed: list[list[int]] = []
            while len(resumed) < len(after):
                more = epoch(resumed_sampler, f"rank {r} resumed after {k} steps")
                if not more:
                    break
                resumed += more
            got = resumed[: len(after)]
            same_rows = sorted(i for x in got for i in x) == sorted(i for x in after for i in x)
            require(
                got == after,
                Impact.IRREPRODUCIBLE if same_rows else Impact.DROPS_TRAINED_TOKEN,
                f"rank {r} resumed after {k} step(s) ({k * step_samples} consumed samples): "
                f"{_first_difference(after, got)}",
            )


def _first_difference(want: list[list[int]], got: list[list[int]]) -> str:
    for step, (a, b) in enumerate(zip(want, got)):
        if a != b:
            return f"step {step} after the restart reads rows {b}, the uninterrupted run reads {a}"
    return f"{len(got)} batches after the restart, the uninterrupted run has {len(want)}"
