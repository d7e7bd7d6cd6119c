"""The forward oracle's pure checks (harness/suite/oracle/stepcheck.py): each fires on its fault, stays quiet otherwise.

No torch, no MB: plain lists shaped like what the forward suite records from MB's step.
"""

from __future__ import annotations

import itertools

from harness.suite.oracle import differential as d
from harness.suite.oracle import stepcheck as s

EX = [
    d.Example("#0", (10, 11, 12), (11, 12, 2), (0, 1, 1), (0, 1, 2)),
    d.Example("#1", (20, 21), (21, 2), (1, 1), (0, 1)),
]


def _view(q, qp=None, *, fmt="thd", dtype="int32", ndim=1, extra=None, max_q=None):
    bounds = {"cu_seqlens_q": q, "cu_seqlens_kv": q, "cu_seqlens_q_padded": qp, "cu_seqlens_kv_padded": qp}
    set_ = [k for k, v in bounds.items() if v is not None]
    physical = qp or q or [0]
    longest = max((b - a for a, b in itertools.pairwise(physical)), default=0)
    return s.ParamsView(
        fmt,
        bounds,
        dict.fromkeys(set_, dtype),
        dict.fromkeys(set_, ndim),
        max_q if max_q is not None else longest,
        max_q if max_q is not None else longest,
        extra or {},
    )


def _inputs(tokens, labels, mask, pos):
    return s.ModelInputs(tokens, labels, mask, pos)


# a packed row with alignment to 4: example #0 at 0..3 (1 pad), example #1 at 4..5 (2 pads)
ROW = _inputs(
    [10, 11, 12, 0, 20, 21, 0, 0], [11, 12, 2, 0, 21, 2, 0, 0], [0, 1, 1, 0, 1, 1, 0, 0], [0, 1, 2, 3, 0, 1, 2, 3]
)


def _compare(view):
    return d.compare([s.model_row(ROW, view)], EX, pad_seq_to_mult=4, padding_ids={0, 2})


def test_correct_params_pass_every_check():
    view = _view([0, 3, 5], [0, 4, 8])
    assert s.check_params(0, view) == []
    assert _compare(view).ok


def test_contract_violations_are_named():
    kinds = {
        "qkv-format": _view([0, 3, 5], [0, 4, 8], fmt="sbhd"),
        "empty-cu-seqlens": _view([], [0, 4, 8]),
        "not-1d": _view([0, 3, 5], [0, 4, 8], ndim=2),
        "extra-field:total_tokens": _view([0, 3, 5], [0, 4, 8], extra={"total_tokens": "8"}),
    }
    for tag, view in kinds.items():
        got = s.check_params(0, view)
        assert got and all(v.invariant is d.Invariant.PARAMS for v in got), tag
        assert any(tag in v.tags and s.MODEL_TAG in v.tags for v in got), (tag, got)
    extra = s.check_params(0, kinds["extra-field:total_tokens"])
    assert {v.training_impact.value for v in extra} == {"perf-contract"}  # a fast-path contract, not a crash
    int64 = s.check_params(0, _view([0, 3, 5], [0, 4, 8], dtype="int64"))
    assert {v.invariant for v in int64} == {d.Invariant.BOUNDARY_DTYPE} and len(int64) == 4
    assert s.check_params(0, None)[0].tags[0] == "no-params"


def test_missing_max_seqlen_is_named():
    from dataclasses import replace

    view = replace(_view([0, 3, 5], [0, 4, 8]), max_seqlen_q=None, max_seqlen_kv=None)
    got = s.check_params(0, view)
    assert [(v.invariant, v.tags) for v in got] == [(d.Invariant.MAX_SEQLEN, ("max-seqlen-missing", s.MODEL_TAG))]


def test_swapped_padded_and_unpadded_boundaries_break_the_row():
    report = _compare(_view([0, 4, 8], [0, 3, 5]))
    kinds = {v.invariant for v in report.violations}
    assert d.Invariant.PHYSICAL_BOUNDARIES in kinds


def test_outputs_equal_within_tolerance_and_worst_token_reported():
    segs = [d.Segment("#0", 0, 3), d.Segment("#1", 4, 2)]
    logits = [[0.1 * p, 1.0] for p in range(8)]
    loss = [float(p) for p in range(8)]
    packed = s.TokenOutputs(logits, loss)
    refs = {"#0": s.TokenOutputs(logits[0:3], loss[0:3]), "#1": s.TokenOutputs(logits[4:6], loss[4:6])}
    out, errs = s.check_outputs(0, ROW.tokens, segs, packed, refs, logit_atol=1e-4, loss_atol=1e-4)
    assert out == [] and errs.logits == 0.0
    bad = s.TokenOutputs([row[:] for row in logits], loss[:])
    bad.logits[5][1] += 1e-3  # one logit of example #1's last token
    bad.token_loss[1] += 5e-5  # within the loss tolerance
    out, errs = s.check_outputs(0, ROW.tokens, segs, bad, refs, logit_atol=1e-4, loss_atol=1e-4, roles={21: ("eos",)})
    assert [(v.invariant, v.position) for v in out] == [(d.Invariant.LOGITS, 5)]
    assert "input:eos" in out[0].tags and s.MODEL_TAG in out[0].tags
    assert abs(errs.logits - 1e-3) < 1e-9 and abs(errs.token_loss - 5e-5) < 1e-9


def test_a_segment_cut_short_by_the_row_is_a_logits_violation():
    packed = s.TokenOutputs([[0.0]] * 2, [0.0] * 2)
    refs = {"#0": s.TokenOutputs([[0.0]] * 3, [0.0] * 3)}
    out, _ = s.check_outputs(0, [10, 11], [d.Segment("#0", 0, 3)], packed, refs, logit_atol=1e-4, loss_atol=1e-4)
    assert [v.invariant for v in out] == [d.Invariant.LOGITS]


def test_loss_totals():
    want = s.LossTotals(10.0, 4.0).plus(s.LossTotals(2.5, 1.0))
    assert s.check_totals(0, s.LossTotals(12.5000001, 5.0), want, rtol=1e-5, atol=1e-4) == []
    got = s.check_totals(0, s.LossTotals(11.0, 4.0), want, rtol=1e-5, atol=1e-4)
    assert sorted(v.tags[0] for v in got) == ["loss-sum", "num-tokens"]


def test_at_model_tags_differential_violations():
    report = _compare(_view([0, 3, 5], [0, 4, 8]))
    bad = d.compare(
        [s.model_row(s.ModelInputs(ROW.tokens, ROW.labels, [1] * 8, ROW.position_ids), _view([0, 3, 5], [0, 4, 8]))],
        EX,
        pad_seq_to_mult=4,
        padding_ids={0, 2},
    )
    assert report.ok and not bad.ok
    assert all(s.MODEL_TAG in v.tags for v in s.at_model(bad.violations))
