"""Offline packed SFT dataset operations: prepare a packed artifact, load it, collate rows.

Canonical forms:

* ``prepare_packed(examples, out_dir, ...)``: runs MB's offline preparation (tokenised examples
  -> optional per-sequence alignment padding -> histogram -> packing strategy -> filled rows)
  on in-memory examples (no tokeniser download, no JSONL parsing) and returns
  ``{"npy": path, "metadata": path, "rows": [{"input_ids", "loss_mask", "seq_start_id"}...]}``;
* ``packed_dataset(npy, tokenizer, ...)``: MB's runtime dataset over the ``.npy`` artifact
  (``__getitem__``, ``collate_fn`` and ``__len__`` as MB defines them);
* ``collated(batch)``: a collated batch as plain lists (tensors -> lists).

Eras: ``data/packing/offline.prepare_gpt_sft_packed_data`` with a ``dataset_builder`` (2026)
vs ``data/datasets/packed_sequence.prepare_packed_sequence_data`` (reads a JSONL through a
real tokeniser: untestable here); runtime dataset ``data/packing/gpt_sft.GPTSFTPackedDataset``
(2026) vs ``data/datasets/sft.GPTSFTPackedDataset`` / ``data/datasets/gpt_sft`` (earlier).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.adapters import Candidate, Operation, accepts, symbol
from harness.adapters.thd import as_list, strip_sentinel
from harness.errors import NotHere


class TinyTokenizer:
    """What MB's packed SFT code reads from a tokenizer: special ids only (no vocabulary files)."""

    def __init__(self, eos_id: int = 2, pad_id: int = 0, bos_id: int = 1, vocab_size: int = 128) -> None:
        self.eos_id = eos_id
        self.eod = eos_id  # MB pads pre-packed sequences with ``tokenizer.eod``
        self.pad_id = pad_id
        self.pad = pad_id
        self.bos_id = bos_id
        self.vocab_size = vocab_size


class InMemorySFT:
    """Stands for MB's unpacked GPT SFT split: tokenised examples served by index."""

    def __init__(self, examples: list[dict[str, Any]], tokenizer: TinyTokenizer, pad_seq_length_to_mult: int) -> None:
        self.examples = examples
        self.tokenizer = tokenizer
        self.pad_seq_length_to_mult = pad_seq_length_to_mult

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        ex = self.examples[i]
        ids = list(ex["input_ids"])
        start = int(ex["answer_start_idx"])
        return {
            "input_ids": ids,
            "answer_start_idx": start,
            "context_ids": ids[:start],
            "context_length": start,
            "answer_ids": ids[start:],
            "metadata": {},
            "token_count": len(ids),
        }


def _prepare_offline() -> Callable[..., dict[str, Any]]:
    fn = symbol("megatron.bridge.data.packing.offline", "prepare_gpt_sft_packed_data")
    if not accepts(fn, "dataset_builder", "pad_seq_to_mult"):
        raise NotHere("prepare_gpt_sft_packed_data takes no dataset_builder/pad_seq_to_mult")

    def call(
        examples: list[dict[str, Any]],
        out_dir: Path,
        *,
        tokenizer: TinyTokenizer,
        pack_size: int,
        max_seq_length: int | None = None,
        pad_seq_to_mult: int = 1,
        algorithm: str = "first_fit_shuffle",
        seed: int = 0,
    ) -> dict[str, Any]:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        npy, meta = out_dir / "packed.npy", out_dir / "metadata.jsonl"
        if meta.exists():
            meta.unlink()
        data = copy.deepcopy(examples)

        def builder(path, tokenizer, seq_length, memmap_workers, seed, packed_sequence_size, is_test, dataset_kwargs):  # noqa: ANN001 - MB's builder signature
            mult = int((dataset_kwargs or {}).get("pad_seq_length_to_mult", 1))
            return InMemorySFT(data, tokenizer, mult)

        fn(
            out_dir / "in-memory.jsonl",
            npy,
            meta,
            pack_size,
            tokenizer,
            max_seq_length or pack_size,
            seed=seed,
            packing_algorithm=algorithm,
            pad_seq_to_mult=pad_seq_to_mult,
            num_tokenizer_workers=1,
            dataset_builder=builder,
        )
        rows = np.load(npy, allow_pickle=True)
        canon = [
            {
                "input_ids": [int(x) for x in r["input_ids"]],
                "loss_mask": [int(bool(x)) for x in r["loss_mask"]],
                "seq_start_id": [int(x) for x in r["seq_start_id"]],
            }
            for r in rows
        ]
        return {"npy": npy, "metadata": meta, "rows": canon, "metadata_doc": json.loads(meta.read_text())}

    return call


prepare_packed = Operation(
    "prepare_packed",
    [
        Candidate("data/packing/offline.prepare_gpt_sft_packed_data", _prepare_offline),
    ],
)


def _dataset_probe(module: str, cls_name: str = "GPTSFTPackedDataset") -> Callable[[], Callable[..., Any]]:
    def probe() -> Callable[..., Any]:
        cls = symbol(module, cls_name)
        if not accepts(cls.__init__, "pad_cu_seqlens"):
            raise NotHere(f"{module}.GPTSFTPackedDataset has no pad_cu_seqlens")
        takes_mult = accepts(cls.__init__, "pad_seq_to_mult")

        def make(
            npy: Path,
            tokenizer: TinyTokenizer,
            *,
            max_seq_length: int,
            pad_seq_to_mult: int = 1,
            pad_to_max_length: bool = False,
            pad_cu_seqlens: bool = False,
            metadata: Path | None = None,
            pad_seq_length_to_mult: int = 16,
            max_num_samples: int | None = None,
            seed: int = 1234,
            answer_only_loss: bool = True,
        ) -> Any:
            kwargs: dict[str, Any] = dict(
                max_seq_length=max_seq_length,
                pad_to_max_length=pad_to_max_length,
                pad_cu_seqlens=pad_cu_seqlens,
                seed=seed,
                max_num_samples=max_num_samples,
                pad_seq_length_to_mult=pad_seq_length_to_mult,
                answer_only_loss=answer_only_loss,
                # the packed rows are already tokenised; the template only
                # satisfies the unpacked parent class's validation
                prompt_template="{input} {output}",
                label_key="output",
                truncation_field="input",
                pack_metadata_file_path=str(metadata) if metadata else None,
            )
            if takes_mult:
                kwargs["pad_seq_to_mult"] = pad_seq_to_mult
            elif pad_seq_to_mult > 1:
                raise NotHere("GPTSFTPackedDataset has no pad_seq_to_mult in this era")
            return cls(str(npy), tokenizer, **kwargs)

        return make

    return probe


packed_dataset = Operation(
    "packed_dataset",
    [
        Candidate("data/packing/gpt_sft", _dataset_probe("megatron.bridge.data.packing.gpt_sft")),
        Candidate("data/datasets/sft", _dataset_probe("megatron.bridge.data.datasets.sft")),
        Candidate("data/datasets/gpt_sft", _dataset_probe("megatron.bridge.data.datasets.gpt_sft")),
    ],
)


packed_parquet_dataset = Operation(
    "packed_parquet_dataset",
    [
        Candidate(
            "data/packing/parquet", _dataset_probe("megatron.bridge.data.packing.parquet", "GPTSFTPackedParquetDataset")
        ),
    ],
)


def _write_parquet() -> Callable[..., Path]:
    fn = symbol("megatron.bridge.data.packing.parquet", "write_packed_parquet")

    def call(rows: list[dict[str, list[int]]], path: Path) -> Path:
        fn(rows, path)
        return path

    return call


write_rows_parquet = Operation(
    "write_rows_parquet",
    [
        Candidate("data/packing/parquet.write_packed_parquet", _write_parquet),
    ],
)


def collated(batch: dict[str, Any]) -> dict[str, Any]:
    """A collated batch as plain Python in current MCore key names; absent optional keys become None.

    Legacy collates (before the ``cu_seqlens_q`` keys) emit ``cu_seqlens`` (physical boundaries,
    ``-1``-padded per row), ``cu_seqlens_unpadded`` (only with alignment padding) and
    ``max_seqlen``. They map to ``cu_seqlens_q`` / ``cu_seqlens_q_padded`` / ``max_seqlen_q`` the
    way the current collate fills them: real-token boundaries in ``cu_seqlens_q``, physical ones
    in ``cu_seqlens_q_padded`` only when they differ (None otherwise), and row padding that
    repeats the last boundary instead of ``-1``, so each row keeps its length (its shape is
    behaviour too, e.g. ``pad_cu_seqlens``).
    """
    keys = (
        "tokens",
        "labels",
        "loss_mask",
        "position_ids",
        "cu_seqlens_q",
        "cu_seqlens_kv",
        "cu_seqlens_q_padded",
        "cu_seqlens_kv_padded",
        "max_seqlen_q",
        "max_seqlen_kv",
        "token_count",
    )
    out = {k: as_list(batch.get(k)) for k in keys}
    if out["cu_seqlens_q"] is None and batch.get("cu_seqlens") is not None:
        physical = [_repeat_last(row) for row in as_list(batch["cu_seqlens"])]
        unpadded_raw = batch.get("cu_seqlens_unpadded")
        if unpadded_raw is None:
            real, padded = physical, None
        else:
            real, padded = [_repeat_last(row) for row in as_list(unpadded_raw)], physical
        max_seqlen = as_list(batch.get("max_seqlen"))
        out.update(
            cu_seqlens_q=real,
            cu_seqlens_kv=real,
            cu_seqlens_q_padded=padded,
            cu_seqlens_kv_padded=padded,
            max_seqlen_q=max_seqlen,
            max_seqlen_kv=max_seqlen,
        )
    return out


BOUNDARY_KEYS = ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded")


def trimmed(batch: dict[str, Any]) -> dict[str, Any]:
    """``collated(batch)`` with each row's boundary padding removed (era-independent, for goldens).

    How a row of boundaries is padded to the batch's width (a ``-1`` sentinel, repeats of the
    last offset, one extra slot or not) changed across MB eras without changing what the
    boundaries are; the padded shape is checked by its own cases. Physical boundaries that
    equal the real ones are spelled out instead of None.
    """
    out = dict(batch)
    for key in BOUNDARY_KEYS:
        rows = out.get(key)
        if rows is not None:
            out[key] = [_trim_row(r) for r in rows]
    for real, padded in (("cu_seqlens_q", "cu_seqlens_q_padded"), ("cu_seqlens_kv", "cu_seqlens_kv_padded")):
        if out.get(padded) is None:
            out[padded] = out.get(real)
    return out


def _trim_row(row: list[int]) -> list[int]:
    real = strip_sentinel(row) or [0]
    while len(real) > 1 and real[-1] == real[-2]:
        real = real[:-1]
    return real


def _repeat_last(row: list[int]) -> list[int]:
    """``[0, 5, 9, -1, -1]`` -> ``[0, 5, 9, 9, 9]`` (same length, sentinel replaced)."""
    real = strip_sentinel(row) or [0]
    return real + [real[-1]] * (len(row) - len(real))


def write_rows_npy(rows: list[dict[str, list[int]]], path: Path) -> Path:
    """A packed artifact in MB's legacy ``.npy`` layout (an object array of row dicts)."""
    arr = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        arr[i] = {
            "input_ids": list(r["input_ids"]),
            "loss_mask": list(r["loss_mask"]),
            "seq_start_id": list(r["seq_start_id"]),
        }
    np.save(path, arr)
    return path
