"""GPU forward: MCore GPTModel with the Transformer Engine spec, THD PackedSeqParams, bf16.

Same contract as suites/test_forward_cpu.py, on the production path: TE's fused THD attention
consumes MB-built PackedSeqParams (``cu_seqlens`` and, with alignment, ``cu_seqlens_padded``).
Every real token's logits must match the sequence run alone (sbhd, causal), the masked loss
sums agree. Without CUDA or a real Transformer Engine the cases are skipped with the reason
(UNTESTABLE). bf16 tolerance: logits of magnitude ~1 in bf16 carry ~4e-3 relative rounding and
the packed/unpacked kernels accumulate in different orders, so |err| <= 0.05 on logits and a
relative 1e-2 on summed losses; a cross-boundary leak or wrong positions moves logits by >0.1
in this model (RoPE off, learned absolute positions).

Goldens pin the packing inputs (boundaries), which are device independent; the float outputs
are checked by the invariants only. Record on a GPU machine: ``harness fixtures record --suite
forward_gpu --yes``.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from harness.adapters import thd
from suites import _inputs

pytestmark = [pytest.mark.import_group("full"), pytest.mark.gpu]

LOGIT_ATOL = 0.05


def _require_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA and Transformer Engine: no CUDA device on this machine")
    if importlib.util.find_spec("transformer_engine") is None:
        pytest.skip("needs CUDA and Transformer Engine: transformer_engine is not installed")


@torch.no_grad()
def _logits(model, tokens, positions, params=None):
    out = model(
        input_ids=tokens.reshape(1, -1).cuda(),
        position_ids=positions.reshape(1, -1).cuda(),
        attention_mask=None,
        packed_seq_params=params,
    )
    return out.reshape(-1, out.shape[-1]).float()


@pytest.mark.parametrize("seed,rows,width,multiple", [(0, 3, 16, 1), (1, 4, 24, 4), (2, 6, 20, 8)])
def test_te_thd_packed_forward(golden, seed, rows, width, multiple):
    batch, lengths = _inputs.right_padded_batch(seed, rows, width, vocab=100, min_len=2)
    packed = thd.pack_in_batch(
        batch["tokens"],
        batch["labels"],
        batch["loss_mask"],
        batch["position_ids"],
        pad_token_id=_inputs.PAD_ID,
        pad_to_multiple_of=multiple,
    )
    _require_gpu()
    model = te_model_cached()
    from harness.adapters import forward as fwd

    unpadded = packed["cu_seqlens_unpadded"]
    params = fwd.params_from_boundaries(
        unpadded if unpadded is not None else packed["cu_seqlens_padded"],
        packed["cu_seqlens_padded"] if unpadded is not None else None,
        packed["max_seqlen"],
    )
    for name in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        value = getattr(params, name, None)
        if value is not None:
            setattr(params, name, value.cuda())
    lg = _logits(model, torch.tensor(packed["tokens"]), torch.tensor(packed["position_ids"]), params)
    worst, packed_loss, unpacked_loss, offset = 0.0, 0.0, 0.0, 0
    labels, mask = torch.tensor(packed["labels"]).cuda(), torch.tensor(packed["loss_mask"]).cuda()
    safe = labels.clamp(min=0)
    packed_loss = float((torch.nn.functional.cross_entropy(lg, safe, reduction="none") * mask).sum())
    for r, n in enumerate(lengths):
        ref = _logits(model, batch["tokens"][r, :n], torch.arange(n))
        worst = max(worst, float((lg[offset : offset + n] - ref).abs().max()))
        lab = batch["labels"][r, :n].cuda().clamp(min=0)
        unpacked_loss += float(
            (torch.nn.functional.cross_entropy(ref, lab, reduction="none") * batch["loss_mask"][r, :n].cuda()).sum()
        )
        offset += math.ceil(n / multiple) * multiple
    assert worst <= LOGIT_ATOL, f"TE THD packed logits differ from unpacked by {worst}"
    assert math.isclose(packed_loss, unpacked_loss, rel_tol=1e-2, abs_tol=1e-2), (packed_loss, unpacked_loss)
    golden.check(
        {
            "lengths": lengths,
            "cu_seqlens_padded": packed["cu_seqlens_padded"],
            "cu_seqlens_unpadded": unpadded,
            "max_seqlen": packed["max_seqlen"],
        }
    )


_MODEL: dict = {}


def te_model_cached():
    if "m" not in _MODEL:
        _MODEL["m"] = _build()
    return _MODEL["m"]


def _build():
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

    from harness.adapters import forward as fwd

    fwd.init_cpu_parallel(1234)
    torch.manual_seed(1234)
    cfg = fwd.tiny_config(
        use_cpu_initialization=False, params_dtype=torch.bfloat16, bf16=True, pipeline_dtype=torch.bfloat16
    )
    return (
        GPTModel(
            config=cfg,
            transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(),
            vocab_size=fwd.VOCAB,
            max_sequence_length=fwd.MAX_POS,
            position_embedding_type="learned_absolute",
        )
        .cuda()
        .eval()
    )
