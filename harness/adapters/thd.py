"""THD (packed) batch operations: PackedSeqParams building and in-batch packing.

Canonical forms (all tensors become Python lists so goldens read the same in every era):

* packed-seq params: ``qkv_format``, ``cu_seqlens_q``, ``cu_seqlens_kv``, ``cu_seqlens_q_padded``,
  ``cu_seqlens_kv_padded`` (None when absent), ``max_seqlen_q``, ``max_seqlen_kv``;
* an in-batch packed batch: ``tokens``, ``labels``, ``loss_mask``, ``position_ids`` (1-D),
  ``cu_seqlens_padded`` (physical boundaries: where each sequence starts in the packed row),
  ``cu_seqlens_unpadded`` (real-token boundaries; None in eras that do not emit it),
  ``max_seqlen``.

Eras: ``training/utils/packed_seq_utils.get_packed_seq_params`` (v0.2+) vs
``training/gpt_step.get_packed_seq_params`` (v0.1); ``data/packing/in_batch`` (from mid 2026,
keys ``cu_seqlens_q``/``cu_seqlens_q_padded``) vs ``training/vlm_step.pack_batch_sequences``
(a 7-tuple whose ``cu_seqlens`` are the padded boundaries).
"""

from __future__ import annotations

from typing import Any, Callable

from harness.adapters import Candidate, NotHere, Operation, accepts, symbol


def as_list(value: Any) -> Any:
    """Tensor/array/scalar to plain Python (lists of ints/floats); None stays None."""
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        return value.tolist()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _flat(value: Any) -> Any:
    v = as_list(value)
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    return v


def _int_or_none(value: Any) -> int | None:
    v = _flat(value)
    if v is None:
        return None
    if isinstance(v, list):
        if len(v) != 1:
            raise ValueError(f"expected one value, got {v}")
        v = v[0]
    return int(v)


def canonical_params(params: Any) -> dict[str, Any]:
    return {
        "qkv_format": getattr(params, "qkv_format", None),
        "cu_seqlens_q": _flat(getattr(params, "cu_seqlens_q", None)),
        "cu_seqlens_kv": _flat(getattr(params, "cu_seqlens_kv", None)),
        "cu_seqlens_q_padded": _flat(getattr(params, "cu_seqlens_q_padded", None)),
        "cu_seqlens_kv_padded": _flat(getattr(params, "cu_seqlens_kv_padded", None)),
        "max_seqlen_q": _int_or_none(getattr(params, "max_seqlen_q", None)),
        "max_seqlen_kv": _int_or_none(getattr(params, "max_seqlen_kv", None)),
    }


def _params_probe(module: str) -> Callable[[], Callable[..., dict[str, Any]]]:
    def probe() -> Callable[..., dict[str, Any]]:
        fn = symbol(module, "get_packed_seq_params")

        def call(batch: dict[str, Any]) -> dict[str, Any]:
            return canonical_params(fn(batch))
        return call
    return probe


packed_seq_params = Operation("packed_seq_params", [
    Candidate("training/utils/packed_seq_utils", _params_probe("megatron.bridge.training.utils.packed_seq_utils")),
    Candidate("training/gpt_step", _params_probe("megatron.bridge.training.gpt_step")),
])


def _in_batch_new() -> Callable[..., dict[str, Any]]:
    fn = symbol("megatron.bridge.data.packing.in_batch", "pack_right_padded_sequence_batch_to_mcore_thd")
    if not accepts(fn, "pad_to_multiple_of", "pad_token_id"):
        raise NotHere("pack_right_padded_sequence_batch_to_mcore_thd lacks pad_to_multiple_of/pad_token_id")

    def call(tokens, labels, loss_mask, position_ids, attention_mask=None, *, pad_token_id: int = 0,
             pad_to_multiple_of: int = 1) -> dict[str, Any]:
        batch = {"tokens": tokens.clone(), "labels": labels.clone(), "loss_mask": loss_mask.clone(),
                 "position_ids": position_ids.clone()}
        if attention_mask is not None:
            batch["attention_mask"] = attention_mask.clone()
        fn(batch, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of)
        unpadded = _flat(batch["cu_seqlens_q"])
        padded = _flat(batch.get("cu_seqlens_q_padded")) or unpadded
        return {"tokens": _flat(batch["tokens"]), "labels": _flat(batch["labels"]),
                "loss_mask": _flat(batch["loss_mask"]), "position_ids": _flat(batch["position_ids"]),
                "cu_seqlens_padded": padded, "cu_seqlens_unpadded": unpadded,
                "max_seqlen": _int_or_none(batch["max_seqlen_q"])}
    return call


def _in_batch_vlm_step() -> Callable[..., dict[str, Any]]:
    fn = symbol("megatron.bridge.training.vlm_step", "pack_batch_sequences")
    if not accepts(fn, "pad_to_multiple_of"):
        raise NotHere("vlm_step.pack_batch_sequences lacks pad_to_multiple_of")

    def call(tokens, labels, loss_mask, position_ids, attention_mask=None, *, pad_token_id: int = 0,
             pad_to_multiple_of: int = 1) -> dict[str, Any]:
        out = fn(tokens.clone(), labels.clone(), loss_mask.clone(), attention_mask, position_ids.clone(),
                 pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of)
        p_tokens, p_labels, p_loss, _attn, p_pos, cu, max_seqlen = out
        return {"tokens": _flat(p_tokens), "labels": _flat(p_labels), "loss_mask": _flat(p_loss),
                "position_ids": _flat(p_pos), "cu_seqlens_padded": _flat(cu), "cu_seqlens_unpadded": None,
                "max_seqlen": _int_or_none(max_seqlen)}
    return call


pack_in_batch = Operation("pack_in_batch", [
    Candidate("data/packing/in_batch", _in_batch_new),
    Candidate("training/vlm_step.pack_batch_sequences", _in_batch_vlm_step),
])
