"""MB's MegatronMIMO training data path: its loader builder over a user's MIMO dataset provider.

Operation ``mimo_train_micro_batches(provider, *, seq_length, micro_batch_size,
global_batch_size, steps, modules, context_parallel)``: what MB's setup does before the first forward
step of a MIMO training, on one rank. The model config is MB's ``MegatronMIMOProvider`` with a
data-parallel size per module (``modules``, default the language module alone with DP 1: a world of
one; several tile the world side by side, as MB's heterogeneous deployment requires) and a
context-parallel size where ``context_parallel`` names one (a module then spans DP x CP ranks),
``finalize()`` checks the
tiling and ``build_infra()`` builds and caches the per-module ``HyperCommGrid``s (as
``build_model`` does before the loaders), then MB's loader
builder (``build_train_valid_test_data_loaders``, which sends a MIMO model to
``build_megatron_mimo_data_loaders``: the grids' sampling info, the provider's
``build_datasets`` over the sample counts MB derives from ``train_iters x global batch``, MB's
sampler with the provider's ``dataloader_type`` and ``drop_last``). The micro-batches of
``steps`` steps come back as the training loop takes them, with the grids
(:class:`MimoLoad`); :mod:`harness.suite.adapters.mimostep` hands them to MB's MIMO forward step.

The named stand-in: MB builds every grid with ``backend="nccl"``; in the harness's gloo world the
grids are made with gloo (:mod:`harness.suite.standins.grids`, recorded with the run's stand-ins).

Era: ``data/megatron_mimo`` with ``MegatronMIMOProvider.build_infra`` and the loader builder's
MIMO dispatch (994b7f2e4, 2026-04-23, the MegatronMIMO rename). The MIMO loaders before it
(``data/mimo.loaders.build_mimo_data_loaders``, 877779a05 to 994b7f2e4: a ``DistributedSampler``
over the provider) are not adapted: untestable with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.suite.adapters import Candidate, NotHere, Operation, symbol
from harness.suite.adapters.forward import init_cpu_parallel
from harness.suite.adapters.loaders import train_micro_batches
from harness.suite.standins.grids import gloo_grids

PROVIDER = "megatron.bridge.models.megatron_mimo.megatron_mimo_provider"
CONFIG = "megatron.bridge.models.megatron_mimo.megatron_mimo_config"


def _probe() -> Callable[..., MimoLoad]:
    provider_cls = symbol(PROVIDER, "MegatronMIMOProvider")
    if not hasattr(provider_cls, "build_infra"):
        raise NotHere("MegatronMIMOProvider has no build_infra")
    symbol("megatron.bridge.data.megatron_mimo.loaders", "build_megatron_mimo_data_loaders")
    parallelism_cls = symbol(CONFIG, "MegatronMIMOParallelismConfig")
    module_cls = symbol(CONFIG, "ModuleParallelismConfig")
    language = symbol("megatron.core.models.mimo.config.role", "MIMO_LANGUAGE_MODULE_KEY")

    def call(
        provider: object,
        *,
        seq_length: int,
        micro_batch_size: int,
        global_batch_size: int,
        steps: int,
        modules: dict[str, int] | None = None,
        context_parallel: dict[str, int] | None = None,
    ) -> MimoLoad:
        init_cpu_parallel()
        cp = context_parallel or {}
        model = provider_cls(
            megatron_mimo_parallelism_config=parallelism_cls(
                module_parallelisms={
                    # context_parallel_size only where asked: every era's config takes the others
                    name: module_cls(data_parallel_size=dp, rank_offset=offset, **_cp_field(cp.get(name, 1)))
                    for name, dp, offset in _tiled(modules or {language: 1}, cp)
                }
            )
        )
        model.finalize()  # MB's check that the modules tile the world, as build_model runs it
        with gloo_grids():
            infra = model.build_infra()  # caches the grids the loader builder reads, as build_model does
        groups = symbol("megatron.core.process_groups_config", "ProcessGroupCollection").use_mpu_process_groups()
        batches = train_micro_batches(
            None,  # the MIMO path builds the datasets from the provider itself
            model,
            seq_length=seq_length,
            seed=0,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
            data_parallel_size=1,  # MB's MIMO runtime update: every loading rank takes the global micro-batches
            steps=steps,
            dp_group=groups.dp,
            dataset_config=provider,
            runtime_update=_entry_point_update,
        )
        return MimoLoad(batches, infra.module_to_grid_map)

    return call


def _entry_point_update(cfg: object, container: object) -> None:
    """What MB's MIMO entry point (``pretrain_megatron_mimo``) runs on the config before setup
    builds the loaders: ``megatron_mimo_runtime_config_update`` where the era has it (it fills the
    validation batch sizes the MIMO loader builder divides by). Before it, the loader builder read
    no such field and the entry point had no update to mirror."""
    update = getattr(cfg, "megatron_mimo_runtime_config_update", None)
    if update is not None:
        update(container)


def _tiled(modules: dict[str, int], cp: dict[str, int]) -> list[tuple[str, int, int]]:
    """Each module with its data-parallel size and the rank it starts at: the modules side by side
    in the order given (TP, PP 1; a module's CP from ``cp``, default 1), as a heterogeneous MIMO
    deployment tiles the world."""
    out, offset = [], 0
    for name, dp in modules.items():
        out.append((name, dp, offset))
        offset += dp * cp.get(name, 1)
    return out


def _cp_field(cp: int) -> dict[str, int]:
    return {"context_parallel_size": cp} if cp > 1 else {}


def world_size(modules: dict[str, int], context_parallel: dict[str, int] | None = None) -> int:
    """The ranks a MIMO world of ``modules`` (data-parallel sizes) and ``context_parallel`` spans."""
    cp = context_parallel or {}
    return sum(dp * cp.get(name, 1) for name, dp in modules.items())


@dataclass
class MimoLoad:
    """One rank's MIMO training data: the loader's micro-batches and the model's per-module grids."""

    micro_batches: list[dict[str, Any]]
    grids: dict[str, Any]  # module name -> megatron-core HyperCommGrid (as build_infra made them)


mimo_train_micro_batches = Operation(
    "mimo_train_micro_batches",
    [Candidate("data/megatron_mimo.loaders + MegatronMIMOProvider.build_infra", _probe)],
    before="the MIMO loader before the MegatronMIMO rename (data/mimo.loaders, 877779a05) is not adapted",
)
