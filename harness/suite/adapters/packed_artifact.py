"""MB's packed SFT artifacts: the runtime dataset over a legacy ``.npy`` file, and Parquet shards.

The config suite uses the ``.npy`` dataset for the constructor's checks: before e4cb868dc (2026-08-06)
``ConfigContainer.validate()`` did not look at ``pad_cu_seqlens``, and the packed dataset's constructor
was where MB refused it without ``pad_to_max_length``. Reaching that check needs an artifact in MB's
``.npy`` layout and a tokenizer object; the content of the row is irrelevant to the outcome. The
padding suite loads rows MB's own builder packed (:mod:`harness.suite.adapters.sft`) through this class, as
a user with a packed ``.npy`` file from an earlier MB does (MB still loads them; it stopped writing them).

Since the Parquet layout (ledger feature ``packed-parquet``), a user's packed set can be several
files: MB documents a glob pattern or a directory as ``packed_train_data_path``. The packed-files
suite writes such shards of MB's own packed rows with MB's own writer (:data:`parquet_writer`),
as a user splitting a large packed set does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.errors import NotHere
from harness.suite.adapters import Candidate, Operation, accepts, symbol


class SpecialIdsTokenizer:
    """Test double of a tokenizer for the constructor: it reads special ids only (named in results
    as a stand-in; no text is tokenised on this path)."""

    eos_id = eod = 2
    pad_id = pad = 0
    bos_id = 1
    vocab_size = 128


def write_rows_npy(rows: list[dict[str, list[int]]], path: Path) -> Path:
    """A packed artifact in MB's legacy ``.npy`` layout (an object array of row dicts)."""
    arr = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        arr[i] = {k: list(r[k]) for k in ("input_ids", "loss_mask", "seq_start_id")}
    np.save(path, arr)
    return path


def _probe(module: str, name: str = "GPTSFTPackedDataset") -> Callable[[], Callable[..., object]]:
    def probe() -> Callable[..., object]:
        cls = symbol(module, name)
        if not accepts(cls.__init__, "pad_cu_seqlens"):
            raise NotHere(f"{module}.{name} has no pad_cu_seqlens")
        takes_mult = accepts(cls.__init__, "pad_seq_to_mult")

        def make(
            path: Path,
            *,
            max_seq_length: int,
            metadata: Path | None,
            pad_to_max_length: bool,
            pad_cu_seqlens: bool,
            tokenizer: object = None,
            pad_seq_to_mult: int | None = None,  # None: MB's default (and an era without the keyword)
            return_cu_seqlen: bool | None = None,  # None: MB's default, boundaries in every batch
            max_num_samples: int | None = None,  # None: no samples mapping (max_train_samples)
        ) -> object:
            extra: dict[str, object] = {}
            if max_num_samples is not None:
                extra["max_num_samples"] = max_num_samples
            if pad_seq_to_mult is not None and takes_mult:
                extra["pad_seq_to_mult"] = pad_seq_to_mult
            if return_cu_seqlen is not None:
                extra["return_cu_seqlen"] = return_cu_seqlen
            return cls(
                str(path),
                tokenizer if tokenizer is not None else SpecialIdsTokenizer(),
                max_seq_length=max_seq_length,
                pad_to_max_length=pad_to_max_length,
                pad_cu_seqlens=pad_cu_seqlens,
                # the rows are already tokenised; the template only satisfies the unpacked parent's validation
                prompt_template="{input} {output}",
                label_key="output",
                truncation_field="input",
                pack_metadata_file_path=str(metadata) if metadata is not None else None,
                **extra,
            )

        return make

    return probe


packed_dataset = Operation(
    "packed_dataset",
    [
        Candidate("data/packing/gpt_sft", _probe("megatron.bridge.data.packing.gpt_sft")),
        Candidate("data/datasets/sft", _probe("megatron.bridge.data.datasets.sft")),
        Candidate("data/datasets/gpt_sft", _probe("megatron.bridge.data.datasets.gpt_sft")),
    ],
)


packed_parquet_dataset = Operation(
    "packed_parquet_dataset",
    [
        Candidate("data/packing/parquet", _probe("megatron.bridge.data.packing.parquet", "GPTSFTPackedParquetDataset")),
        Candidate(
            "data/datasets/packed_parquet",
            _probe("megatron.bridge.data.datasets.packed_parquet", "GPTSFTPackedParquetDataset"),
        ),
    ],
    before="packed sets were one .npy file",
    feature="packed-parquet",
)
"""MB's runtime dataset over packed Parquet file(s), as a user's own loader constructs it (the same
keywords as :data:`packed_dataset`)."""


def read_rows(path: Path) -> list[dict[str, list[int]]]:
    """The rows of a packed file MB wrote, in file order: Parquet, or the legacy ``.npy`` object array."""
    if path.suffix == ".npy":
        return [{k: list(row[k]) for k in _ROW_KEYS} for row in np.load(path, allow_pickle=True)]
    import pyarrow.parquet as pq

    rows: list[dict[str, list[int]]] = pq.read_table(str(path), columns=list(_ROW_KEYS)).to_pylist()
    return rows


_ROW_KEYS = ("input_ids", "loss_mask", "seq_start_id")


def _writer_probe(module: str) -> Callable[[], Callable[..., object]]:
    def probe() -> Callable[..., object]:
        write = symbol(module, "write_packed_parquet")
        if not accepts(write, "row_group_size"):
            raise NotHere(f"{module}.write_packed_parquet takes no row_group_size")
        return write

    return probe


parquet_writer = Operation(
    "parquet_writer",
    [
        Candidate("data/packing/parquet", _writer_probe("megatron.bridge.data.packing.parquet")),
        Candidate("data/datasets/packed_parquet", _writer_probe("megatron.bridge.data.datasets.packed_parquet")),
    ],
    before="packed sets were one .npy file",
    feature="packed-parquet",
)
"""``write_packed_parquet(rows, path, row_group_size=...)``: MB's own writer of a packed Parquet file."""


def shard_sizes(total: int, sizes: list[int]) -> list[int]:
    """How many of ``total`` rows each shard holds: ``sizes`` in turn, the last shard the rest (no empty shard)."""
    out: list[int] = []
    for n in [*sizes, total]:
        n = min(n, total - sum(out))
        if n > 0:
            out.append(n)
    return out


def write_shards(
    rows: list[dict[str, list[int]]], directory: Path, sizes: list[int], row_group_size: int
) -> list[Path]:
    """``rows`` as consecutive Parquet shards of :func:`shard_sizes` rows, written by MB's writer into
    ``directory`` as ``shard_NN.idx.parquet``: their names sort in the order of the rows."""
    directory.mkdir(parents=True, exist_ok=True)
    files, at = [], 0
    for k, n in enumerate(shard_sizes(len(rows), sizes)):
        files.append(directory / f"shard_{k:02d}.idx.parquet")
        parquet_writer(rows[at : at + n], files[-1], row_group_size=row_group_size)
        at += n
    return files
