"""The oracle's own self-test of the reference THD attention (harness-built params, on purpose).

The CPU forward suite runs MB's step functions into a tiny GPTModel whose THD attention is
``harness.suite.adapters.forward.SegmentedSDPAttention``; here that attention is fed PackedSeqParams
built by the test (the only place the harness builds them) and deliberately corrupted inputs.
It is also the negative control for the suite's logit tolerance (``suites._forward.LOGIT_ATOL``):
correct inputs match the unpacked run to fp32 noise far below it, and the smallest real fault
(a boundary off by one token, position ids off by one or not restarting) moves some real
token's logits by more than 100 times it. Uses megatron-core only (no Megatron-Bridge import).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")

import functools
import itertools
import operator

from harness.suite.adapters import forward as fwd
from suites._forward import LOGIT_ATOL as ATOL

SEQS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [14, 15, 16, 17, 18, 19, 20, 21], [22, 23, 24, 25]]


def _params(cu: list[int]):
    from megatron.core.packed_seq_params import PackedSeqParams

    t = torch.tensor(cu, dtype=torch.int32)
    return PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=t,
        cu_seqlens_kv=t,
        max_seqlen_q=max(b - a for a, b in itertools.pairwise(cu)),
        max_seqlen_kv=max(b - a for a, b in itertools.pairwise(cu)),
    )


@pytest.fixture(scope="module")
def model():
    return fwd.tiny_gpt(seed=7)


def _case(cu: list[int] | None = None, positions: torch.Tensor | None = None):
    lens = [len(s) for s in SEQS]
    true_cu = [0]
    for n in lens:
        true_cu.append(true_cu[-1] + n)
    tokens = torch.tensor(functools.reduce(operator.iadd, SEQS, []))
    pos = torch.tensor(functools.reduce(operator.iadd, (list(range(n)) for n in lens), []))
    labels = torch.tensor(functools.reduce(operator.iadd, (s[1:] + [0] for s in SEQS), []))
    mask = torch.tensor(functools.reduce(operator.iadd, ([1.0] * (len(s) - 1) + [0.0] for s in SEQS), []))
    seqs = [
        {"offset": true_cu[i], "tokens": s, "labels": s[1:] + [0], "loss_mask": [1.0] * (len(s) - 1) + [0.0]}
        for i, s in enumerate(SEQS)
    ]
    packed = {
        "tokens": tokens,
        "position_ids": pos if positions is None else positions,
        "labels": labels,
        "loss_mask": mask,
        "params": _params(cu or true_cu),
    }
    return packed, seqs, true_cu


def test_correct_inputs_match(model):
    packed, seqs, _ = _case()
    cmp = fwd.compare_packed(model, packed, seqs)
    assert cmp.ok(ATOL), cmp.as_dict()
    assert cmp.max_abs_logit_err < ATOL / 50, "fp32 noise must sit far below the suite's tolerance"


@pytest.mark.parametrize("which,delta", [(1, 1), (2, -1), (3, 1)])
def test_wrong_cu_seqlens_detected(model, which, delta):
    _, _, true_cu = _case()
    cu = list(true_cu)
    cu[which] += delta  # a boundary off by one token
    packed, seqs, _ = _case(cu=cu)
    cmp = fwd.compare_packed(model, packed, seqs)
    assert not cmp.ok(ATOL), f"off-by-one boundary at {which} went unnoticed: {cmp.as_dict()}"
    assert cmp.max_abs_logit_err > 100 * ATOL


def test_merged_sequences_detected(model):
    _, _, true_cu = _case()
    packed, seqs, _ = _case(cu=[c for i, c in enumerate(true_cu) if i != 2])  # two sequences attend each other
    cmp = fwd.compare_packed(model, packed, seqs)
    assert not cmp.ok(ATOL) and cmp.max_abs_logit_err > 100 * ATOL


def test_wrong_position_ids_detected(model):
    packed, seqs, _ = _case()
    n = packed["tokens"].numel()
    for bad in (
        torch.arange(n),  # not reset per sequence
        packed["position_ids"] + 1,
    ):  # shifted by one
        p = dict(packed, position_ids=bad)
        cmp = fwd.compare_packed(model, p, seqs)
        assert not cmp.ok(ATOL), f"wrong position ids went unnoticed: {cmp.as_dict()}"
        assert cmp.max_abs_logit_err > 100 * ATOL


def test_reference_attention_never_crosses_segments():
    q = torch.randn(10, 2, 4)
    k, v = torch.randn(10, 2, 4), torch.randn(10, 2, 4)
    base = fwd.thd_reference_attention(q, k, v, _params([0, 4, 10]))
    v2 = v.clone()
    v2[:4] += 5.0  # change only the first segment's values
    other = fwd.thd_reference_attention(q, k, v2, _params([0, 4, 10]))
    assert torch.equal(base[4:], other[4:]), "segment 2 must not see segment 1"
    assert not torch.equal(base[:4], other[:4])
