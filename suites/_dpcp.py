"""Data and context parallelism at once: MB's loader and CP partition on the ranks of a DP x CP world.

In a world of one dimension, a rank of the data-parallel group is also a rank of the world, and
so is a rank of the context-parallel group: code that reads its rank from the wrong group (the
world, the data-and-context group) is right by accident there. In a DP x CP world it is not. Each
rank here runs MB's own training data path (:mod:`harness.suite.adapters.loaders`: the loader builder
with the data-parallel group MB's setup hands it, MB's split into micro-batches) and MB's
``gpt_step.forward_step`` with its process groups (the CP partition of every packed micro-batch,
the CP-aware reference attention of :mod:`harness.suite.adapters.cpattention`, TE's partition kernel by
its named stand-in where TE is absent).

The reference, per data-parallel rank: MB's batch sampler for that rank (the rank given as an
argument, the sampler the ``padding_loss_masks`` and ``data_loaders`` suites hold to the
every-row-once contract), each of its global batches collated at once and split by MB's
``prepare_finetuning_batch`` (as the loader hands them: rows share their batch's width), and run
through MB's CP = 1 step. With the
dataset config's ``drop_last=False`` the last global batch is padded (MB's negative indices, rows
that train nothing), and those padding rows go through the CP partition like any other. Checked: every
rank takes as many micro-batches (a rank short of one hangs the step's collectives), and the CP
ranks of each data-parallel rank hold, together, exactly that rank's micro-batches: every slice
the right one, the logits of every trained token the CP = 1 logits, the loss sum and token count
over the CP group the CP = 1 ones (``suites._layouts.compare``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from harness.records.impact import Impact, require
from harness.records.oracle import Violation
from harness.suite.adapters import config as config_ops
from harness.suite.adapters import cpattention, loaders, sampler, step
from harness.suite.adapters.world import Layout, run_world
from suites import _forward, _layouts, _sftcases


@dataclass(frozen=True)
class DPCP:
    dp: int
    cp: int
    global_batch_size: int
    micro_batch_size: int = 1  # offline packed rows train one per micro-batch
    drop_last: bool = True  # the dataset config's (MB's default); False: the last global batch padded

    @property
    def layout(self) -> Layout:
        return Layout(cp=self.cp, dp=self.dp)


def _on_rank(case: _sftcases.SFTCase, world: DPCP, dataset: Any, dataset_config: Any, steps: int) -> Any:
    def on_rank(_rank: int) -> tuple[int, int, list[_layouts.RankRun]]:
        groups, model = _layouts.rank_model()
        # the model config MB's loader builder is handed (finetuning with CP counts loss per token)
        provider = config_ops.tiny_gpt_provider(case.seq, world.cp, 1, False, True)
        batches = loaders.train_micro_batches(
            dataset,
            provider,
            seq_length=case.seq,
            seed=case.seed,
            global_batch_size=world.global_batch_size,
            micro_batch_size=world.micro_batch_size,
            data_parallel_size=world.dp,
            steps=steps,
            dp_group=groups.dp,
            dataset_config=dataset_config,
        )
        return groups.dp.rank(), groups.cp.rank(), _layouts.rank_steps(groups, model, batches)

    return on_rank


def run_dp_cp(case: _sftcases.SFTCase, world: DPCP) -> _layouts.LayoutResult:
    """``case``'s packed rows trained on a DP x CP world, against MB's CP = 1 step per data-parallel rank."""
    cpattention.require_partition_reachable()
    built = _sftcases.built(case)
    ds = built.build.train
    gbs = world.global_batch_size
    # drop_last (MB's default): complete global batches only; else the last one too, padded
    steps = len(ds) // gbs if world.drop_last else -(-len(ds) // gbs)
    if steps < 1:
        raise RuntimeError(f"{case.id}: {len(ds)} packed rows make no global batch of {gbs}")
    # the user's dataset config, built here where the knob recorder sees it
    config = loaders.make_dataset_config(seq_length=case.seq, seed=case.seed, drop_last=world.drop_last)
    gpt, _ = _forward.models()
    ranks = run_world(world.layout, _on_rank(case, world, ds, config, steps))
    violations: list[Violation] = []
    golden: dict[str, Any] = {"dp_ranks": []}
    counts = {len(runs) for _, _, runs in ranks}
    require(len(counts) == 1, Impact.CRASH, f"every rank takes as many micro-batches: {[len(r) for *_, r in ranks]}")
    for d in range(world.dp):
        per_step = sampler.padded_global_batches(
            len(ds),
            gbs,
            world.micro_batch_size,
            case.seed,
            d,
            world.dp,
            drop_last=world.drop_last,
            pad=not world.drop_last,
        )
        micro = [
            batch[k : k + world.micro_batch_size]
            for batch in per_step[:steps]
            for k in range(0, len(batch), world.micro_batch_size)
        ]
        # the rank's global batch collated at once (its rows share its width), split as MB splits it
        per_micro = len(per_step[0]) // world.micro_batch_size
        batches = [
            m
            for batch in per_step[:steps]
            for m in loaders.split_global_batch(ds.collate_fn([ds[i] for i in batch]), per_micro)
        ]
        cp1 = [step.gpt_step(gpt, m) for m in batches]
        mine = {c: runs for dd, c, runs in ranks if dd == d}
        require(
            sorted(mine) == list(range(world.cp)),
            Impact.CRASH,
            f"DP rank {d}: CP ranks {sorted(mine)}, expected {list(range(world.cp))}",
        )
        require(
            len(mine[0]) == len(cp1),
            Impact.DROPS_TRAINED_TOKEN if len(mine[0]) < len(cp1) else Impact.WRONG_LOSS_NORMALISATION,
            f"DP rank {d} trains {len(mine[0])} micro-batches, its sampler gives it {len(cp1)} ({micro})",
        )
        found = _layouts.compare(Layout(cp=world.cp), cp1, [mine[c] for c in range(world.cp)], _forward.FP32)
        violations += [dataclasses.replace(v, detail=f"DP rank {d}: {v.detail}") for v in found]
        golden["dp_ranks"].append(
            {"rows": micro, "trained": [[r.num_tokens for r in mine[c]] for c in range(world.cp)]}
        )
    return _layouts.LayoutResult(violations, golden)
