"""Spies on MB's offline SFT builder that record and change nothing.

* :func:`record_unpacked`: the unpacked SFT datasets MB's packing preparation constructs (the
  oracle's reference: same tokenisation and truncation as what was packed).
* :func:`watch_global_rng`: whether the builder's ``prepare_packed_data`` leaves numpy's global
  RNG state as it found it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.adapters import NotHere, symbol


def unpacked_base() -> Any:
    for module in ("megatron.bridge.data.datasets.gpt_sft", "megatron.bridge.data.datasets.sft"):
        try:
            return symbol(module, "GPTSFTDataset")
        except NotHere:
            continue
    raise NotHere("no GPTSFTDataset in data/datasets/gpt_sft or data/datasets/sft")


@contextlib.contextmanager
def record_unpacked(base: Any) -> Iterator[list[Any]]:
    """Record every unpacked SFT dataset constructed inside the block (packed ones excluded).

    Wraps ``base.__init__`` for the block only; the wrapper calls the original unchanged, so MB
    behaves exactly as without it. Packing preparation builds its unpacked dataset internally
    and drops it; this is how the oracle gets MB's own unpacked view of the same examples.
    """
    seen: list[Any] = []
    original = base.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if "Packed" not in type(self).__name__ and self not in seen:
            seen.append(self)

    base.__init__ = init
    try:
        yield seen
    finally:
        base.__init__ = original


@dataclass
class RngWatch:
    """What :func:`_watch_global_rng` saw: None until the preparation ran."""

    kept: bool | None = None


def _same_state(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) if hasattr(x, "shape") else x == y for x, y in zip(a, b))


@contextlib.contextmanager
def watch_global_rng(builder: Any) -> Iterator[RngWatch]:
    """Record whether the builder's ``prepare_packed_data`` leaves numpy's global RNG untouched.

    Every era's builder prepares packed data through that method; MB seeds a private shuffle and
    restores the caller's state there (a user's own global RNG must not be reseeded by data
    preparation). The wrapper is set on the instance for the block and calls the original
    unchanged. The packed dataset built afterwards reseeds the global RNG by design, which is why
    the state is read around the preparation and not around ``build()``.
    """
    watch = RngWatch()
    original = getattr(builder, "prepare_packed_data", None)
    if original is None:
        yield watch
        return

    def prepare(*args: Any, **kwargs: Any) -> Any:
        before = np.random.get_state()
        out = original(*args, **kwargs)
        watch.kept = _same_state(before, np.random.get_state())
        return out

    builder.prepare_packed_data = prepare
    try:
        yield watch
    finally:
        del builder.prepare_packed_data
