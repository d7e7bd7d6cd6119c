"""MB's MegatronMIMO forward step on one rank of a heterogeneous world: what each module's model gets.

Operation ``mimo_step_inputs(provider, *, modules, seq_length, micro_batch_size,
global_batch_size, steps, pack=False, context_parallel=None)``, run on every rank of a world of
``mimoloader.world_size(modules, context_parallel)`` processes:
MB's MIMO training data path (:mod:`harness.suite.adapters.mimoloader`, the modules tiling the world
side by side) yields this rank's micro-batches, and MB's ``megatron_mimo_step.forward_step`` takes
each as the training loop does: its ``get_batch``, then the slice of the global micro-batch for
this rank's place in its module's data-parallel group (``slice_batch_for_megatron_mimo``, MB's
"contiguous to match the BridgeCommunicator's batch-dimension split / concatenate logic"), and the
inputs a stage does not use dropped (raw modality inputs on a language-only rank; text on a
language stage other than the first, labels and loss mask on one other than the last). With
``pack``, the dataset config asks for MB's step-time in-batch packing (feature
``mimo-step-packing``): the step packs each language shard's real tokens into one THD sequence
and hands the model its ``packing_kwargs``.

Why a recording model: the unit under test is what MB hands each module, not the module's maths.
``forward_step`` reads the model's ``role`` (megatron-core's ``RankRole.build`` over the grids, as
``MimoModel.__init__`` makes it) and its ``mimo_config.module_to_grid_map``; the model here has
exactly those, records the keyword arguments it is called with, and returns what the step expects
back (a per-token loss on the language module's last stage, activations elsewhere). No weights, no
encoder, no communicator run: which rows reach which rank is decided before the model is called.

The rank's place in its module's data-parallel group comes from megatron-core's grid (its ``dp``
process group), not from MB: it is the order the communicator concatenates shards in.

Era: the MegatronMIMO rename (994b7f2e4, 2026-04-23), as :mod:`harness.suite.adapters.mimoloader`.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness import features
from harness.errors import NotHere
from harness.suite.adapters import Candidate, Operation, hostsync, symbol
from harness.suite.adapters.mimoloader import mimo_train_micro_batches
from harness.suite.adapters.step import minimal_state, snapshot
from harness.suite.standins.cuda import cpu_cuda_calls

STEP = "megatron.bridge.training.megatron_mimo_step"


@dataclass
class ModuleRank:
    """What one rank's module model received from MB's MIMO forward step, micro-batch by micro-batch."""

    modules: tuple[str, ...]  # the modules this rank runs (megatron-core's role over the grids)
    dp_rank: int  # the rank's place in its module's data-parallel group (the grid's dp group)
    dp_size: int
    inputs: list[dict[str, Any]]  # the model's keyword arguments per micro-batch (tensors cloned)
    # per micro-batch, what MB's loss function made of the model's per-token loss (loss sum, tokens
    # counted) on the language module's last stage; None on a stage with no loss
    totals: list[tuple[float, int] | None] = dataclasses.field(default_factory=list)
    # host reads of device tensors by MB's step and loss function (harness.suite.adapters.hostsync)
    host_reads: list[str] = dataclasses.field(default_factory=list)
    # the rank's place in its module's context-parallel group (the grid's cp group): the ranks of one
    # data-parallel replica; megatron-core's MIMO model partitions the sequence among them after the step
    cp_rank: int = 0
    cp_size: int = 1


def per_token_loss(shape: Sequence[int]) -> torch.Tensor:
    """The recording model's per-token loss: deterministic, non-zero and different per position, so
    a loss function that sums the wrong positions or counts the wrong tokens shows in its totals."""
    n = 1
    for d in shape:
        n *= int(d)
    return (torch.arange(n, dtype=torch.float32) % 7 + 1).view(*shape)


def _recording_model(mimo_cls: type, role: Any, grids: dict[str, object], language: str) -> Any:
    class RecordingMimo(mimo_cls):
        """A ``MimoModel`` to ``forward_step``'s checks (see the module docstring), recording its inputs."""

        def __init__(self) -> None:
            torch.nn.Module.__init__(self)  # no submodules: nothing of MimoModel's own __init__ is needed
            self.role = role
            self.mimo_config = types.SimpleNamespace(module_to_grid_map=grids)
            self.calls: list[dict[str, object]] = []

        def forward(self, **kwargs: torch.Tensor) -> object:
            self.calls.append({k: snapshot(v) for k, v in kwargs.items()})
            labels = kwargs.get("labels")
            if role.has_language_module and role.is_last_stage(language) and labels is not None:
                return per_token_loss(labels.shape)  # what the step's loss function takes
            return {name: torch.zeros(1) for name in role.modules}

    return RecordingMimo()


def step_packing(pack: bool) -> dict[str, bool]:
    """The dataset flags of ``minimal_state`` that ask MB's MIMO step to pack (``pack``), as a user's dataset
    config does: in-batch packing deferred to the step (``resolve_step_packing`` refuses it otherwise)."""
    if not pack:
        return {}
    try:
        symbol(STEP, "resolve_step_packing")
    except NotHere as exc:
        raise features.missing("mimo-step-packing", "MB's MIMO step has no in-batch sequence packing") from exc
    return {"enable_in_batch_packing": True, "defer_in_batch_packing_to_step": True}


def _probe() -> Callable[..., ModuleRank]:
    forward_step = symbol(STEP, "forward_step")
    symbol("megatron.bridge.data.megatron_mimo.dp_utils", "slice_batch_for_megatron_mimo")
    mimo_cls = symbol("megatron.core.models.mimo", "MimoModel")
    role_cls = symbol("megatron.core.models.mimo.config.role", "RankRole")
    language = symbol("megatron.core.models.mimo.config.role", "MIMO_LANGUAGE_MODULE_KEY")

    def call(
        provider: object,
        *,
        modules: dict[str, int],
        seq_length: int,
        micro_batch_size: int,
        global_batch_size: int,
        steps: int,
        pack: bool = False,
        context_parallel: dict[str, int] | None = None,
    ) -> ModuleRank:
        import torch.distributed as dist

        state = minimal_state(**step_packing(pack))

        load = mimo_train_micro_batches(
            provider,
            seq_length=seq_length,
            micro_batch_size=micro_batch_size,
            global_batch_size=global_batch_size,
            steps=steps,
            modules=modules,
            context_parallel=context_parallel,
        )
        role = role_cls.build([m for m in modules if m != language], load.grids)
        model = _recording_model(mimo_cls, role, load.grids, language)
        totals: list[tuple[float, int] | None] = []
        # get_batch moves the batch with .cuda(): device-resident from there, its host reads counted
        with cpu_cuda_calls(pin=True), hostsync.count_step_reads() as reads:
            for batch in load.micro_batches:
                output, loss_fn = forward_step(state, iter([batch]), model)
                if loss_fn is None:
                    totals.append(None)
                    continue
                loss, tokens, *_ = loss_fn(output)  # as the training loop's schedule calls it
                totals.append((float(loss), int(tokens)))
        rank = dist.get_rank()
        mine = [g for g in load.grids.values() if g.rank_offset <= rank < g.rank_offset + g.size]
        dp, (cp_rank, cp_size) = mine[0].get_pg(["dp"]), _cp_place(mine[0])
        return ModuleRank(tuple(role.modules), dp.rank(), dp.size(), model.calls, totals, list(reads), cp_rank, cp_size)

    return call


def _cp_place(grid: Any) -> tuple[int, int]:
    """The rank's place in its module's cp group; (0, 1) where the grid built none (CP 1)."""
    try:
        cp = grid.get_pg(["cp"])
    except (KeyError, ValueError, RuntimeError):
        return 0, 1
    return cp.rank(), cp.size()


mimo_step_inputs = Operation(
    "mimo_step_inputs",
    [Candidate("training/megatron_mimo_step.forward_step + data/megatron_mimo", _probe)],
    before="the MIMO step before the MegatronMIMO rename (training/mimo_step, 877779a05) is not adapted",
)
