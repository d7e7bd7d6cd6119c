"""THD (packed) batch operations: PackedSeqParams building and in-batch packing.

Canonical forms (all tensors become Python lists so goldens read the same in every era):

* packed-seq params: ``qkv_format``, ``cu_seqlens_q``, ``cu_seqlens_kv``, ``cu_seqlens_q_padded``,
  ``cu_seqlens_kv_padded`` (None when absent), ``max_seqlen_q``, ``max_seqlen_kv``;
* an in-batch packed batch: ``tokens``, ``labels``, ``loss_mask``, ``position_ids`` (1-D),
  ``cu_seqlens_padded`` (physical boundaries: where each sequence starts in the packed row),
  ``cu_seqlens_unpadded`` (real-token boundaries; None in eras that do not emit it),
  ``max_seqlen``, and ``raw``: MB's batch itself (tensors, dtypes kept) in its era's keys, for
  :func:`harness.suite.adapters.batch.packed_rows`.

:data:`in_batch_collate` is the exception: it hands back MB's own packed batch (tensors, keys,
dtypes untouched), the way a VLM collate passes it to ``vlm_step`` (harness/suite/adapters/step.py).

Eras (from ``git log -S`` on MB's ``src``):

* packed-seq params: ``training/utils/packed_seq_utils.get_packed_seq_params`` (v0.2.0 on;
  reads ``cu_seqlens_unpadded`` from 5b2d692a9 [2026-01-20, first in v0.3.0] and current-MCore
  keys ``cu_seqlens_q`` from v0.6.0) vs ``training/gpt_step.get_packed_seq_params`` (v0.1.x).
  Before 2026-01-20 offline packing had no per-sequence alignment (``PackedSequenceSpecs`` had
  no ``pad_seq_to_mult``) and the params carried physical boundaries only: cases with distinct
  real-token boundaries are untestable there, not failed. Once the feature exists, a builder
  that ignores ``cu_seqlens_unpadded`` fails.
* in-batch packing, newest first:
  ``data/packing/in_batch.pack_right_padded_sequence_batch_to_mcore_thd`` (e577829e1,
  2026-07-09, v0.6.0 on); the same function in ``data/sequence_batching`` (59ae409f5,
  2026-06-29); ``data/sequence_batching.pad_or_pack_sequence(enable_in_batch_packing=True)``
  (ebd55d7bc, 2026-06-25, legacy keys ``cu_seqlens``/``cu_seqlens_unpadded``/``max_seqlen``);
  ``training/vlm_step.pack_batch_sequences`` (af2f35814, 2026-01-29, v0.4.0 to v0.5.1; a
  7-tuple whose ``cu_seqlens`` are the padded boundaries; an 8th element, when present, is
  taken as the unpadded boundaries). Before 2026-01-29 MB had no in-batch packing: untestable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from harness import features
from harness.errors import MissingOutput, NotHere
from harness.suite.adapters import Candidate, Operation, accepts, module_source, symbol
from harness.suite.adapters.mbtypes import Batch


def as_list(value: Any) -> object:
    """Tensor/array/scalar to plain Python (lists of ints/floats); None stays None."""
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        return value.tolist()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _flat(value: object) -> Any:
    v = as_list(value)
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    return v


def _int_or_none(value: object) -> int | None:
    v = _flat(value)
    if v is None:
        return None
    if isinstance(v, list):
        if len(v) != 1:
            raise ValueError(f"expected one value, got {v}")
        v = v[0]
    return int(v)


def canonical_params(params: object) -> dict[str, object]:
    return {
        "qkv_format": getattr(params, "qkv_format", None),
        "cu_seqlens_q": _flat(getattr(params, "cu_seqlens_q", None)),
        "cu_seqlens_kv": _flat(getattr(params, "cu_seqlens_kv", None)),
        "cu_seqlens_q_padded": _flat(getattr(params, "cu_seqlens_q_padded", None)),
        "cu_seqlens_kv_padded": _flat(getattr(params, "cu_seqlens_kv_padded", None)),
        "max_seqlen_q": _int_or_none(getattr(params, "max_seqlen_q", None)),
        "max_seqlen_kv": _int_or_none(getattr(params, "max_seqlen_kv", None)),
    }


# Where PackedSequenceSpecs lived: its ``pad_seq_to_mult`` field marks the era of aligned offline
# packing, whose batches carry real-token boundaries in ``cu_seqlens_unpadded``.
SPECS_MODULES = ("megatron.bridge.data.packing.config", "megatron.bridge.data.datasets.packed_sequence")


def aligned_offline_packing() -> bool:
    """Does this MB pad packed sequences to a multiple (``PackedSequenceSpecs.pad_seq_to_mult``)?

    Before 5b2d692a9 (2026-01-20, "Enable THD context-parallel packed sequences") it did not, and
    ``get_packed_seq_params`` built the params from the physical boundaries alone. The signal is
    the specs field (the feature's public switch), never the builder's own source, so a builder
    that stops reading ``cu_seqlens_unpadded`` in an era that has the feature is a failure.
    """
    for module in SPECS_MODULES:
        source = module_source(module)
        if source is not None and "class PackedSequenceSpecs" in source:
            return "pad_seq_to_mult" in source
    return False


def _params_probe(module: str) -> Callable[[], Callable[..., dict[str, Any]]]:
    def probe() -> Callable[..., dict[str, object]]:
        fn = symbol(module, "get_packed_seq_params")

        def call(batch: Mapping[str, object]) -> dict[str, object]:
            if "cu_seqlens_unpadded" in batch and not aligned_offline_packing():
                raise features.missing(
                    "aligned-offline-packing",
                    "padded vs real-token boundaries (cu_seqlens_unpadded) are not part of packed params in this "
                    "era: PackedSequenceSpecs has no pad_seq_to_mult",
                )
            return canonical_params(fn(batch))

        return call

    return probe


packed_seq_params = Operation(
    "packed_seq_params",
    [
        Candidate(
            "training/utils/packed_seq_utils (v0.2+)", _params_probe("megatron.bridge.training.utils.packed_seq_utils")
        ),
        Candidate("training/gpt_step (v0.1)", _params_probe("megatron.bridge.training.gpt_step")),
    ],
)


def _batch_in(
    tokens: torch.Tensor,
    labels: torch.Tensor,
    loss_mask: torch.Tensor,
    position_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
) -> Batch:
    batch = {
        "tokens": tokens.clone(),
        "labels": labels.clone(),
        "loss_mask": loss_mask.clone(),
        "position_ids": position_ids.clone(),
    }
    if attention_mask is not None:
        batch["attention_mask"] = attention_mask.clone()
    return batch


def canonical_thd_batch(batch: Mapping[str, object]) -> dict[str, object]:
    """A packed batch in either key family to the canonical in-batch form.

    Current MCore keys: ``cu_seqlens_q`` (real-token boundaries) and, when alignment padding was
    inserted, ``cu_seqlens_q_padded`` (physical); ``max_seqlen_q``. Legacy Bridge keys:
    ``cu_seqlens`` (physical, maybe with ``-1`` sentinels), ``cu_seqlens_unpadded``, ``max_seqlen``.
    """
    if "cu_seqlens_q" in batch:
        unpadded = _flat(batch["cu_seqlens_q"])
        padded = _flat(batch.get("cu_seqlens_q_padded"))
        padded = padded if padded is not None else unpadded
        max_seqlen = batch.get("max_seqlen_q")
    elif "cu_seqlens" in batch:
        padded = strip_sentinel(_flat(batch["cu_seqlens"]))
        unpadded = strip_sentinel(_flat(batch.get("cu_seqlens_unpadded")))
        max_seqlen = batch.get("max_seqlen")
    else:
        raise MissingOutput(f"packed batch has neither cu_seqlens_q nor cu_seqlens (keys {sorted(batch)})")
    return {
        "tokens": _flat(batch["tokens"]),
        "labels": _flat(batch["labels"]),
        "loss_mask": _flat(batch["loss_mask"]),
        "position_ids": _flat(batch["position_ids"]),
        "cu_seqlens_padded": padded,
        "cu_seqlens_unpadded": unpadded,
        "max_seqlen": _int_or_none(max_seqlen),
    }


def strip_sentinel(values: list[int] | None) -> list[int] | None:
    """Drop the ``-1`` padding MB's collate appends to ``cu_seqlens`` (everything from the first -1)."""
    if values is None:
        return None
    out = []
    for v in values:
        if v == -1:
            break
        out.append(v)
    return out


def _accepted_extra(fn: Callable[..., object], extra: dict[str, object]) -> dict[str, object]:
    """Further keyword arguments (``sequence_tensor_pad_values``) for a packer that takes them; one
    that does not is an era without them (untestable), not a harness error."""
    missing = [k for k in extra if not accepts(fn, k)]
    if missing:
        raise NotHere(f"{getattr(fn, '__name__', fn)} takes no {', '.join(missing)}")
    return extra


Packer = Callable[..., object]  # MB's packing function: fills the batch in place, may return it


def _collate_flagged(module: str, name: str) -> Callable[[], Packer]:
    """A collate policy function that packs when ``enable_in_batch_packing=True``."""

    def probe() -> Packer:
        fn = symbol(module, name)
        if not accepts(fn, "enable_in_batch_packing", "in_batch_packing_pad_to_multiple_of", "pad_token_id"):
            raise NotHere(f"{name} lacks enable_in_batch_packing/in_batch_packing_pad_to_multiple_of")

        def call(batch: Batch, *, pad_token_id: int, pad_to_multiple_of: int, **extra: object) -> object:
            return fn(
                batch,
                sequence_length=None,
                enable_in_batch_packing=True,
                in_batch_packing_pad_to_multiple_of=pad_to_multiple_of,
                pad_token_id=pad_token_id,
                **_accepted_extra(fn, extra),
            )

        return call

    return probe


def _collate_direct(module: str) -> Callable[[], Packer]:
    def probe() -> Packer:
        fn = symbol(module, "pack_right_padded_sequence_batch_to_mcore_thd")
        if not accepts(fn, "pad_to_multiple_of", "pad_token_id"):
            raise NotHere("pack_right_padded_sequence_batch_to_mcore_thd lacks pad_to_multiple_of/pad_token_id")

        def call(batch: Batch, *, pad_token_id: int, pad_to_multiple_of: int, **extra: object) -> object:
            return fn(
                batch, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of, **_accepted_extra(fn, extra)
            )

        return call

    return probe


def _returned_batch(probe: Callable[[], Packer]) -> Callable[[], Callable[..., Batch]]:
    """MB's packers fill the batch in place (some also return it): always hand back the batch."""

    def wrapped() -> Callable[..., Batch]:
        fn = probe()

        def call(batch: Batch, *, pad_token_id: int = 0, pad_to_multiple_of: int = 1, **extra: object) -> Batch:
            ret = fn(batch, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of, **extra)
            return ret if isinstance(ret, dict) else batch

        return call

    return wrapped


# the packing functions MB's collates call, newest first: (era, probe returning call(batch, *, pad_token_id,
# pad_to_multiple_of)); the first is the collate policy entry point, the others pack directly
_PACKERS = [
    (
        "data/collators/sequence.prepare_sequence_batch (v0.6+)",
        _collate_flagged("megatron.bridge.data.collators.sequence", "prepare_sequence_batch"),
    ),
    ("data/packing/in_batch (v0.6+)", _collate_direct("megatron.bridge.data.packing.in_batch")),
    ("data/sequence_batching direct (2026-06-29)", _collate_direct("megatron.bridge.data.sequence_batching")),
    (
        "data/sequence_batching.pad_or_pack_sequence (2026-06-25)",
        _collate_flagged("megatron.bridge.data.sequence_batching", "pad_or_pack_sequence"),
    ),
]

in_batch_collate = Operation("in_batch_collate", [Candidate(era, _returned_batch(probe)) for era, probe in _PACKERS])
"""A right-padded batch packed at collate time, exactly as MB's VLM collates hand it to the step
(MB's tensors and keys, in place); before mid 2026 MB packed at step time instead (no candidate)."""


def _in_batch_canonical(probe: Callable[[], Packer]) -> Callable[[], Callable[..., dict[str, object]]]:
    def wrapped() -> Callable[..., dict[str, object]]:
        fn = _returned_batch(probe)()

        def call(
            tokens: torch.Tensor,
            labels: torch.Tensor,
            loss_mask: torch.Tensor,
            position_ids: torch.Tensor,
            attention_mask: torch.Tensor | None = None,
            *,
            pad_token_id: int = 0,
            pad_to_multiple_of: int = 1,
        ) -> dict[str, object]:
            batch = _batch_in(tokens, labels, loss_mask, position_ids, attention_mask)
            raw = fn(batch, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of)
            return {**canonical_thd_batch(raw), "raw": raw}

        return call

    return wrapped


def _in_batch_vlm_step() -> Callable[..., dict[str, Any]]:
    fn = symbol("megatron.bridge.training.vlm_step", "pack_batch_sequences")
    if not accepts(fn, "pad_to_multiple_of"):
        raise NotHere("vlm_step.pack_batch_sequences lacks pad_to_multiple_of")

    def call(
        tokens: torch.Tensor,
        labels: torch.Tensor,
        loss_mask: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        pad_token_id: int = 0,
        pad_to_multiple_of: int = 1,
    ) -> dict[str, object]:
        out = fn(
            tokens.clone(),
            labels.clone(),
            loss_mask.clone(),
            attention_mask,
            position_ids.clone(),
            pad_token_id=pad_token_id,
            pad_to_multiple_of=pad_to_multiple_of,
        )
        if not isinstance(out, tuple) or len(out) not in (7, 8):
            raise MissingOutput(
                f"vlm_step.pack_batch_sequences returned {type(out).__name__} "
                f"of length {len(out) if isinstance(out, tuple) else '?'}; expected a 7- or 8-tuple"
            )
        p_tokens, p_labels, p_loss, _attn, p_pos, cu, max_seqlen = out[:7]
        unpadded = strip_sentinel(_flat(out[7])) if len(out) == 8 and out[7] is not None else None
        raw = {
            "tokens": p_tokens,
            "labels": p_labels,
            "loss_mask": p_loss,
            "position_ids": p_pos,
            "cu_seqlens": cu,
            "max_seqlen": max_seqlen,
            "cu_seqlens_unpadded": out[7] if len(out) == 8 else None,
        }
        return {
            "raw": raw,
            "tokens": _flat(p_tokens),
            "labels": _flat(p_labels),
            "loss_mask": _flat(p_loss),
            "position_ids": _flat(p_pos),
            "cu_seqlens_padded": strip_sentinel(_flat(cu)),
            "cu_seqlens_unpadded": unpadded,
            "max_seqlen": _int_or_none(max_seqlen),
        }

    return call


pack_in_batch = Operation(
    "pack_in_batch",
    [
        *(Candidate(era, _in_batch_canonical(probe)) for era, probe in _PACKERS[1:]),  # the packing function itself
        Candidate("training/vlm_step.pack_batch_sequences (v0.4-v0.5)", _in_batch_vlm_step),
    ],
    before="in-batch packing does not exist before training/vlm_step.pack_batch_sequences",
    feature="in-batch-packing",
)
