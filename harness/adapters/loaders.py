"""MB's training data path on one rank of a world: its loader builder and its micro-batch split.

``train_micro_batches(dataset, dataset_config, ..., dp_group)`` runs what MB's training runs on a
rank before the forward step: ``build_train_valid_test_data_loaders`` (``data/loaders.py``) as
MB's setup calls it (``dp_group=pg_collection.dp``; the data-parallel rank and size are what MB
reads from that group, the sampler what the config's ``dataloader_type`` selects, over a provider
that hands back ``dataset`` as the training split), then, step by step, MB's
``prepare_finetuning_batch`` (``data/batch_utils.py``) splitting the loader's per-rank global
batch into the micro-batches the forward step gets, as ``train.py`` does. Why not the sampler
alone (:mod:`harness.adapters.sampler` takes the rank as an argument): in a world where the
data-parallel group is not the whole world (DP x CP), which group MB reads its rank from is the
behaviour under test.

The container is the minimal one :func:`harness.adapters.config.build_container` builds, with
validation and test off (``eval_iters = 0``) and the loader's workers off (``num_workers = 0``,
the documented setting for a loader without worker processes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.adapters import Candidate, NotHere, Operation, accepts, load_module, symbol
from harness.adapters import config as config_ops
from harness.standins.cuda import cpu_cuda_tensors


def _probe(split_module: str) -> Callable[[], Callable[..., list[dict[str, Any]]]]:
    return lambda: _resolve(split_module)


def _resolve(split_module: str) -> Callable[..., list[dict[str, Any]]]:
    build = symbol("megatron.bridge.data.loaders", "build_train_valid_test_data_loaders")
    if not accepts(build, "dp_group"):
        raise NotHere("build_train_valid_test_data_loaders takes no dp_group")
    split = symbol(split_module, "prepare_finetuning_batch")
    state_cls = symbol("megatron.bridge.training.state", "TrainState")
    cfg = load_module("megatron.bridge.training.config")
    config_cls = _sft_config_cls()

    def call(
        dataset: Any,
        model: Any,
        *,
        seq_length: int,
        seed: int,
        global_batch_size: int,
        micro_batch_size: int,
        data_parallel_size: int,
        steps: int,
        dp_group: Any,
    ) -> list[dict[str, Any]]:
        # the SFT dataset config a user's finetuning has (the loader reads its dataloader_type, seed,
        # drop_last and worker settings; the dataset itself comes from the provider below)
        dataset_config = config_cls(seq_length=seq_length, dataset_root="unused", seed=seed)
        for name, value in (("num_workers", 0), ("persistent_workers", False), ("pin_memory", False)):
            if hasattr(dataset_config, name):
                setattr(dataset_config, name, value)
        container = config_ops.build_container(
            cfg, model, dataset_config, global_batch_size=global_batch_size, micro_batch_size=micro_batch_size
        )
        container.train.train_iters = steps
        if getattr(container, "validation", None) is not None:
            container.validation.eval_iters = 0

        def provider(_num_samples: Any, _config: Any) -> tuple[Any, None, None]:
            return dataset, None, None

        with cpu_cuda_tensors(pin=True):  # the model and batches of these worlds live on the CPU
            train, _valid, _test = build(container, state_cls(), provider, dp_group=dp_group)
        if train is None:
            return []
        loader = iter(train)
        per_step = global_batch_size // (micro_batch_size * data_parallel_size)
        out: list[dict[str, Any]] = []
        for _ in range(steps):
            micro, _seq = split(loader, num_microbatches=per_step, default_seq_length=0)
            out += list(micro)
        return out

    return call


def _sft_config_cls() -> Any:
    for module, name in (
        ("megatron.bridge.data.builders.gpt_sft", "GPTSFTDatasetConfig"),
        ("megatron.bridge.training.config", "FinetuningDatasetConfig"),
    ):
        try:
            return symbol(module, name)
        except NotHere:
            continue
    raise NotHere("no SFT dataset config (GPTSFTDatasetConfig, FinetuningDatasetConfig)")


train_micro_batches = Operation(
    "train_micro_batches",
    [
        Candidate(
            "data/loaders + data/batch_utils.prepare_finetuning_batch", _probe("megatron.bridge.data.batch_utils")
        ),
        Candidate("data/loaders + data/finetuning", _probe("megatron.bridge.data.finetuning")),
    ],
)
"""The micro-batches one rank's training steps get, ``steps`` steps of MB's loader and split."""
