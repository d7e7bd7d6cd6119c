"""Context and pipeline parallelism at once: MB's ``get_batch`` on every stage of every CP rank.

With pipeline parallelism each stage gets only what it needs (the first stage tokens and position
ids, the last labels and loss mask, every stage the packed boundaries its attention needs); with
context parallelism of packed data every rank gets its load-balanced chunks of each sequence. Each
is checked alone in ``parallel_layouts``; here both at once, in a gloo world of ``CP * PP``
processes where every rank runs MB's ``gpt_step.get_batch`` with its real process groups (TE's
partition kernel by its named stand-in where TE is absent). A stage whose packed metadata is not
recognised as packed would be split as a plain sequence, not along the sequences' boundaries:
that shows only when a stage of a pipeline is also a rank of a CP group.

The reference is MB's CP = 1, PP = 1 step on the same micro-batch: every stage's boundaries and
``max_seqlen`` are the whole stream's (THD attention with CP takes the global offsets), and every
field a stage needs is, on CP rank ``r``, exactly the slice TE's layout gives rank ``r`` of the
reference field.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.records.oracle import Invariant, Violation
from harness.suite.adapters import cpattention, needs, ppbatch, step
from harness.suite.adapters.world import Layout, run_world
from harness.suite.standins import thd_partition
from suites import _forward, _layouts, _sftcases


def _on_rank(batches: list[dict[str, Any]], pack_size: int) -> Any:
    def on_rank(_rank: int) -> tuple[int, int, list[ppbatch.StageBatch]]:
        groups, _model = _layouts.rank_model()
        with thd_partition.installed():
            out = [ppbatch.stage_batch(batch, pack_size) for batch in batches]
        return groups.pp.rank(), groups.cp.rank(), out

    return on_rank


def _field_violations(
    b: int, where: str, name: str, mine: torch.Tensor | None, want: torch.Tensor, idx: torch.Tensor
) -> list[Violation]:
    ref = want.reshape(-1)[idx]
    if mine is not None and mine.reshape(-1).shape == ref.shape and torch.equal(mine.reshape(-1).to(ref.dtype), ref):
        return []
    shown = "missing" if mine is None else f"{tuple(mine.shape)} differing"
    return [
        Violation(
            Invariant.CP_PARTITION,
            b,
            None,
            f"{name}: its CP slice of {idx.numel()} positions",
            shown,
            where,
            impact=_layouts.NEED_IMPACT[name],
        )
    ]


def compare(
    layout: Layout, ref: list[step.StepRun], ranks: list[tuple[int, int, list[ppbatch.StageBatch]]]
) -> list[Violation]:
    out: list[Violation] = []
    for b, run in enumerate(ref):
        want, params = _layouts.stage_reference(run)
        physical = _layouts.physical_boundaries(run)
        total = int(want["tokens"].reshape(-1).numel())
        for s, c, per_batch in ranks:
            got = per_batch[b]
            role = "first" if s == 0 else "last" if s == layout.pp - 1 else "middle"
            where = f"{role} stage {s} of PP {layout.pp}, CP rank {c} of {layout.cp}"
            out += _layouts.boundary_violations(b, params, got, where)
            idx = thd_partition.thd_partitioned_indices(torch.tensor(physical), total, layout.cp, c)
            for name in _layouts.STAGE_NEEDS.get(role, ()):
                out += _field_violations(b, where, name, got.tensors.get(name), want[name], idx)
    return out


def run_cp_pp(case: _sftcases.SFTCase, cp: int, pp: int) -> _layouts.LayoutResult:
    """``case``'s packed micro-batches through MB's ``get_batch`` on every rank of CP ``cp`` x PP ``pp``."""
    cpattention.require_partition_reachable()
    needs(ppbatch.stage_batch)  # an era without it is untestable before anything is built
    built = _sftcases.built(case)
    gpt, _ = _forward.models()
    ref = [step.gpt_step(gpt, batch) for batch in built.batches]
    layout = Layout(cp=cp, pp=pp)
    ranks = run_world(layout, _on_rank(list(built.batches), case.seq))
    seen = sorted((s, c) for s, c, _ in ranks)
    expected = sorted((s, c) for s in range(pp) for c in range(cp))
    if seen != expected:
        raise AssertionError(f"the world's ranks are stages x CP ranks {expected}, got {seen}")
    golden = {
        "ranks": [
            {"stage": s, "cp": c, "fields": sorted(k for k, v in per[0].tensors.items() if v is not None)}
            for s, c, per in sorted(ranks, key=lambda r: (r[0], r[1]))
        ]
    }
    return _layouts.LayoutResult(compare(layout, ref, ranks), golden)
