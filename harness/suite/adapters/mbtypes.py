"""What the harness reads of MB's own objects, stated as protocols.

MB's classes are found at run time, era by era (:func:`harness.suite.adapters.symbol`), so no
static type names them. These protocols say which of their attributes an adapter or a suite relies
on: mypy then checks the harness's side, and an era whose object lacks one fails where it is read
(a :class:`~harness.errors.MissingOutput` or an ``AttributeError`` in MB's frame), not silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Protocol

import torch

Batch = dict[str, torch.Tensor]
"""A batch as MB's collates and steps pass it: tensors by key (MB's own keys, its own tensors)."""


class Loader(Protocol):
    """MB's training ``DataLoader``: its batch sampler's index batches and the collated batches."""

    @property
    def batch_sampler(self) -> Sequence[Sequence[int]] | Iterator[Sequence[int]]: ...

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]: ...


ModelOutput = torch.Tensor | tuple[torch.Tensor, ...]
"""What a model's forward returns to MB's step: per-token losses or logits (first of a tuple)."""

LossFunction = Callable[[ModelOutput], Sequence[torch.Tensor]]
"""The loss function MB's step hands the schedule: the model output to (loss sum, token count, ...)."""

ForwardStep = Callable[..., tuple[ModelOutput, LossFunction]]
"""MB's ``forward_step(state, data_iterator, model, ...)``: the model's output and the loss function
the schedule applies to it."""


class Dataset(Protocol):
    """An MB dataset split: rows by index. A row is MB's own record (token lists or tensors by key,
    their set per dataset class and era), so it stays untyped here; the oracle reads it by key."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> dict[str, Any]: ...


class SFTDataset(Dataset, Protocol):
    """An MB SFT split, which collates its own rows into a batch (the loader's ``collate_fn``)."""

    def collate_fn(self, rows: list[dict[str, object]]) -> Batch: ...


class PackedSeqParams(Protocol):
    """MCore's ``PackedSeqParams`` as the harness reads it (a dataclass in every MCore era): the THD
    boundaries of the packed stream, real-token (``cu_seqlens_q``) and physical (``..._padded``)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[object]]]  # a dataclass in every era
    qkv_format: str | None
    cu_seqlens_q: torch.Tensor
    cu_seqlens_kv: torch.Tensor | None
    cu_seqlens_q_padded: torch.Tensor | None
    cu_seqlens_kv_padded: torch.Tensor | None
