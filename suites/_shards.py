"""Packed Parquet shards of MB's own rows named by a glob or by their directory, and their checks.

Shared by the ``packed_files`` suite (hand-picked shard sizes) and the exploration (the data
space draws how many shards a packed set is split into): a drawn sharding is judged exactly as
the listed one. Why MB's own rows written by MB's own writer: a user splits a large packed set
(or packs it in parts) with ``write_packed_parquet``; MB documents a glob pattern or a
directory as ``packed_train_data_path`` for such a set, and resolves it to the sorted files.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

from harness.errors import Untestable
from harness.records.impact import Impact, fail
from harness.suite.adapters import needs, packed_artifact, sampler, sft
from harness.suite.oracle import corpus, differential
from suites import _dataparallel, _sftcases
from suites._explain import first_difference, multiset_difference

# rows per Parquet row group (MB's writer makes 500): a shard of a few rows holds several, so the first
# row of a shard lies in a row group of the same number as the last row read from the shard before it
ROW_GROUP = 2


def available() -> bool:
    """Whether this MB has packed Parquet shards (ledger feature ``packed-parquet``); a module of it
    that exists and does not import is a break, raised, never "not available"."""
    try:
        needs(packed_artifact.parquet_writer)  # resolving is the probe
    except Untestable:
        return False
    return True


def even_sizes(total: int, shards: int) -> list[int]:
    """``total`` rows cut into ``shards`` shards as evenly as can be (larger first)."""
    return [total // shards + (1 if k < total % shards else 0) for k in range(shards)]


def check(
    case: _sftcases.SFTCase,
    one: Any,
    train_file: Path,
    examples: list[differential.Example],
    work: Path,
    sizes: list[int],
    named: str = "glob",
    gbs: int = 3,
    metadata: Path | None = None,
) -> dict[str, Any]:
    """The rows of ``train_file`` (MB's packed set ``one`` reads) written as shards of ``sizes`` rows and
    named by ``named`` ("glob" or "directory") with ``dataset_root`` holding other examples: MB trains
    every row once, as from the one file; an index MB's batch sampler (global batch ``gbs``) draws,
    shuffled across shards and row groups, reads the row an ascending read gives it; every drawn row,
    padding rows included, is held to the oracle against ``examples``; the user's shards stay
    unchanged. Raises on a violation; returns the golden (the shards' order is in it: change only)."""
    rows = packed_artifact.read_rows(train_file)
    shards = packed_artifact.write_shards(rows, work / "shards", sizes, ROW_GROUP)
    before = {p: p.read_bytes() for p in shards}
    spec = shards[0].parent / "shard_*.idx.parquet" if named == "glob" else shards[0].parent
    other = dataclasses.replace(case, seed=case.seed + 1000)  # the dataset_root's own examples differ
    # files that exist are read, not packed: no packing algorithm is handed to a preparation that never runs
    packing = dataclasses.replace(case.packing, paths=sft.PackedPaths(spec, metadata=metadata), algorithm=None)
    root = corpus.write_dataset_root(work / "data", other.corpus)
    many = sft.build_sft(_sftcases.request(case, root, packing=packing)).train
    want = _sftcases.canonical_rows(_dataparallel.rows_of(one, list(range(len(one)))))
    got = _sftcases.canonical_rows(_dataparallel.rows_of(many, list(range(len(many)))))
    cut = packed_artifact.shard_sizes(len(rows), sizes)
    if Counter(map(repr, got)) != Counter(map(repr, want)):
        raise fail(
            Impact.DROPS_TRAINED_TOKEN if len(got) < len(want) else Impact.WRONG_TARGETS,
            f"{len(shards)} shards of {len(want)} packed rows ({cut} rows) named by {named}: MB trains "
            f"{len(got)} rows, not each row once: "
            + multiset_difference(map(repr, want), map(repr, got), "packed row"),
        )
    # the sampler draws indices in a shuffled order: each must locate its row across shards and row groups
    # as the ascending read did (the order of the shards is in the golden: a change, not breakage)
    drawn = [i for batch in sampler.padded_global_batches(len(many), gbs, seed=case.seed) for i in batch]
    real = [i for i in drawn if i >= 0]
    located = _sftcases.canonical_rows(_dataparallel.rows_of(many, real))
    if located != [got[i] for i in real]:
        raise fail(
            Impact.WRONG_TARGETS,
            f"rows read in the order MB's sampler draws them ({real}) are not the rows at those indices: "
            + first_difference([got[i] for i in real], located, "drawn row"),
        )
    _sftcases.compare(case, examples, _dataparallel.rows_of(many, drawn), _sftcases.special_ids(case)).assert_ok()
    changed = [p.name for p, data in before.items() if p.read_bytes() != data]
    if changed:
        raise fail(Impact.WRONG_TARGETS, f"MB rewrote the packed shards the user named: {changed}")
    return {"shards": cut, "drawn": drawn, "rows": got}
