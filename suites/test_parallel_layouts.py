"""Parallel layouts on CPU: MB's CP partition and PP stage batches of packed data, on real ranks.

Context parallelism (CP 2 and 4) below; pipeline parallelism (PP 3 and 4), then data and context
parallelism at once (DP 2 x CP 2, suites/_dpcp.py) and context and pipeline parallelism at once
(CP 2 x PP 3, suites/_cppp.py), and tensor parallelism with sequence parallelism (TP 2 and 4,
suites/_tpsp.py) at the end of the file.

Documented contract (docs/training/packed-sequences.md; MB's ``ConfigContainer.validate``):
with THD and context parallelism every sequence is padded to a multiple of ``2*CP``
(``pad_seq_to_mult``) so Transformer Engine can split it in ``2*CP`` load-balanced chunks, and
finetuning with CP > 1 needs ``calculate_per_token_loss`` (the loss is summed over the CP
ranks, then normalised by the summed token count). So context parallelism must not change
what trains: every rank holds exactly its chunks of the packed stream, attention over the
gathered keys reproduces the CP = 1 logits, and the summed loss and count are the CP = 1 ones.

What runs is what training runs: a gloo world of ``CP`` CPU processes, each with MCore's real
process groups, calls MB's ``gpt_step.forward_step`` (``get_batch`` -> MB's
``_partition_packed_batch_for_cp`` -> MCore's ``get_batch_on_this_cp_rank``) on the offline
packed micro-batches MB's dataset built. Doubles: the model (the tiny ``GPTModel`` whose
attention gathers K/V over the CP group, :mod:`harness.suite.adapters.cpattention`) and, on a machine
without TE, the named stand-in for TE's partition kernel (:mod:`harness.suite.standins.thd_partition`,
checked against the kernel where a GPU and TE are present). The reference is MB's CP = 1 step on
the same batch (suites/_layouts.py), which ``forward_cpu`` holds against MB's unpacked path.
"""

from __future__ import annotations

import pytest

from harness.suite.adapters.directsft import direct_sft
from suites import _cppp, _directsft, _dpcp, _layouts, _sftcases, _tpsp

pytestmark = pytest.mark.import_group("full")

_BY_ID = {c.id: c for c in _sftcases.CASES + _sftcases.FIXED_SHAPE_CASES}
# (case, CP): the case's pad_seq_to_mult is 2*CP, as MB documents for THD with CP
CASES = [
    ("prompt-mult4", 2),
    ("completion-mult4", 2),
    ("chat-mult4", 2),
    ("prompt-mult4-full-loss", 2),
    ("chat-mult4-pad-to-max", 2),
    ("chat-mult4-pad-cu-seqlens", 2),
    ("prompt-mult8", 4),
    ("chat-mult8", 4),
]


@pytest.mark.parametrize(("case_id", "cp"), CASES, ids=[f"{c}-cp{cp}" for c, cp in CASES])
def test_cp_partition_and_forward(golden, case_id, cp):
    """Every CP rank's part of MB's packed micro-batches, and the parts together, equal CP = 1."""
    case = _BY_ID[case_id]
    assert case.mult == 2 * cp, "a CP case packs with pad_seq_to_mult = 2*CP"
    result = _layouts.run_cp(case, cp)
    _layouts.assert_ok(result.violations, f"CP {cp} != MB's CP 1 path")
    golden.check(result.golden)


# DeepSeek-V4's own step (``--step_func dsv4_step``) under CP, its default (load-balanced) partition:
# its get_batch partitions packed micro-batches itself and tells the model which partition it made
DSV4_CASES = [("prompt-mult4", 2), ("chat-mult4-pad-cu-seqlens", 2)]


@pytest.mark.parametrize(("case_id", "cp"), DSV4_CASES, ids=[f"{c}-cp{cp}" for c, cp in DSV4_CASES])
def test_dsv4_step_under_cp(case_id, cp):
    """Every CP rank's part of MB's packed micro-batches through DeepSeek-V4's ``forward_step``, and the
    parts together, equal the same step at CP = 1: each rank's tokens, labels, positions and loss mask
    are the slice the partition names, its logits those of the same global positions, and MB's loss
    totals summed over the CP group the CP = 1 totals."""
    case = _BY_ID[case_id]
    assert case.mult == 2 * cp, "a CP case packs with pad_seq_to_mult = 2*CP"
    result = _layouts.run_cp(case, cp, through="dsv4")
    _layouts.assert_ok(result.violations, f"DeepSeek-V4's step at CP {cp} != at CP 1")


# (case, PP): three and four stages, so at least one middle stage
PP_CASES = [("prompt-mult1", 3), ("chat-mult4", 4), ("prompt-mult1-pad-cu-seqlens", 3)]


@pytest.mark.parametrize(("case_id", "pp"), PP_CASES, ids=[f"{c}-pp{pp}" for c, pp in PP_CASES])
def test_pp_stages_get_what_they_need(golden, case_id, pp):
    """Pipeline parallelism: MB's ``get_batch`` on the first, middle and last stages of a gloo world
    of ``pp`` processes; every stage gets the packed boundaries (and ``max_seqlen``) its attention
    needs, the first stage the tokens and position ids, the last the labels and loss mask, each as
    MB's PP = 1 step hands them to the model."""
    result = _layouts.run_pp(_BY_ID[case_id], pp)
    _layouts.assert_ok(result.violations, f"PP {pp} stages != MB's PP 1 inputs")
    golden.check(result.golden)


# (case, DP, CP, global batch size, drop_last): DP x CP processes; the case packs with pad_seq_to_mult = 2*CP
DP_CP_CASES = [
    ("prompt-mult4", 2, 2, 2, True),
    ("chat-mult4-pad-to-max", 2, 2, 4, True),
    # the dataset config's drop_last off: the last global batch padded with rows that train nothing
    ("prompt-mult4", 2, 2, 4, False),
]


def _dp_cp_id(c: str, dp: int, cp: int, g: int, drop_last: bool) -> str:
    return f"{c}-dp{dp}-cp{cp}-gbs{g}" + ("" if drop_last else "-keep-last")


@pytest.mark.parametrize(
    ("case_id", "dp", "cp", "gbs", "drop_last"), DP_CP_CASES, ids=[_dp_cp_id(*c) for c in DP_CP_CASES]
)
def test_dp_cp_world_trains_each_data_parallel_rank_its_rows(golden, case_id, dp, cp, gbs, drop_last):
    """Data and context parallelism at once (suites/_dpcp.py): on every rank MB's loader builder with
    the data-parallel group, MB's micro-batch split and MB's step with its CP partition; the CP ranks
    of each data-parallel rank hold, together, exactly the micro-batches MB's sampler gives that rank,
    as MB's CP = 1 step sees them (slices, logits, loss sum and token count)."""
    case = _BY_ID[case_id]
    assert case.mult == 2 * cp, "a CP case packs with pad_seq_to_mult = 2*CP"
    result = _dpcp.run_dp_cp(case, _dpcp.DPCP(dp=dp, cp=cp, global_batch_size=gbs, drop_last=drop_last))
    _layouts.assert_ok(result.violations, f"DP {dp} x CP {cp} != MB's CP 1 path per data-parallel rank")
    golden.check(result.golden)


# (case, CP, PP): CP x PP processes, with a middle stage; the case packs with pad_seq_to_mult = 2*CP
CP_PP_CASES = [("chat-mult4", 2, 3)]


@pytest.mark.parametrize(("case_id", "cp", "pp"), CP_PP_CASES, ids=[f"{c}-cp{cp}-pp{pp}" for c, cp, pp in CP_PP_CASES])
def test_cp_pp_world_gives_every_stage_its_cp_slice(golden, case_id, cp, pp):
    """Context and pipeline parallelism at once (suites/_cppp.py): MB's ``get_batch`` on every stage of
    every CP rank gives the whole stream's boundaries and ``max_seqlen`` to every stage, and each
    field a stage needs as exactly its CP rank's slice of what MB's CP 1, PP 1 step hands the model."""
    case = _BY_ID[case_id]
    assert case.mult == 2 * cp, "a CP case packs with pad_seq_to_mult = 2*CP"
    result = _cppp.run_cp_pp(case, cp, pp)
    _layouts.assert_ok(result.violations, f"CP {cp} x PP {pp} stage inputs != MB's CP 1, PP 1 inputs")
    golden.check(result.golden)


# (case, TP): TP processes with sequence parallelism; packs narrower than the pack size (MB rounds
# each micro-batch's width, see suites/_tpsp.py), one case with one-token-multiple packing
TP_SP_CASES = [("chat-mult1", 2), ("completion-mult1-full-loss", 2), ("chat-mult1-full-loss", 4)]


@pytest.mark.parametrize(("case_id", "tp"), TP_SP_CASES, ids=[f"{c}-tp{tp}-sp" for c, tp in TP_SP_CASES])
def test_tp_sp_world_trains_what_tp1_trains(golden, case_id, tp):
    """Tensor parallelism with sequence parallelism (suites/_tpsp.py): MB's step on every TP rank of a
    gloo world, the model split over the ranks and the packed row scattered over them; every rank
    gets the TP 1 inputs, the row's width divides by TP, and the logits (the ranks' vocabulary parts
    put together), loss sum and token count are MB's TP 1 ones."""
    result = _tpsp.run_tp_sp(_BY_ID[case_id], tp)
    _layouts.assert_ok(result.violations, f"TP {tp} with SP != MB's TP 1 path")
    golden.check(result.golden)


# (kind, seed, TP): in-batch packing in the direct SFT collate, the multiple MB's validation chooses
# for TP with SP (the suite sets none), 6 rows of a user's corpus in one THD micro-batch; corpora
# whose real lengths sum to a width TP does not divide (307 and 143 tokens), so the row scatters
# only because MB rounds every sequence to its multiple
TP_SP_IN_BATCH = [("chat", 154, 2), ("completion", 154, 4)]


@pytest.mark.parametrize(
    ("kind", "seed", "tp"), TP_SP_IN_BATCH, ids=[f"in-batch-{k}-tp{tp}-sp" for k, _s, tp in TP_SP_IN_BATCH]
)
def test_tp_sp_world_trains_in_batch_packed_rows(golden, kind, seed, tp):
    """The same TP world on an in-batch packed micro-batch (suites/_tpsp.py): MB's direct SFT config
    with ``enable_in_batch_packing`` for a TP x SP layout, finalised by MB's ``ConfigContainer.validate``
    (which raises ``in_batch_packing_pad_to_multiple_of`` to what SP's scatter needs), collated by
    MB: the THD row's width divides by TP, and every TP rank's step is MB's TP 1 step."""
    knobs = {"enable_in_batch_packing": True}
    build = direct_sft(_directsft.corpus_request(kind, seed, n=6, layout=(1, tp, True), knobs=knobs))
    _directsft.accepted(build)
    result = _tpsp.run_tp_sp_batches([build.batch], tp)
    _layouts.assert_ok(result.violations, f"in-batch packed TP {tp} with SP != MB's TP 1 path")
    golden.check({**result.golden, "multiple": int(build.config.in_batch_packing_pad_to_multiple_of)})
