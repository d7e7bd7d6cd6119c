"""MB batches -> the oracle's canonical rows, in every era's key names, keeping dtypes.

Collated batches changed keys across eras: current ones carry MCore's ``cu_seqlens_q`` /
``cu_seqlens_q_padded`` / ``max_seqlen_q``; legacy ones ``cu_seqlens`` (physical boundaries,
padded per row with ``-1``), ``cu_seqlens_unpadded`` (real-token boundaries, only with
alignment padding) and ``max_seqlen``. :func:`packed_rows` maps both to
:class:`~harness.suite.oracle.differential.PackedRow` (legacy physical boundaries become
``cu_seqlens_q_padded`` when real ones exist, as the current collate fills them) and records
each boundary tensor's dtype, because an int64 ``cu_seqlens`` is a regression (TE needs int32)
that plain lists would hide.

:func:`unpacked_examples` turns MB's unpacked dataset into the reference: each example through
the dataset's own ``collate_fn`` alone, cut to its real positions (``len(input_ids) - 1``:
tokens are ``input_ids[:-1]``, labels ``input_ids[1:]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.suite.oracle.differential import Example, PackedRow

if TYPE_CHECKING:
    import torch

_BOUNDARY_KEYS = (
    "cu_seqlens_q",
    "cu_seqlens_q_padded",
    "cu_seqlens_kv",
    "cu_seqlens_kv_padded",
    "cu_seqlens",
    "cu_seqlens_unpadded",
)


def plain(value: object) -> Any:
    """Tensor/array/scalar -> plain Python; None stays None."""
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    return value.tolist() if hasattr(value, "tolist") else value


def dtype_name(value: object) -> str | None:
    dtype = getattr(value, "dtype", None)
    return None if dtype is None else str(dtype).replace("torch.", "")


def _row(value: object, r: int) -> list[Any] | None:
    v = plain(value)
    if v is None:
        return None
    if v and isinstance(v[0], list):
        return list(v[r])
    return list(v) if r == 0 else None


def _scalar(value: object, r: int) -> int | None:
    v = plain(value)
    if v is None:
        return None
    while isinstance(v, list):
        if not v:
            return None
        v = v[r] if len(v) > r and isinstance(v[0], list) else v[0]
    return int(v)


def _strip_sentinel(values: list[int] | None) -> list[int] | None:
    if values is None:
        return None
    out = []
    for v in values:
        if v < 0:
            break
        out.append(int(v))
    return out


def packed_rows(batch: Mapping[str, torch.Tensor], padding_rows: set[int] | None = None) -> list[PackedRow]:
    """Every row of a collated packed batch as a :class:`PackedRow` (current or legacy keys)."""
    dtypes = {k: d for k in _BOUNDARY_KEYS if k in batch and (d := dtype_name(batch[k])) is not None}
    tokens = plain(batch["tokens"])
    out = []
    for r in range(len(tokens)):
        if "cu_seqlens_q" in batch and batch["cu_seqlens_q"] is not None:
            q, qp = _row(batch["cu_seqlens_q"], r), _row(batch.get("cu_seqlens_q_padded"), r)
            kv, kvp = _row(batch.get("cu_seqlens_kv"), r), _row(batch.get("cu_seqlens_kv_padded"), r)
            max_q, max_kv = _scalar(batch.get("max_seqlen_q"), r), _scalar(batch.get("max_seqlen_kv"), r)
        elif batch.get("cu_seqlens") is not None:
            physical = _strip_sentinel(_row(batch["cu_seqlens"], r))
            real = _strip_sentinel(_row(batch.get("cu_seqlens_unpadded"), r))
            q, qp = (real, physical) if real is not None else (physical, None)
            kv, kvp = q, qp
            max_q = max_kv = _scalar(batch.get("max_seqlen"), r)
        else:
            q = qp = kv = kvp = None
            max_q = max_kv = None
        out.append(
            PackedRow(
                tokens=tuple(_row(batch["tokens"], r) or ()),
                labels=tuple(_row(batch["labels"], r) or ()),
                loss_mask=tuple(int(bool(x)) for x in _row(batch["loss_mask"], r) or ()),
                position_ids=tuple(_row(batch["position_ids"], r) or ()),
                cu_seqlens_q=None if q is None else tuple(q),
                cu_seqlens_q_padded=None if qp is None else tuple(qp),
                cu_seqlens_kv=None if kv is None else tuple(kv),
                cu_seqlens_kv_padded=None if kvp is None else tuple(kvp),
                max_seqlen_q=max_q,
                max_seqlen_kv=max_kv,
                dtypes=dtypes,
                padding_row=r in (padding_rows or set()),
            )
        )
    return out


def unpacked_examples(dataset: Any) -> list[Example]:
    """MB's unpacked dataset -> reference examples (each through its own collate, alone)."""
    out = []
    for i in range(len(dataset)):
        item = dataset[i]
        n = len(plain(item["input_ids"])) - 1
        b = dataset.collate_fn([item])
        take = {
            k: tuple(int(x) for x in (_row(b[k], 0) or [])[:n])
            for k in ("tokens", "labels", "loss_mask", "position_ids")
        }
        out.append(
            Example(
                key=f"#{i}",
                tokens=take["tokens"],
                labels=take["labels"],
                loss_mask=tuple(int(bool(x)) for x in take["loss_mask"]),
                position_ids=take["position_ids"],
                length=n,
            )
        )
    return out


PARAM_FIELDS = ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded")


def _flat(value: object) -> list[int] | None:
    v = plain(value)
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    return None if v is None else [int(x) for x in v]


def with_params(row: PackedRow, params: object) -> PackedRow:
    """``row`` with its boundaries replaced by what MCore's ``PackedSeqParams`` ``params`` carry.

    The oracle then checks what the model receives (values, dtypes, ``max_seqlen``) against the
    same unpacked reference as the collated batch.
    """
    values = {name: _flat(getattr(params, name, None)) for name in PARAM_FIELDS}
    dtypes = {name: d for name in PARAM_FIELDS if (d := dtype_name(getattr(params, name, None))) is not None}
    return PackedRow(
        tokens=row.tokens,
        labels=row.labels,
        loss_mask=row.loss_mask,
        position_ids=row.position_ids,
        cu_seqlens_q=None if values["cu_seqlens_q"] is None else tuple(values["cu_seqlens_q"]),
        cu_seqlens_kv=None if values["cu_seqlens_kv"] is None else tuple(values["cu_seqlens_kv"]),
        cu_seqlens_q_padded=None if values["cu_seqlens_q_padded"] is None else tuple(values["cu_seqlens_q_padded"]),
        cu_seqlens_kv_padded=None if values["cu_seqlens_kv_padded"] is None else tuple(values["cu_seqlens_kv_padded"]),
        max_seqlen_q=_scalar(getattr(params, "max_seqlen_q", None), 0),
        max_seqlen_kv=_scalar(getattr(params, "max_seqlen_kv", None), 0),
        dtypes=dtypes,
        padding_row=row.padding_row,
    )
