"""Spies on MB's offline SFT builder, and the one user setting it has no config field for.

* :func:`record_unpacked`: the unpacked SFT datasets MB's packing preparation constructs (the
  oracle's reference: same tokenisation and truncation as what was packed). Records only.
* :func:`watch_global_rng`: whether the builder's ``prepare_packed_data`` leaves numpy's global
  RNG state as it found it. Records only.
* :func:`packing_algorithm`: the preparation's ``packing_algorithm`` argument, which a user who
  packs offline with another algorithm passes to MB's preparation function (no config field
  carries it); it counts the calls, so a build that never handed it over is seen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.suite.adapters import NotHere, accepts, load_module, symbol


def unpacked_base() -> object:
    for module in ("megatron.bridge.data.datasets.gpt_sft", "megatron.bridge.data.datasets.sft"):
        try:
            return symbol(module, "GPTSFTDataset")
        except NotHere:
            continue
    raise NotHere("no GPTSFTDataset in data/datasets/gpt_sft or data/datasets/sft")


@contextlib.contextmanager
def record_unpacked(base: Any) -> Iterator[list[object]]:
    """Record every unpacked SFT dataset constructed inside the block (packed ones excluded).

    Wraps ``base.__init__`` for the block only; the wrapper calls the original unchanged, so MB
    behaves exactly as without it. Packing preparation builds its unpacked dataset internally
    and drops it; this is how the oracle gets MB's own unpacked view of the same examples.
    """
    seen: list[object] = []
    original = base.__init__

    def init(self: object, *args: object, **kwargs: object) -> None:
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


def _same_state(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
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

    def prepare(*args: object, **kwargs: object) -> object:
        before = np.random.get_state()
        out = original(*args, **kwargs)
        watch.kept = _same_state(before, np.random.get_state())
        return out

    builder.prepare_packed_data = prepare
    try:
        yield watch
    finally:
        del builder.prepare_packed_data


# MB's offline packing preparation, by era: the builder imports it from its module when it packs
PREPARATION = (
    ("megatron.bridge.data.packing.offline", "prepare_gpt_sft_packed_data"),
    ("megatron.bridge.data.datasets.packed_sequence", "prepare_packed_sequence_data"),
)


@dataclass
class AlgorithmCall:
    """How often MB's preparation ran with the user's algorithm (0 after a build: not handed over)."""

    calls: int = 0


@contextlib.contextmanager
def packing_algorithm(name: str | None) -> Iterator[AlgorithmCall]:
    """MB's own preparation call, with ``packing_algorithm=name`` added: what a user who packs
    offline with another algorithm runs (the preparation function's documented argument; MB's
    builder passes every other argument as it does for a config). ``None``: nothing changes."""
    seen = AlgorithmCall()
    if name is None:
        yield seen
        return
    patched: list[tuple[Any, str, Any]] = []
    for module_name, attr in PREPARATION:
        try:
            original = symbol(module_name, attr)
        except NotHere:
            continue
        if not accepts(original, "packing_algorithm"):
            continue
        module = load_module(module_name)

        def call(*args: object, _original: Any = original, **kwargs: object) -> object:
            seen.calls += 1
            return _original(*args, **{**kwargs, "packing_algorithm": name})

        patched.append((module, attr, original))
        setattr(module, attr, call)
    if not patched:
        raise NotHere("no offline packing preparation function takes a packing_algorithm in this era")
    try:
        yield seen
    finally:
        for module, attr, original in patched:
            setattr(module, attr, original)
