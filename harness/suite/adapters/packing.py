"""Offline packing operations: bin-packing algorithms, histogram, strategy filling.

Eras: ``data/packing/algorithms.py`` (v0.6+) and ``data/datasets/packing_utils.py``
(v0.1 to v0.5). Canonical outputs are plain Python lists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.errors import MissingOutput
from harness.suite.adapters import Candidate, Operation, symbol

MODULES = ("megatron.bridge.data.packing.algorithms", "megatron.bridge.data.datasets.packing_utils")


def _candidates(fn_name: str, wrap: Callable[[Any], Callable[..., Any]] = lambda f: f) -> list[Candidate]:
    def probe_for(module: str) -> Callable[[], Callable[..., Any]]:
        def probe() -> Callable[..., Any]:
            return wrap(symbol(module, fn_name))

        return probe

    return [Candidate(m.replace("megatron.bridge.", ""), probe_for(m)) for m in MODULES]


def _bins(fn: Callable[..., Any]) -> Callable[..., list[list[int]]]:
    def call(seqlens: list[int], pack_size: int) -> list[list[int]]:
        return [[int(x) for x in b] for b in fn(list(seqlens), pack_size)]

    return call


first_fit = Operation("first_fit", _candidates("first_fit", _bins))
first_fit_decreasing = Operation("first_fit_decreasing", _candidates("first_fit_decreasing", _bins))
first_fit_shuffle = Operation("first_fit_shuffle", _candidates("first_fit_shuffle", _bins))


def _hist(fn: Callable[..., Any]) -> Callable[..., tuple[dict[int, list[dict]], list[int]]]:
    def call(dataset: Any, truncate_seq_len: int) -> tuple[dict[int, list[dict]], list[int]]:
        sequences, histogram = fn(dataset, truncate_seq_len)
        return sequences, [int(x) for x in histogram]

    return call


create_hist = Operation("create_hist", _candidates("create_hist", _hist))


def _strategy(fn: Callable[..., Any]) -> Callable[..., tuple[list[list[int]], dict[str, Any]]]:
    def call(histogram: list[int], pack_size: int, algorithm: str) -> tuple[list[list[int]], dict[str, Any]]:
        assignments, meta = fn(histogram, pack_size, algorithm)
        return [[int(x) for x in b] for b in assignments], dict(meta)

    return call


create_packing_strategy = Operation("create_packing_strategy", _candidates("create_packing_strategy", _strategy))


def _fill(fn: Callable[..., Any]) -> Callable[..., list[dict[str, list[int]]]]:
    def call(
        assignments: list[list[int]], sequences: dict[int, list[dict]], pack_size: int, pad_id: int
    ) -> list[dict[str, list[int]]]:
        rows = fn(assignments, sequences, pack_size, pad_id)
        out = []
        for row in rows:
            if not {"input_ids", "loss_mask", "seq_start_id"} <= set(row):
                raise MissingOutput(
                    f"fill_packing_strategy rows lack input_ids/loss_mask/seq_start_id (keys {sorted(row)})"
                )
            out.append(
                {
                    "input_ids": [int(x) for x in row["input_ids"]],
                    "loss_mask": [int(bool(x)) for x in row["loss_mask"]],
                    "seq_start_id": [int(x) for x in row["seq_start_id"]],
                }
            )
        return out

    return call


fill_packing_strategy = Operation("fill_packing_strategy", _candidates("fill_packing_strategy", _fill))
