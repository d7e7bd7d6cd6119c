"""A packed dataset's samples mapping: ``max_train_samples`` beyond the dataset is a run's later epochs.

Why a helper of its own: MB builds the mapping in each packed format (the legacy ``.npy`` file, the
Parquet file, Parquet shards), and a run reaches it through the builder (``data_loaders``) or a
user's own loader (``packed_files``); every way is held to the same documented meaning: the packed
rows repeated over epochs, shuffled within each epoch (the packed dataset's own comment:
"epoch-level shuffling, i.e. sampling without replacement until end of epoch, then repeat").
"""

from __future__ import annotations

from typing import Any

from harness.records.impact import Impact, require
from suites import _dataparallel, _sftcases


def check_mapped_epochs(ds: Any, asked: int, case: _sftcases.SFTCase, special_ids: dict[str, int | None]) -> dict:
    """Every complete epoch of ``ds``'s mapping (``asked`` samples) holds every packed row exactly once,
    the partial last one distinct rows, and a padding index through the mapping is a row that trains
    nothing. Raises on a violation; returns what the golden pins (rows per epoch, epochs)."""
    require(len(ds) == asked, Impact.CRASH, f"the mapping has {len(ds)} rows, asked {asked}")
    keys = [tuple(int(t) for t in ds[i]["input_ids"]) for i in range(len(ds))]  # what the collate gets
    packs = sorted(set(keys))
    per_epoch = len(packs)
    require(
        per_epoch <= len(keys) // 2,
        Impact.WRONG_LOSS_NORMALISATION,
        f"{len(keys)} mapped rows over {per_epoch} distinct packed rows: the mapping does not repeat the dataset",
    )
    for e, start in enumerate(range(0, len(keys), per_epoch)):
        block = keys[start : start + per_epoch]
        complete = len(block) == per_epoch
        require(
            len(set(block)) == len(block) and (sorted(block) == packs if complete else set(block) <= set(packs)),
            Impact.WRONG_LOSS_NORMALISATION,
            f"mapped epoch {e} ({len(block)} rows{'' if complete else ', partial'}) holds each packed row at most "
            f"once{' and every one of them' if complete else ''}: {len(block) - len(set(block))} repeated, "
            f"{len(set(packs) - set(block))} missing",
        )
    pads = _dataparallel.rows_of(ds, [-1, -2])
    _sftcases.compare(case, [], pads, special_ids, expect_all_packed=False).assert_ok()
    return {"rows_per_epoch": per_epoch, "mapped": len(keys)}
