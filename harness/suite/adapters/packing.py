"""Offline packing operations: bin-packing algorithms, histogram, strategy filling.

Eras: ``data/packing/algorithms.py`` (v0.6+) and ``data/datasets/packing_utils.py``
(v0.1 to v0.5). Canonical outputs are plain Python lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import ParamSpec, SupportsInt, TypeVar

import numpy as np

from harness.errors import MissingOutput
from harness.suite.adapters import Candidate, Operation, symbol

MODULES = ("megatron.bridge.data.packing.algorithms", "megatron.bridge.data.datasets.packing_utils")


F = TypeVar("F")  # MB's function, as far as the wrapper reads its result
P = ParamSpec("P")
R = TypeVar("R")


def _candidates(fn_name: str, wrap: Callable[[F], Callable[P, R]]) -> list[Candidate[P, R]]:
    """The operation's candidates, one per era's module: MB's function of that name, wrapped into
    the canonical form (``wrap``'s parameter type states what the harness reads of MB's result)."""

    def probe_for(module: str) -> Callable[[], Callable[P, R]]:
        def probe() -> Callable[P, R]:
            return wrap(symbol(module, fn_name))

        return probe

    return [Candidate(m.replace("megatron.bridge.", ""), probe_for(m)) for m in MODULES]


Rows = Iterable[Iterable[SupportsInt]]


def _bins(fn: Callable[[list[int], int], Rows]) -> Callable[[list[int], int], list[list[int]]]:
    def call(seqlens: list[int], pack_size: int) -> list[list[int]]:
        return [[int(x) for x in b] for b in fn(list(seqlens), pack_size)]

    return call


first_fit = Operation("first_fit", _candidates("first_fit", _bins))
first_fit_decreasing = Operation("first_fit_decreasing", _candidates("first_fit_decreasing", _bins))
first_fit_shuffle = Operation("first_fit_shuffle", _candidates("first_fit_shuffle", _bins))


Sequences = dict[int, list[dict[str, list[int]]]]  # sequences by length: the tokenized examples


def _hist(
    fn: Callable[[np.ndarray, int], tuple[Sequences, Iterable[SupportsInt]]],
) -> Callable[[np.ndarray, int], tuple[Sequences, list[int]]]:
    def call(dataset: np.ndarray, truncate_seq_len: int) -> tuple[Sequences, list[int]]:
        sequences, histogram = fn(dataset, truncate_seq_len)
        return sequences, [int(x) for x in histogram]

    return call


create_hist = Operation("create_hist", _candidates("create_hist", _hist))


def _strategy(
    fn: Callable[[list[int], int, str], tuple[Rows, Mapping[str, object]]],
) -> Callable[[list[int], int, str], tuple[list[list[int]], dict[str, object]]]:
    def call(histogram: list[int], pack_size: int, algorithm: str) -> tuple[list[list[int]], dict[str, object]]:
        assignments, meta = fn(histogram, pack_size, algorithm)
        return [[int(x) for x in b] for b in assignments], dict(meta)

    return call


create_packing_strategy = Operation("create_packing_strategy", _candidates("create_packing_strategy", _strategy))


def _fill(
    fn: Callable[[list[list[int]], Sequences, int, int], Iterable[Mapping[str, Iterable[SupportsInt]]]],
) -> Callable[[list[list[int]], Sequences, int, int], list[dict[str, list[int]]]]:
    def call(
        assignments: list[list[int]], sequences: Sequences, pack_size: int, pad_id: int
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
                    "loss_mask": [int(bool(int(x))) for x in row["loss_mask"]],
                    "seq_start_id": [int(x) for x in row["seq_start_id"]],
                }
            )
        return out

    return call


fill_packing_strategy = Operation("fill_packing_strategy", _candidates("fill_packing_strategy", _fill))
