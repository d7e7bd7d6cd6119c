"""Pretraining's inter-document masking under context parallelism: megatron-core's document
boundaries through MB's CP partition, on the ranks of a gloo world.

With ``inter_document_masking`` megatron-core's ``GPTDataset`` gives every sample the boundaries of
its documents (``cu_seqlens``), and MB's ``gpt_step`` partitions a packed micro-batch for CP with
TE's THD partition (``_partition_packed_batch_for_cp`` -> ``thd_get_partitioned_indices``, on CPU
the named stand-in :mod:`harness.suite.standins.thd_partition`). TE's kernel states its assumption:
every sequence of the stream divisible by ``2*CP`` (``thd_partition_indices_kernel`` asserts it;
rank r holds chunks r and ``2*CP-1-r`` of each). megatron-core documents the dataset config's
``context_parallel_size`` as "needed for padding in packed sequences".

The contract for a user's pretraining with CP > 1, inter-document masking on and the CP size
declared on the dataset config: MB's ``ConfigContainer.validate`` refuses the combination with a
message naming ``inter_document_masking``, or every CP rank gets exactly TE's slice of each
sample, with the CP = 1 logits per trained token and the CP = 1 loss totals over the group
(:func:`suites._layouts.compare`). A partition TE's contract cannot make is an ``alignment``
violation (impact: crash, the kernel's assert; unchecked, tokens lost between ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import default_collate

from harness.records.oracle import Invariant, Violation
from harness.suite.adapters import cpattention, load_module, step, symbol
from harness.suite.adapters.cp import validate_layout
from harness.suite.adapters.forward import init_cpu_parallel
from harness.suite.adapters.rules import ConfigOutcome
from harness.suite.adapters.world import Layout, run_world
from harness.suite.standins import thd_partition
from suites import _forward, _layouts


def validate(dataset_config: Any, seq: int, cp: int) -> ConfigOutcome:
    """MB's validation of a pretraining container over ``dataset_config`` at ``cp`` (the layout
    validation every CP case uses: :func:`harness.suite.adapters.cp.validate_layout`); its outcome."""
    cfg = load_module("megatron.bridge.training.config")
    return validate_layout(cfg, dataset_config, cp, 1, False, seq, False, None)


def _state(dataset_config: Any) -> Any:
    state = step.minimal_state()
    state.cfg.dataset = dataset_config  # the step reads the pretraining config's flags
    return state


@dataclass
class _Refused:
    """A rank whose partition TE's contract refused (picklable)."""

    message: str


def _on_rank(batches: list[dict[str, Any]], dataset_config: Any) -> Any:
    def on_rank(_rank: int) -> list[_layouts.RankRun | _Refused]:
        groups, model = _layouts.rank_model()
        out: list[_layouts.RankRun | _Refused] = []
        for batch in batches:
            try:
                out += _layouts.rank_steps(groups, model, [batch], _state(dataset_config))
            except thd_partition.PartitionRefused as exc:
                out.append(_Refused(str(exc)))
        return out

    return on_rank


def run(build: Any, samples: list[int], cp: int) -> _layouts.LayoutResult:
    """Training samples ``samples`` of ``build`` (one per micro-batch, as packed boundaries need)
    at CP = ``cp`` against MB's CP = 1 step of the same micro-batch."""
    cpattention.require_partition_reachable()
    batches = [default_collate([build.train[i]]) for i in samples]
    layout = Layout(cp=cp)
    ranks = run_world(layout, _on_rank(batches, build.config))
    refused = []
    for b, batch in enumerate(batches):
        said = {rank: got.message for rank, r in enumerate(ranks) if isinstance(got := r[b], _Refused)}
        if said:
            bounds = [int(x) for x in torch.unique_consecutive(batch["cu_seqlens"].reshape(-1)).tolist()]
            first = next(iter(said.values()))
            refused.append(
                Violation(
                    Invariant.ALIGNMENT,
                    b,
                    None,
                    f"documents aligned to 2*CP = {2 * cp}",
                    bounds,
                    f"TE's partition refuses it on CP ranks {sorted(said)} ({first[first.find('hold') :]})",
                )
            )
    if refused:
        return _layouts.LayoutResult(refused, {})
    init_cpu_parallel()
    gpt, _ = _forward.models()
    forward_step = symbol("megatron.bridge.training.gpt_step", "forward_step")
    cp1 = [step.run_step(forward_step, _state(build.config), batch, gpt) for batch in batches]
    runs = [[got for got in r if isinstance(got, _layouts.RankRun)] for r in ranks]
    golden = {"trained": [[runs[r][b].num_tokens for r in range(cp)] for b in range(len(batches))]}
    return _layouts.LayoutResult(_layouts.compare(layout, cp1, runs, _forward.FP32), golden)
