"""MB's training data path on one rank of a world: its loader builder and its micro-batch split.

``train_micro_batches(dataset, dataset_config, ..., dp_group)`` runs what MB's training runs on a
rank before the forward step: ``build_train_valid_test_data_loaders`` (``data/loaders.py``) as
MB's setup calls it (``dp_group=pg_collection.dp``; the data-parallel rank and size are what MB
reads from that group, the sampler what the config's ``dataloader_type`` selects, over a provider
that hands back ``dataset`` as the training split), then, step by step, MB's
``prepare_finetuning_batch`` (``data/batch_utils.py``) splitting the loader's per-rank global
batch into the micro-batches the forward step gets, as ``train.py`` does for a "batch" loader
(any other loader yields the micro-batches themselves). Why not the sampler
alone (:mod:`harness.suite.adapters.sampler` takes the rank as an argument): in a world where the
data-parallel group is not the whole world (DP x CP), which group MB reads its rank from is the
behaviour under test.

The container is the minimal one :func:`harness.suite.adapters.config.build_container` builds, with
validation and test off (``eval_iters = 0``) and the loader's workers off (``num_workers = 0``,
the documented setting for a loader without worker processes).

The dataset config is the user's knob: :func:`make_dataset_config` builds the SFT config a user's
finetuning has with the knobs a case sets (``drop_last``: documented since 0.4.0 as "whether to drop the last incomplete
batch"), in the suite process, so the knob recorder sees what MB was called with; the world's
ranks read it from there. ``steps=None`` runs one epoch: the micro-batches of every global batch
the loader yields before it is exhausted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from harness import features
from harness.records.impact import Impact, fail
from harness.suite.adapters import Candidate, NotHere, Operation, accepts, field_names, load_module, symbol
from harness.suite.adapters import config as config_ops
from harness.suite.standins.cuda import cpu_cuda_tensors

if TYPE_CHECKING:
    import torch

    from harness.suite.adapters.mbtypes import Batch

# where the era's prepare_finetuning_batch lives, newest first
SPLIT_MODULES = ("megatron.bridge.data.batch_utils", "megatron.bridge.data.finetuning")


def _probe(split_module: str) -> Callable[[], Callable[..., list[Batch]]]:
    return lambda: _resolve(split_module)


def _resolve(split_module: str) -> Callable[..., list[Batch]]:
    build = symbol("megatron.bridge.data.loaders", "build_train_valid_test_data_loaders")
    if not accepts(build, "dp_group"):
        raise NotHere("build_train_valid_test_data_loaders takes no dp_group")
    split = symbol(split_module, "prepare_finetuning_batch")
    state_cls = symbol("megatron.bridge.training.state", "TrainState")
    cfg = load_module("megatron.bridge.training.config")

    def call(
        dataset: object,
        model: object,
        *,
        seq_length: int,
        seed: int,
        global_batch_size: int,
        micro_batch_size: int,
        data_parallel_size: int,
        steps: int | None,
        dp_group: object,
        dataset_config: object = None,
        runtime_update: Callable[[Any, Any], None] | None = None,
    ) -> list[Batch]:
        # the loader reads the dataset config's dataloader_type, seed, drop_last and worker
        # settings; the dataset itself comes from the provider below
        if dataset_config is None:
            dataset_config = make_dataset_config(seq_length=seq_length, seed=seed)
        container = config_ops.build_container(
            cfg, model, dataset_config, global_batch_size=global_batch_size, micro_batch_size=micro_batch_size
        )
        if steps is not None:  # one epoch: the container's default covers it
            container.train.train_iters = steps
        if getattr(container, "validation", None) is not None:
            container.validation.eval_iters = 0
        if runtime_update is not None:  # what the path's entry point updates before building loaders
            runtime_update(cfg, container)

        def given(_num_samples: object, _config: object) -> tuple[Any, None, None]:
            return dataset, None, None

        with cpu_cuda_tensors(pin=True):  # the model and batches of these worlds live on the CPU
            train, _valid, _test = build(container, state_cls(), given, dp_group=dp_group)
        if train is None:
            return []
        loader = iter(train)
        per_step = global_batch_size // (micro_batch_size * data_parallel_size)
        out: list[Batch] = []
        step = 0
        # as train.py consumes it: a "batch" loader yields a rank's whole global batch, which MB
        # splits into micro-batches; any other yields the micro-batches themselves
        batched = getattr(container.dataset, "dataloader_type", None) == "batch"
        while steps is None or step < steps:
            try:
                if batched:
                    micro, _seq = split(loader, num_microbatches=per_step, default_seq_length=0)
                    out += list(micro)
                else:
                    out += [next(loader) for _ in range(per_step)]
            except StopIteration:
                if steps is None:
                    break  # one epoch: the loader is exhausted
                raise fail(  # MB's training loop meets the same StopIteration and stops
                    Impact.CRASH,
                    f"MB's loader ran out in step {step + 1} of {steps}, after {len(out)} micro-batches "
                    f"of a training sized for {steps} x global batch {global_batch_size}",
                ) from None
            step += 1
        return out

    return call


def split_global_batch(batch: Mapping[str, torch.Tensor], num_microbatches: int) -> list[Batch]:
    """A rank's collated global batch split into its micro-batches by MB's own split, as ``train.py``
    does for a "batch" loader (rows collated together share the batch's width)."""
    for module in SPLIT_MODULES:
        try:
            split = symbol(module, "prepare_finetuning_batch")
        except NotHere:
            continue
        micro, _seq = split(iter([batch]), num_microbatches=num_microbatches, default_seq_length=0)
        return list(micro)
    raise NotHere(f"no prepare_finetuning_batch in {', '.join(SPLIT_MODULES)}")


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


WORKERS_OFF = {"num_workers": 0, "persistent_workers": False, "pin_memory": False}


def make_dataset_config(*, seq_length: int, seed: int, **knobs: object) -> object:
    """The SFT dataset config a user's finetuning passes (``GPTSFTDatasetConfig``, or the era's
    ``FinetuningDatasetConfig``), built with ``knobs`` (e.g. ``drop_last``) and the loader's workers
    off, finalised as MB's validation finalises it. A knob the era's config lacks is an era gap."""
    config_cls = _sft_config_cls()
    fields = field_names(config_cls)
    features.require_fields(config_cls, knobs, fields)
    workers = {k: v for k, v in WORKERS_OFF.items() if k in fields}
    return finalized(config_cls(seq_length=seq_length, dataset_root="unused", seed=seed, **workers, **knobs))


def finalized(dataset_config: object) -> object:
    """``dataset_config`` as MB's ``ConfigContainer.validate`` leaves it before setup builds the
    loaders: finalised (its ``finalize()``, where the era's config has one)."""
    finalize = getattr(dataset_config, "finalize", None)
    if callable(finalize):
        finalize()
    return dataset_config


train_micro_batches = Operation(
    "train_micro_batches",
    [
        Candidate("data/loaders + data/batch_utils.prepare_finetuning_batch", _probe(SPLIT_MODULES[0])),
        Candidate("data/loaders + data/finetuning", _probe(SPLIT_MODULES[1])),
    ],
)
"""The micro-batches one rank's training steps get, ``steps`` steps of MB's loader and split."""
