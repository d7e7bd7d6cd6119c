"""MB's MegatronMIMO training data path: its loader builder over a user's MIMO dataset provider.

Operation ``mimo_train_micro_batches(provider, *, seq_length, micro_batch_size,
global_batch_size, steps)``: what MB's setup does before the first forward step of a MIMO
training. The model config is MB's ``MegatronMIMOProvider`` with the language module's
parallelism (a world of one: TP, CP, PP, DP 1), its ``build_infra()`` builds and caches the
per-module ``HyperCommGrid``s (as ``build_model`` does before the loaders), then MB's loader
builder (``build_train_valid_test_data_loaders``, which sends a MIMO model to
``build_megatron_mimo_data_loaders``: the grids' sampling info, the provider's
``build_datasets`` over the sample counts MB derives from ``train_iters x global batch``, MB's
sampler with the provider's ``dataloader_type`` and ``drop_last``). The micro-batches of
``steps`` steps come back as the training loop takes them.

The named stand-in: MB builds every grid with ``backend="nccl"``; in the harness's gloo world the
grids are made with gloo (:mod:`harness.standins.grids`, recorded with the run's stand-ins).

Era: ``data/megatron_mimo`` with ``MegatronMIMOProvider.build_infra`` and the loader builder's
MIMO dispatch (994b7f2e4, 2026-04-23, the MegatronMIMO rename). The MIMO loaders before it
(``data/mimo.loaders.build_mimo_data_loaders``, 877779a05 to 994b7f2e4: a ``DistributedSampler``
over the provider) are not adapted: untestable with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.adapters import Candidate, NotHere, Operation, symbol
from harness.adapters.forward import init_cpu_parallel
from harness.adapters.loaders import train_micro_batches
from harness.standins.grids import gloo_grids

PROVIDER = "megatron.bridge.models.megatron_mimo.megatron_mimo_provider"
CONFIG = "megatron.bridge.models.megatron_mimo.megatron_mimo_config"


def _probe() -> Callable[..., list[dict[str, Any]]]:
    provider_cls = symbol(PROVIDER, "MegatronMIMOProvider")
    if not hasattr(provider_cls, "build_infra"):
        raise NotHere("MegatronMIMOProvider has no build_infra")
    symbol("megatron.bridge.data.megatron_mimo.loaders", "build_megatron_mimo_data_loaders")
    parallelism_cls = symbol(CONFIG, "MegatronMIMOParallelismConfig")
    module_cls = symbol(CONFIG, "ModuleParallelismConfig")
    language = symbol("megatron.core.models.mimo.config.role", "MIMO_LANGUAGE_MODULE_KEY")

    def call(
        provider: Any, *, seq_length: int, micro_batch_size: int, global_batch_size: int, steps: int
    ) -> list[dict[str, Any]]:
        init_cpu_parallel()
        model = provider_cls(
            megatron_mimo_parallelism_config=parallelism_cls(
                module_parallelisms={language: module_cls(data_parallel_size=1)}
            )
        )
        with gloo_grids():
            model.build_infra()  # caches the grids the loader builder reads, as build_model does
        groups = symbol("megatron.core.process_groups_config", "ProcessGroupCollection").use_mpu_process_groups()
        return train_micro_batches(
            None,  # the MIMO path builds the datasets from the provider itself
            model,
            seq_length=seq_length,
            seed=0,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
            data_parallel_size=1,
            steps=steps,
            dp_group=groups.dp,
            dataset_config=provider,
        )

    return call


mimo_train_micro_batches = Operation(
    "mimo_train_micro_batches",
    [Candidate("data/megatron_mimo.loaders + MegatronMIMOProvider.build_infra", _probe)],
    before="the MIMO loader before the MegatronMIMO rename (data/mimo.loaders, 877779a05) is not adapted",
)
