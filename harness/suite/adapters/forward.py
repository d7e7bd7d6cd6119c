"""CPU forward of MCore's real GPTModel on packed (THD) batches, compared to unpacked runs.

* :func:`init_cpu_parallel` - gloo process group of world size 1 (file store in a temp dir),
  ``parallel_state.initialize_model_parallel(1, 1)``, CPU-friendly RNG tracker.
* :class:`SegmentedSDPAttention` - MCore's ``DotProductAttention`` for the unpacked path; with
  ``packed_seq_params`` (THD) it runs causal SDPA separately on every physical segment
  (``cu_seqlens_*_padded`` when present, else ``cu_seqlens_*``), attending only to the
  segment's real tokens (``cu_seqlens_*`` lengths), as TE's THD kernels do. Padding slots
  produce zeros.
* :func:`tiny_gpt` - a 2-layer GPTModel (hidden 64, 4 heads, vocab 128 unless asked) on the local spec with
  the attention above, learned absolute positions (so ``position_ids`` matter: with RoPE in
  THD mode MCore derives positions from ``cu_seqlens`` and ignores ``position_ids``).
* :func:`compare_packed` - logits and masked loss of a packed row vs each sequence alone, from
  harness-built params (the reference attention's own self-test, tests/test_forward_reference.py).

MB's step functions driving this model (what the forward suites run) are in
:mod:`harness.suite.adapters.step`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from harness import features
from harness.suite.adapters import Candidate, NotHere, Operation, cpattention, source_text, symbol
from harness.suite.adapters.mbtypes import PackedSeqParams
from harness.suite.standins.cuda import cpu_cuda_calls, pinned_to_cpu

VOCAB = 128
HIDDEN = 64
HEADS = 4
LAYERS = 2
MAX_POS = 128

_STATE: dict[str, Any] = {}


def init_cpu_parallel(seed: int = 1234) -> None:
    """World-size-1 gloo group + MCore model parallel state (idempotent within a process), set
    up on the CPU whatever the machine has (the CPU forward is pinned, see harness.suite.standins.cuda)."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    if not dist.is_initialized():
        store_dir = tempfile.mkdtemp(prefix="harness-pg-")
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(store_dir, 'store')}", rank=0, world_size=1)
        _STATE["store_dir"] = store_dir
    if not parallel_state.model_parallel_is_initialized():
        with cpu_cuda_calls(pin=True):
            parallel_state.initialize_model_parallel(1, 1)
    with cpu_cuda_calls(pin=True):
        try:  # the default tracker forks CUDA RNG states; the inference tracker does not
            mp_random.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True)
        except TypeError:
            mp_random.model_parallel_cuda_manual_seed(seed)


def _dpa_base() -> object:
    return symbol("megatron.core.transformer.dot_product_attention", "DotProductAttention")


def segmented_attention_class() -> type:
    base = _dpa_base()
    if "SegmentedSDPAttention" in _STATE:
        return _STATE["SegmentedSDPAttention"]

    class SegmentedSDPAttention(base):  # type: ignore[misc, valid-type]
        """Reference THD core attention: per-segment causal SDPA (see module docstring)."""

        def forward(
            self,
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            attention_mask: object,
            attn_mask_type: object = None,
            attention_bias: object = None,
            packed_seq_params: PackedSeqParams | None = None,
            **kwargs: object,
        ) -> object:  # MCore's signature
            if packed_seq_params is None:
                return super().forward(
                    query,
                    key,
                    value,
                    attention_mask,
                    attn_mask_type=attn_mask_type,
                    attention_bias=attention_bias,
                    packed_seq_params=None,
                )
            return thd_reference_attention(query, key, value, packed_seq_params)

    _STATE["SegmentedSDPAttention"] = SegmentedSDPAttention
    return SegmentedSDPAttention


def _segments(params: PackedSeqParams) -> list[tuple[int, int, int]]:
    """(start, physical end, real length) per segment from PackedSeqParams."""
    logical = params.cu_seqlens_q.reshape(-1).tolist()
    physical = params.cu_seqlens_q_padded.reshape(-1).tolist() if params.cu_seqlens_q_padded is not None else logical
    out = []
    for i in range(min(len(physical), len(logical)) - 1):
        start, end = int(physical[i]), int(physical[i + 1])
        real = int(logical[i + 1]) - int(logical[i])
        if end > start:
            out.append((start, end, max(0, min(real, end - start))))
    return out


def thd_reference_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, params: PackedSeqParams
) -> torch.Tensor:
    """query/key/value [t, heads, dim] -> [t, heads*dim]; causal within each segment only
    (with CP > 1 over the whole sequence, keys and values gathered from the CP group)."""
    group = cpattention.cp_group()
    if group is not None:  # CP > 1: this rank holds a slice of the stream (TE's CP layout)
        physical = params.cu_seqlens_q_padded if params.cu_seqlens_q_padded is not None else params.cu_seqlens_q
        return cpattention.cp_thd_attention(query, key, value, _segments(params), physical, group)
    t, heads, dim = query.shape
    if key.shape[1] != heads:  # grouped-query attention
        rep = heads // key.shape[1]
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    out = torch.zeros_like(query)
    for start, _end, real in _segments(params):
        if real == 0:
            continue
        q = query[start : start + real].transpose(0, 1)  # [heads, real, dim]
        k = key[start : start + real].transpose(0, 1)
        v = value[start : start + real].transpose(0, 1)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out[start : start + real] = o.transpose(0, 1)
    return out.reshape(t, heads * dim)


def tiny_config(**overrides: object) -> object:
    cfg_cls = symbol("megatron.core.transformer.transformer_config", "TransformerConfig")
    kwargs = {
        "num_layers": LAYERS,
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "use_cpu_initialization": True,
        "params_dtype": torch.float32,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "masked_softmax_fusion": False,
        "bias_activation_fusion": False,
        "bias_dropout_fusion": False,
        "gradient_accumulation_fusion": False,
        "apply_rope_fusion": False,
        "persist_layer_norm": False,
        "pipeline_dtype": torch.float32,
    }
    kwargs.update(overrides)
    return cfg_cls(**kwargs)


def tiny_gpt(seed: int = 1234, vocab_size: int = VOCAB, **config: object) -> Any:
    """The tiny GPTModel with :class:`SegmentedSDPAttention` (eval mode, fp32, CPU).

    ``vocab_size`` must cover every token id fed in (MB-built SFT batches use the offline
    tokenizer's ids, see :mod:`harness.suite.oracle.tokenizer`). ``config``: TransformerConfig fields
    over :func:`tiny_config`'s (the TP world's ``tensor_model_parallel_size``, ``sequence_parallel``).
    """
    init_cpu_parallel(seed)
    if config.get("sequence_parallel"):
        with _torch_norm_under_sequence_parallel():
            return _tiny_gpt(seed, vocab_size, config)
    return _tiny_gpt(seed, vocab_size, config)


@contextlib.contextmanager
def _torch_norm_under_sequence_parallel() -> Iterator[None]:
    """MCore's torch LayerNorm (its local spec without Apex) refuses ``sequence_parallel``; its
    forward is per token, so on a sequence shard it computes what it computes on the whole
    sequence (SP matters for its gradients only). While the model is built, it gets the config
    without the flag; every other module sees the flag as given."""
    norm = symbol("megatron.core.transformer.torch_norm", "WrappedTorchNorm")
    original = norm.__new__

    def new(cls: object, config: Any, *args: object, **kwargs: object) -> object:
        plain = copy.copy(config)
        plain.sequence_parallel = False
        return original(cls, plain, *args, **kwargs)

    norm.__new__ = new
    try:
        yield
    finally:
        norm.__new__ = original


def _tiny_gpt(seed: int, vocab_size: int, config: dict[str, object]) -> object:
    spec_fn = symbol("megatron.core.models.gpt.gpt_layer_specs", "get_gpt_layer_local_spec")
    gpt_cls = symbol("megatron.core.models.gpt", "GPTModel")
    spec = spec_fn()
    spec.submodules.self_attention.submodules.core_attention = segmented_attention_class()
    torch.manual_seed(seed)
    with pinned_to_cpu():
        model = gpt_cls(
            config=tiny_config(**config),
            transformer_layer_spec=spec,
            vocab_size=vocab_size,
            max_sequence_length=MAX_POS,
            position_embedding_type="learned_absolute",
        )
    model.eval()
    return model


def _builder_probe(module: str) -> Callable[[], Any]:
    def probe() -> object:
        return symbol(module, "get_packed_seq_params")

    return probe


mb_packed_seq_params = Operation(
    "packed_seq_params_object",
    [
        Candidate("training/utils/packed_seq_utils", _builder_probe("megatron.bridge.training.utils.packed_seq_utils")),
        Candidate("training/gpt_step", _builder_probe("megatron.bridge.training.gpt_step")),
    ],
)


def _i32(values: list[int]) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.int32)


def params_from_boundaries(cu_seqlens: list[int], cu_seqlens_padded: list[int] | None, max_seqlen: int) -> object:
    """PackedSeqParams built by MB's own builder from a batch carrying these boundaries.

    The batch speaks the builder's era: current MCore keys (``cu_seqlens_q``...) where the
    builder reads them, else the legacy packed-batch keys (``cu_seqlens`` = physical boundaries
    ending with the ``-1`` sentinel, ``cu_seqlens_unpadded``, ``max_seqlen``). When the era cannot
    express the boundaries (padded and real boundaries differ but the builder knows no unpadded
    key), the case is untestable.
    """
    _, builder = mb_packed_seq_params.resolved
    source = source_text(builder)
    if not source or '"cu_seqlens_q" in batch' in source.replace("'", '"'):
        batch: dict[str, object] = {
            "cu_seqlens_q": _i32(cu_seqlens),
            "cu_seqlens_kv": _i32(cu_seqlens),
            "max_seqlen_q": _i32([max_seqlen]),
            "max_seqlen_kv": _i32([max_seqlen]),
        }
        if cu_seqlens_padded is not None:
            batch["cu_seqlens_q_padded"] = _i32(cu_seqlens_padded)
            batch["cu_seqlens_kv_padded"] = batch["cu_seqlens_q_padded"]
        return builder(batch)
    # legacy packed batches end their boundaries with a -1 sentinel (the builder cuts at argmin)
    batch = {"cu_seqlens": _i32((cu_seqlens_padded or cu_seqlens) + [-1]), "max_seqlen": _i32([max_seqlen])}
    if cu_seqlens_padded is not None and cu_seqlens_padded != cu_seqlens:
        if "cu_seqlens_unpadded" not in source:
            raise features.missing(
                "aligned-offline-packing",
                "this era's get_packed_seq_params has no unpadded boundaries (cu_seqlens_unpadded): "
                "aligned packing cannot be expressed",
            )
        batch["cu_seqlens_unpadded"] = _i32(cu_seqlens + [-1])
    return builder(batch)


@dataclass
class Comparison:
    max_abs_logit_err: float
    packed_loss: float
    unpacked_loss: float
    packed_mask_sum: float
    unpacked_mask_sum: float
    per_sequence_err: list[float] = field(default_factory=list)

    def ok(self, atol: float) -> bool:
        return (
            self.max_abs_logit_err <= atol
            and abs(self.packed_loss - self.unpacked_loss) <= atol * max(1.0, abs(self.unpacked_loss))
            and self.packed_mask_sum == self.unpacked_mask_sum
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "max_abs_logit_err": self.max_abs_logit_err,
            "packed_loss": self.packed_loss,
            "unpacked_loss": self.unpacked_loss,
            "packed_mask_sum": self.packed_mask_sum,
            "unpacked_mask_sum": self.unpacked_mask_sum,
        }


@torch.no_grad()
def logits(
    model: Any, tokens: torch.Tensor, position_ids: torch.Tensor, packed_seq_params: object = None
) -> torch.Tensor:
    mask = None
    if packed_seq_params is None:  # MCore's default causal mask is built on "cuda": pass one (True = masked)
        n = tokens.numel()
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1).reshape(1, 1, n, n)
    with pinned_to_cpu():
        out = model(
            input_ids=tokens.reshape(1, -1).long(),
            position_ids=position_ids.reshape(1, -1).long(),
            attention_mask=mask,
            packed_seq_params=packed_seq_params,
        )
    return out.reshape(-1, out.shape[-1]).float()


def _ce(lg: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    safe = labels.clone().long()
    safe[(safe < 0) | (safe >= lg.shape[-1])] = 0
    return torch.nn.functional.cross_entropy(lg, safe, reduction="none")


@torch.no_grad()
def compare_packed(model: object, packed: dict[str, object], sequences: list[dict[str, Any]]) -> Comparison:
    """Packed row vs every sequence alone.

    ``packed``: ``tokens``, ``position_ids``, ``labels``, ``loss_mask`` (1-D) and ``params``
    (PackedSeqParams). ``sequences``: ground truth, each ``offset`` (start in the packed row),
    ``tokens``, ``labels``, ``loss_mask`` - taken from the data before packing, never from the
    packed boundaries, so wrong boundaries or positions show as a mismatch.
    """
    t = torch.as_tensor(packed["tokens"])
    lg = logits(model, t, torch.as_tensor(packed["position_ids"]), packed["params"])
    ce = _ce(lg, torch.as_tensor(packed["labels"]))
    mask = torch.as_tensor(packed["loss_mask"]).float()
    packed_loss = float((ce * mask).sum())
    errs, un_loss, un_mask = [], 0.0, 0.0
    for s in sequences:
        n = len(s["tokens"])
        ref = logits(model, torch.as_tensor(s["tokens"]), torch.arange(n))
        got = lg[s["offset"] : s["offset"] + n]
        errs.append(float((got - ref).abs().max()) if got.shape == ref.shape else float("inf"))
        m = torch.as_tensor(s["loss_mask"]).float()
        un_loss += float((_ce(ref, torch.as_tensor(s["labels"])) * m).sum())
        un_mask += float(m.sum())
    return Comparison(max(errs), packed_loss, un_loss, float(mask.sum()), un_mask, errs)


__all__ = [
    "Comparison",
    "NotHere",
    "compare_packed",
    "init_cpu_parallel",
    "params_from_boundaries",
    "segmented_attention_class",
    "thd_reference_attention",
    "tiny_gpt",
]
