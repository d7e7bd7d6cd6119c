"""Packed batches under real parallel layouts on CPU: every rank runs MB's own code with its own rank.

Context parallelism (:func:`run_cp`): each offline packed micro-batch of an
:class:`~suites._sftcases.SFTCase` goes through MB's ``gpt_step.forward_step`` once in a world of
one (the CP = 1 run, which the ``forward_cpu`` suite holds against MB's unpacked path) and once
on every rank of a gloo world of ``CP`` processes (:mod:`harness.suite.adapters.world`), where MB's
``get_batch`` partitions it (``_partition_packed_batch_for_cp`` -> MCore's
``get_batch_on_this_cp_rank`` -> TE's ``thd_get_partitioned_indices``, on CPU the named stand-in
:mod:`harness.suite.standins.thd_partition`) and the tiny model attends with keys and values gathered
over the CP group (:mod:`harness.suite.adapters.cpattention`). The reference is MB at CP = 1, same
commit, same batch:

* each rank's tokens, labels, loss mask and position ids are exactly the slice TE's layout names
  over the physical boundaries of the stream (so the ranks' slices, put back, are the stream);
* each rank's logits equal the CP = 1 logits of the same global position, per trained token;
* MB's loss function on each rank, summed over the CP group (what the all-reduce sums with
  ``calculate_per_token_loss``, which MB requires for finetuning with CP > 1), gives the CP = 1
  loss sum and token count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.records.impact import Impact, fail
from harness.records.oracle import Invariant, InvariantFailure, Violation
from harness.suite.adapters import cpattention, familystep, needs, ppbatch, step, symbol
from harness.suite.adapters import forward as fwd
from harness.suite.adapters.world import Layout, rank_groups, run_world
from harness.suite.standins import thd_partition
from suites import _forward, _model_view, _sftcases

FIELDS = (("input_ids", Invariant.TOKENS), ("labels", Invariant.LABELS), ("position_ids", Invariant.POSITION_IDS))
MAX_SHOWN = 8


@dataclass
class RankRun:
    """What one CP rank's model received and computed for one micro-batch (picklable)."""

    inputs: dict[str, torch.Tensor]  # input_ids, labels, position_ids, loss_mask: [1, t / CP]
    logits: torch.Tensor  # [1, t / CP, vocab]
    loss_sum: float
    num_tokens: float


def received(run: step.StepRun) -> dict[str, torch.Tensor]:
    """What MB's step handed the model (input ids, labels, position ids) and the loss mask its loss
    function multiplies by: the per-rank fields every layout compares with its world of one."""
    out = {name: run.kwargs[name] for name, _ in FIELDS}
    out["loss_mask"] = _model_view.loss_mask_of(run)
    return out


def rank_model() -> tuple[Any, step.RecordingModel]:
    """One rank's process groups (MCore's, as MB's step reads them) and its tiny model."""
    groups = rank_groups()
    return groups, step.RecordingModel(fwd.tiny_gpt(seed=_forward.SEED, vocab_size=_forward.MODEL_VOCAB))


# the step a user trains with (``--step_func``): its module, whose ``forward_step`` every rank runs
STEP_MODULES = {"gpt": "megatron.bridge.training.gpt_step", "dsv4": familystep.DSV4}


def rank_steps(
    groups: Any, model: step.RecordingModel, batches: list[dict[str, Any]], state: Any = None, through: str = "gpt"
) -> list[RankRun]:
    """MB's ``forward_step`` (``gpt_step``'s, or the family step ``through`` names) on every micro-batch
    on this rank, TE's THD partition by its stand-in (``state``: MB's global state as the step reads
    it; by default an SFT run's)."""
    forward_step = symbol(STEP_MODULES[through], "forward_step")
    out = []
    with thd_partition.installed():
        for batch in batches:
            run = step.run_step(forward_step, state or step.minimal_state(), batch, model, groups)
            out.append(RankRun(received(run), run.logits, run.loss_sum, run.num_tokens))
    return out


def _rank_runs(batches: list[dict[str, Any]], through: str) -> Any:
    def on_rank(_rank: int) -> list[RankRun]:
        return rank_steps(*rank_model(), batches, through=through)

    return on_rank


def physical_boundaries(run: step.StepRun) -> list[int]:
    """The stream's physical boundaries as MB's CP = 1 step handed them to attention."""
    params = run.kwargs.get("packed_seq_params")
    if params is None:
        raise fail(
            Impact.CROSS_DOCUMENT_ATTENTION,
            "MB's CP 1 step handed the model no packed_seq_params for an offline packed micro-batch: its attention "
            "runs across the documents of the pack, and the CP partition has no boundaries to split on",
        )
    bounds = params.cu_seqlens_q_padded if params.cu_seqlens_q_padded is not None else params.cu_seqlens_q
    return [int(x) for x in bounds.reshape(-1).tolist()]


def _slice_violations(
    b: int, rank: int, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], where: torch.Tensor
) -> list[Violation]:
    out: list[Violation] = []
    for name, invariant in (*FIELDS, ("loss_mask", Invariant.LOSS_MASK)):
        mine, ref = got[name].reshape(-1), want[name].reshape(-1)[where]
        if mine.shape != ref.shape:
            out.append(
                Violation(
                    Invariant.CP_PARTITION,
                    b,
                    None,
                    f"{name}: {ref.numel()} positions",
                    f"{mine.numel()}",
                    f"CP rank {rank}",
                    impact=Impact.CRASH,
                )
            )
            continue
        for j in torch.nonzero(mine != ref).reshape(-1).tolist()[:MAX_SHOWN]:
            g = int(where[j])
            impact = None
            if name == "loss_mask":
                impact = Impact.TRAINS_PADDING if float(mine[j]) > float(ref[j]) else Impact.DROPS_TRAINED_TOKEN
            out.append(
                Violation(
                    Invariant.CP_PARTITION,
                    b,
                    g,
                    ref[j].item(),
                    mine[j].item(),
                    f"{name} on CP rank {rank}, local slot {j} (as {invariant.value} at CP 1)",
                    impact=impact,
                )
            )
    return out


def _covers(b: int, bounds: list[int], total: int, cp: int) -> list[Violation]:
    """The ranks' slices, put back, are the stream: each position held by exactly one rank."""
    try:
        held = torch.cat([thd_partition.thd_partitioned_indices(torch.tensor(bounds), total, cp, r) for r in range(cp)])
    except thd_partition.PartitionRefused:
        return []  # reported per rank as an alignment violation
    counts = torch.bincount(held[(held >= 0) & (held < total)], minlength=total)
    wrong = torch.nonzero(counts != 1).reshape(-1).tolist()
    return [
        Violation(
            Invariant.CP_PARTITION,
            b,
            p,
            1,
            int(counts[p]),
            f"ranks holding position {p} (boundaries {bounds})",
            impact=Impact.DROPS_TRAINED_TOKEN,
        )
        for p in wrong[:MAX_SHOWN]
    ]


def compare(
    layout: Layout, cp1: list[step.StepRun], ranks: list[list[RankRun]], tol: _forward.Tolerances
) -> list[Violation]:
    """Every rank's part against the CP = 1 run of the same micro-batch (see the module docstring)."""
    violations: list[Violation] = []
    for b, ref in enumerate(cp1):
        want = received(ref)
        total = int(want["input_ids"].shape[-1])
        bounds = physical_boundaries(ref)
        trained = want["loss_mask"].reshape(-1) > 0
        loss_sum = num_tokens = 0.0
        violations += _covers(b, bounds, total, layout.cp)
        for rank in range(layout.cp):
            got = ranks[rank][b]
            try:
                where = thd_partition.thd_partitioned_indices(torch.tensor(bounds), total, layout.cp, rank)
            except thd_partition.PartitionRefused as exc:
                violations.append(
                    Violation(
                        Invariant.ALIGNMENT, b, None, f"segments aligned to 2*CP = {2 * layout.cp}", bounds, str(exc)
                    )
                )
                break
            violations += _slice_violations(b, rank, got.inputs, want, where)
            loss_sum, num_tokens = loss_sum + got.loss_sum, num_tokens + got.num_tokens
            if got.logits.shape[1] != where.numel():
                continue
            err = (got.logits[0] - ref.logits[0][where]).abs().amax(dim=-1)
            for j in torch.nonzero((err > tol.logits) & trained[where]).reshape(-1).tolist()[:MAX_SHOWN]:
                violations.append(
                    Violation(
                        Invariant.LOGITS,
                        b,
                        int(where[j]),
                        f"|logits - CP 1| <= {tol.logits:g}",
                        f"{float(err[j]):.3g}",
                        f"CP rank {rank}, local slot {j}",
                    )
                )
        else:
            for what, got_v, want_v in (
                ("loss sum", loss_sum, ref.loss_sum),
                ("token count", num_tokens, ref.num_tokens),
            ):
                if abs(got_v - want_v) > tol.totals_atol + tol.totals_rtol * abs(want_v):
                    violations.append(
                        Violation(
                            Invariant.LOSS_TOTALS,
                            b,
                            None,
                            want_v,
                            got_v,
                            f"{what} summed over the {layout.cp} CP ranks vs CP 1",
                        )
                    )
    return violations


@dataclass
class LayoutResult:
    violations: list[Violation]
    golden: dict[str, Any]  # what each rank trains: change detection only


def run_cp(
    case: _sftcases.SFTCase, cp: int, tol: _forward.Tolerances = _forward.FP32, through: str = "gpt"
) -> LayoutResult:
    """``case``'s packed micro-batches at CP = ``cp`` against CP = 1 (no violations when MB holds),
    through ``gpt_step`` or the family step ``through`` names (both runs through the same step)."""
    cpattention.require_partition_reachable()
    one = _forward.OFFLINE_STEPS[through]
    needs(one)
    built = _sftcases.built(case)
    gpt, _ = _forward.models()
    cp1 = [one(gpt, batch) for batch in built.batches]
    layout = Layout(cp=cp)
    ranks = run_world(layout, _rank_runs(list(built.batches), through))
    golden = {
        "micro_batches": [
            {"width": int(ranks[0][b].logits.shape[1]), "trained": [ranks[r][b].num_tokens for r in range(cp)]}
            for b in range(len(cp1))
        ]
    }
    return LayoutResult(compare(layout, cp1, ranks, tol), golden)


def assert_ok(violations: list[Violation], what: str) -> None:
    if violations:
        kinds = sorted({f"{v.invariant.value} [{v.training_impact.value}]" for v in violations})
        lines = [f"{what}: {', '.join(kinds)}"] + ["  " + v.text() for v in violations[:MAX_SHOWN]]
        if len(violations) > MAX_SHOWN:
            lines.append(f"  ... and {len(violations) - MAX_SHOWN} more")
        raise InvariantFailure("\n".join(lines), violations)


# ----------------------------------------------------------------------------- pipeline parallelism

STAGE_NEEDS = {"first": ("tokens", "position_ids"), "last": ("labels", "loss_mask")}
NEED_IMPACT = {
    "tokens": Impact.WRONG_TARGETS,
    "position_ids": Impact.WRONG_LOGITS,
    "labels": Impact.WRONG_TARGETS,
    "loss_mask": Impact.DROPS_TRAINED_TOKEN,
}


def _stage_runs(batches: list[dict[str, Any]], pack_size: int) -> Any:
    def on_rank(_rank: int) -> list[ppbatch.StageBatch]:
        return [ppbatch.stage_batch(batch, pack_size) for batch in batches]

    return on_rank


def stage_reference(run: step.StepRun) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """What MB's PP = 1 step handed the model: its fields by ``get_batch``'s names, and its packed params."""
    want = received(run)
    want["tokens"] = want.pop("input_ids")
    return want, step.params_fields(run.kwargs["packed_seq_params"])


def boundary_violations(b: int, params: dict[str, Any], got: ppbatch.StageBatch, where: str) -> list[Violation]:
    """A stage's boundaries and ``max_seqlen`` against the whole stream's in the reference step's
    ``params`` (every stage attends, over the global offsets)."""
    out: list[Violation] = []
    bounds = {k: None if params.get(k) is None else params[k].reshape(-1).tolist() for k in ppbatch.BOUNDARIES}
    if got.boundaries != bounds:
        shown = got.boundaries if got.has_params else "no packed metadata"
        out.append(
            Violation(Invariant.PP_STAGE_INPUTS, b, None, bounds, shown, f"{where}: the boundaries its attention gets")
        )
    want_max = params.get("max_seqlen_q")
    want_max = None if want_max is None else int(torch.as_tensor(want_max).reshape(-1)[0])
    if got.has_params and got.max_seqlen != want_max:
        out.append(
            Violation(
                Invariant.PP_STAGE_INPUTS,
                b,
                None,
                want_max,
                got.max_seqlen,
                f"max_seqlen on {where}",
                impact=Impact.WRONG_LOGITS,
            )
        )
    return out


def compare_pp(layout: Layout, ref: list[step.StepRun], stages: list[list[ppbatch.StageBatch]]) -> list[Violation]:
    """Every stage's batch against the PP = 1 step's model inputs (see :func:`run_pp`)."""
    out: list[Violation] = []
    for b, run in enumerate(ref):
        want, params = stage_reference(run)
        for s, per_batch in enumerate(stages):
            got = per_batch[b]
            role = "first" if s == 0 else "last" if s == layout.pp - 1 else "middle"
            out += boundary_violations(b, params, got, f"{role} stage {s} of PP {layout.pp}")
            for name in STAGE_NEEDS.get(role, ()):
                mine = got.tensors.get(name)
                if (
                    mine is None
                    or mine.shape != want[name].shape
                    or not torch.equal(mine.to(want[name].dtype), want[name])
                ):
                    shown = "missing" if mine is None else f"{tuple(mine.shape)} differing"
                    out.append(
                        Violation(
                            Invariant.PP_STAGE_INPUTS,
                            b,
                            None,
                            f"{name} {tuple(want[name].shape)} as at PP 1",
                            shown,
                            f"{role} stage {s} of PP {layout.pp}",
                            impact=NEED_IMPACT[name],
                        )
                    )
    return out


def run_pp(case: _sftcases.SFTCase, pp: int) -> LayoutResult:
    """``case``'s packed micro-batches through MB's ``get_batch`` on every stage of PP = ``pp``.

    Documented behaviour (MB's ``get_batch``; MCore's pipeline schedules): the first stage embeds
    the tokens at their position ids, the last computes the loss from labels and loss mask, and
    every stage's attention needs the packed boundaries and ``max_seqlen`` (a middle stage
    without them attends across documents). The reference is MB's PP = 1 step on the same batch.
    """
    needs(ppbatch.stage_batch)  # an era without it is untestable before anything is built
    built = _sftcases.built(case)
    gpt, _ = _forward.models()
    ref = [step.gpt_step(gpt, batch) for batch in built.batches]
    layout = Layout(pp=pp)
    stages = run_world(layout, _stage_runs(list(built.batches), case.seq))
    golden = {"stages": [[sorted(k for k, v in sb.tensors.items() if v is not None) for sb in st[:1]] for st in stages]}
    return LayoutResult(compare_pp(layout, ref, stages), golden)
