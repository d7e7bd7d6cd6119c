"""Wan's packed video path: MB's Energon Wan data module to the step's loss (ledger feature ``wan-step``).

Why: Wan (text-to-video diffusion) always trains on packed sequences. MB's ``WanTaskEncoder`` patchifies
each video's latents into a sequence, pads each caption's text embeddings to 512, and its packing
(``select_samples_to_pack``: MB's first-fit-decreasing; ``pack_selected_samples``: concatenation)
makes one THD sequence per micro-batch with per-sample lengths (``seq_len_q``, ``seq_len_kv`` and their
padded forms). The step's ``wan_data_step`` turns those into the ``PackedSeqParams`` of self-attention
(video to video) and cross-attention (video to text); the flow-matching pipeline noises the latents and
the loss is masked by the packed loss mask. A boundary off by one sample there lets a video attend to
another video or to another caption's text, and a padding position that trains is noise in the loss,
while the batch looks right.

Operation ``wan_batches(req)`` -> ``list[dict]``: micro-batches of MB's Wan data module (the dataset
config a recipe sets, ``path`` at an Energon dataset of the shards MB's README describes: ``pth``
latents, ``pickle`` text embeddings, ``json`` side info, declared as a crude dataset). Operation
``wan_step(batch)`` -> :class:`WanStepRun`: one micro-batch through MB's ``WanForwardStep`` and its
loss function. The doubles, each named:

* Energon's virtual epoch: MB's data module asks for 1,000,000,000 samples per epoch, which Energon
  materialises as a list per worker (tens of GB without workers); here it is capped at
  :data:`VIRTUAL_EPOCH` (where an epoch ends, never what a sample or a pack holds);
* ``tensor.to("cuda")`` and torch's factories asked for ``device="cuda"`` stay on the CPU
  (:mod:`harness.suite.standins.cuda`): the step moves the batch and makes its boundaries' zero and the
  timesteps on the device;
* under CP, the flow-matching pipeline splits the target and the loss mask with MCore's THD
  partition, a Transformer Engine kernel: :mod:`harness.suite.standins.thd_partition` takes its place;
* the model is :class:`WanRecordingModel`: Wan's DiT runs Transformer Engine attention (a GPU); the
  double records what the step hands it and predicts zeros, so the loss is the flow-matching target's
  alone and what is judged is the packing contract (which latents, texts, boundaries and loss mask
  reach the model and the loss), not the DiT.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import pickle
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.errors import Untestable
from harness.suite import standins
from harness.suite.adapters import Candidate, NotHere, Operation, load_module, source_text, symbol
from harness.suite.adapters.energon import add_member
from harness.suite.adapters.step import closed_over_mask, minimal_state, plain, snapshot
from harness.suite.standins import thd_partition
from harness.suite.standins.cuda import cpu_cuda_factories, cpu_to_cuda, pinned_to_cpu

DATA = "megatron.bridge.diffusion.data.wan.wan_energon_datamodule"
DATAMODULE = "megatron.bridge.diffusion.data.common.diffusion_energon_datamodule"
STEP = "megatron.bridge.diffusion.models.wan.wan_step"
VIRTUAL_EPOCH = 1000  # samples per Energon virtual epoch (MB asks for 1e9; see the module docstring)
STANDIN_EPOCH = f"Energon's virtual epoch capped at {VIRTUAL_EPOCH} samples (MB asks 1e9: a list per worker)"
STANDIN_MODEL = "Wan's DiT recorded (its Transformer Engine attention needs a GPU)"
DATASET_YAML = "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors: {}\n"


@dataclass(frozen=True)
class WanSample:
    """One video's latents, ``(channels, frames, height, width)``, and its caption's ``text`` embeddings."""

    key: str
    latent: tuple[int, int, int, int]
    text: int  # caption tokens (embedding rows)
    seed: int

    def tensors(self, text_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed)
        return torch.randn(*self.latent, generator=g), torch.randn(self.text, text_dim, generator=g)


@dataclass(frozen=True)
class WanRequest:
    samples: tuple[WanSample, ...]
    seq_length: int  # the packed sequence's capacity (the data module's seq_length)
    packing_buffer_size: int  # samples MB's packing chooses from at once (1: a sample per pack)
    batches: int  # micro-batches to read (with ``every_sample``: at most)
    text_dim: int = 8
    every_sample: bool = False  # stop as soon as every sample has been read once (Energon shuffles)
    # the rank's process groups handed to the data module as MB's setup hands them (pg_collection):
    # in a CP world the CP ranks then read the same samples
    data_parallel: bool = False


@dataclass
class WanStepRun:
    """What MB's Wan step handed the model, and what its loss function made of the step's output."""

    kwargs: dict[str, Any]  # the model call's keyword arguments (x, grid_sizes, t, context, packed_seq_params)
    loss_mask: torch.Tensor | None  # the mask MB's loss function closes over
    output: torch.Tensor  # the step's per-position loss (what the loss function reduces)
    loss_sum: float
    num_tokens: float
    calls: int = 1


def _shard(path: Path, samples: tuple[WanSample, ...], text_dim: int) -> None:
    with tarfile.open(path, "w") as archive:
        for sample in samples:
            latent, text = sample.tensors(text_dim)
            buf = io.BytesIO()
            torch.save(latent, buf)
            add_member(archive, f"{sample.key}.pth", buf.getvalue())
            add_member(archive, f"{sample.key}.pickle", pickle.dumps(text))
            add_member(archive, f"{sample.key}.json", json.dumps({"key": sample.key}).encode())


@functools.cache
def write_dataset(samples: tuple[WanSample, ...], text_dim: int) -> Path:
    """The samples as a training shard (and a one-sample validation shard, which MB's module also
    opens), indexed and declared as Energon's crude dataset (what ``energon prepare`` makes of them)."""
    root = Path(tempfile.mkdtemp(prefix="harness-wan-"))
    _shard(root / "train-shard-000000.tar", samples, text_dim)
    _shard(root / "val-shard-000000.tar", (WanSample("val-0", (4, 1, 2, 2), 2, 0),), text_dim)
    _prepare(root, {"train": "train-shard-.*", "val": "val-shard-.*"})
    (root / ".nv-meta" / "dataset.yaml").write_text(DATASET_YAML, encoding="utf-8")
    return root


def _prepare(root: Path, splits: dict[str, str]) -> None:
    """MB's ``prepare_webdataset`` where MB has it; before it (MB 0.4-0.5), the Energon preparation
    API MB's helper calls (the same call: the shards, the split patterns, no shuffle seed)."""
    try:
        prepare = symbol("megatron.bridge.data.energon", "prepare_webdataset")
    except NotHere:
        from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

        paths = sorted(p.name for p in root.glob("*.tar"))
        BaseWebdatasetFactory.prepare_dataset(
            root, paths, split_parts_patterns=list(splits.items()), shuffle_seed=None, workers=1
        )
        return
    prepare(root, splits, num_workers=1)


@contextlib.contextmanager
def _short_virtual_epoch() -> Iterator[None]:
    """MB's data module's ``get_train_dataset`` with the virtual epoch capped (a named double)."""
    module = load_module(DATAMODULE)
    original = module.get_train_dataset

    def capped(*args: object, **kwargs: Any) -> object:
        if kwargs.get("virtual_epoch_length"):
            standins.record(STANDIN_EPOCH)
            kwargs["virtual_epoch_length"] = min(int(kwargs["virtual_epoch_length"]), VIRTUAL_EPOCH)
        return original(*args, **kwargs)

    module.__dict__["get_train_dataset"] = capped  # MB's module global, as MB's code looks it up
    try:
        yield
    finally:
        module.__dict__["get_train_dataset"] = original


def _batches_probe() -> Callable[[WanRequest], list[dict[str, object]]]:
    module = load_module(DATA)
    cfg_cls = getattr(module, "WanDatasetConfig", None) or symbol(DATA, "WanDataModuleConfig")
    context_cls = symbol(DATA, "DatasetBuildContext")  # wherever this era defines it, as the module imports it
    load_module(DATAMODULE)
    _require_energon_fields(load_module("megatron.bridge.diffusion.data.wan.wan_taskencoder"))

    def call(req: WanRequest) -> list[dict[str, object]]:
        root = write_dataset(req.samples, req.text_dim)
        config = cfg_cls(
            path=str(root),
            seq_length=req.seq_length,
            packing_buffer_size=req.packing_buffer_size,
            micro_batch_size=1,
            global_batch_size=1,
            num_workers=0,
        )
        groups = {}
        if req.data_parallel:
            collection = symbol("megatron.core.process_groups_config", "ProcessGroupCollection")
            groups = {"pg_collection": collection.use_mpu_process_groups()}
        context = context_cls(train_samples=len(req.samples), valid_samples=0, test_samples=0, **groups)
        with _short_virtual_epoch():
            train, _valid, _test = config.build_datasets(context)
            batches, out = iter(train), list[dict[str, Any]]()
            unread = {sample.key for sample in req.samples}
            while len(out) < req.batches and (unread or not req.every_sample):
                out.append(next(batches))
                unread -= {str(meta.get("key")) for meta in out[-1].get("video_metadata", []) if isinstance(meta, dict)}
            return out

    return call


def _require_energon_fields(encoder_module: object) -> None:
    """Untestable (this environment, not MB) where MB's Wan task encoder builds Energon samples with a
    field the installed Energon no longer has: MB 0.4 passes ``__subflavor__``, which Energon 7 dropped
    for ``__subflavors__``; that MB ran on the older Energon it pinned."""
    import dataclasses

    sample_cls = symbol("megatron.energon.flavors.base_dataset", "Sample")
    known = {f.name for f in dataclasses.fields(sample_cls)}
    source = source_text(encoder_module)
    missing = sorted(name for name in ("__subflavor__",) if f"{name}=" in source and name not in known)
    if missing:
        from importlib.metadata import version

        raise Untestable(
            f"this MB's Wan task encoder builds Energon samples with {', '.join(missing)}, a field the installed "
            f"megatron-energon {version('megatron-energon')} no longer has (this MB ran on the older Energon it pinned)"
        )


wan_batches = Operation(
    "wan_batches",
    [Candidate("diffusion/data/wan/wan_energon_datamodule (WanDatasetConfig or WanDataModuleConfig)", _batches_probe)],
    before="no Wan data module",
    feature="wan-step",
)
"""``wan_batches(req)``: micro-batches of MB's Wan Energon data module (packed by its task encoder)."""


class WanRecordingModel(torch.nn.Module):
    """Wan's DiT as the step sees it: a ``config`` (THD), a call with the packed inputs, recorded; the
    prediction is zeros in the input's shape (the module docstring says why)."""

    def __init__(self) -> None:
        super().__init__()
        self.config = _WanConfig()
        self.calls: list[dict[str, object]] = []
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # a device for the step to read

    def forward(self, **kwargs: torch.Tensor) -> torch.Tensor:
        standins.record(STANDIN_MODEL)
        self.calls.append({k: snapshot(v) for k, v in kwargs.items()})
        return torch.zeros_like(kwargs["x"], dtype=torch.float32)

    @property
    def device(self) -> torch.device:
        return self.anchor.device


@dataclass
class _WanConfig:
    qkv_format: str = "thd"  # packed sequences: what MB's Wan recipe sets for sequence packing
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None


WAN_UTILS = "megatron.bridge.diffusion.models.wan.utils"


@contextlib.contextmanager
def _wan_tex() -> Iterator[None]:
    """MB 0.4-0.5's Wan CP split calls TE's extension it imported itself (``utils.tex``), not
    MCore's: the same partition stand-in takes its place there (only where TE is absent)."""
    if "tex" not in vars(load_module(WAN_UTILS)):
        yield
        return
    with thd_partition.installed(WAN_UTILS):
        yield


def _step_probe() -> Callable[[dict[str, object]], WanStepRun]:
    step_cls = symbol(STEP, "WanForwardStep")

    @torch.no_grad()
    def call(batch: Mapping[str, object]) -> WanStepRun:
        model = WanRecordingModel()
        torch.manual_seed(1234)  # the pipeline's timesteps and noise: one draw per step, like training's
        with (
            pinned_to_cpu(),
            cpu_to_cuda(pin=True),
            cpu_cuda_factories(pin=True),
            thd_partition.installed(),
            _wan_tex(),
        ):
            output, loss_fn = step_cls()(minimal_state(), iter([dict(batch)]), model)
            totals = plain(loss_fn(output))
        return WanStepRun(
            model.calls[0] if model.calls else {},
            plain(closed_over_mask(loss_fn)),
            plain(output.detach().float()),
            float(totals[0]),
            float(totals[1]),
            calls=len(model.calls),
        )

    return call


wan_step = Operation(
    "wan_step", [Candidate("diffusion/models/wan/wan_step.WanForwardStep", _step_probe)], feature="wan-step"
)
"""``wan_step(batch)``: one micro-batch through MB's ``WanForwardStep`` and its loss function."""
