"""MB's Energon VLM data path, driven as its tutorial drives it: shards, preparation, config, builder.

Operation ``energon_batches(request)``: the user's image/chat samples written as WebDataset tar
shards (``<key>.image.png`` + ``<key>.conversation.json``, the layout of MB's
``tutorials/data/energon``), indexed by MB's own ``data/energon.prepare_webdataset`` and declared
for MB's ``ChatMLWebdataset`` loader in ``.nv-meta/dataset.yaml``; then an
``EnergonDatasetConfig`` with an ``HFEnergonTaskEncoderConfig`` (a local Hugging Face processor
directory, MB resolves the model's collate from its class) or the model-owned
``QwenVLEnergonTaskEncoderConfig`` (MB's ``QwenVLTaskEncoder``, what its Qwen-VL Energon recipes
configure) and the request's knobs, finalised,
and ``EnergonDatasetBuilder.build`` for the training split. The first ``batches`` micro-batches
of the training iterator come back as MB yields them (``input_ids``, ``labels``, ``loss_mask``,
``position_ids``, ``visual_inputs``, and with in-batch packing the MCore THD boundaries).

Energon's loader runs in this process (``num_workers=0``): the batches are what its workers
would hand the training step, without worker processes on a 2-core machine.

What Energon's error handling drops is recorded (``EnergonBuild.skipped``): a stage of its loader
that raises (the task encoder's ``batch``, a sample's encoding) is logged by Energon's default
handler and its samples never reach the step, and the loader goes on with the next. Without the
record such a drop is invisible in the batches: every batch that does arrive is well formed.

Era: ``data/builders/energon.EnergonDatasetConfig`` with declarative task-encoder configs
(8896e9027, 2026-07-14, which also added ``prepare_webdataset``); before it: untestable.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import re
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.suite.adapters import Candidate, NotHere, Operation, load_module, symbol

MODULE = "megatron.bridge.data.builders.energon"
DATASET_YAML = """\
__module__: megatron.bridge.data.energon.task_encoder_utils
__class__: ChatMLWebdataset
field_map:
  imgs: image.png
  conversation: conversation.json
subflavors: {}
"""


@dataclass(frozen=True)
class EnergonSample:
    """One user sample: an image of ``image`` (width, height) pixels and its chat turns."""

    key: str
    image: tuple[int, int]
    turns: tuple[tuple[str, str], ...]  # (user text, assistant text); the image goes with the first

    def conversation(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for t, (question, answer) in enumerate(self.turns):
            content: list[dict[str, str]] = [{"type": "image"}] if t == 0 else []
            out.append({"role": "user", "content": [*content, {"type": "text", "text": question}]})
            out.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
        return out


@dataclass(frozen=True)
class EnergonRequest:
    """What a user configures: samples and shards, the processor directory, the loader's knobs."""

    samples: tuple[EnergonSample, ...]
    processor_dir: Path
    seq_length: int
    micro_batch_size: int
    batches: int  # how many training micro-batches to read
    shards: int = 1
    pixels: tuple[int | None, int | None] = (None, None)  # the task encoder's min_pixels, max_pixels
    knobs: dict[str, object] = field(default_factory=dict)  # further EnergonDatasetConfig fields
    encoder: str = "hf"  # "hf": HFEnergonTaskEncoderConfig; "qwen-vl": QwenVLEnergonTaskEncoderConfig
    # the rank's process groups handed to the builder as MB's setup hands them (pg_collection, from
    # megatron-core's initialised groups): in a world, which samples this rank's loader reads
    data_parallel: bool = False
    prepared: Path | None = None  # a dataset root write_dataset already wrote and indexed (reused as is)


@dataclass(frozen=True)
class Skipped:
    """One loader stage Energon's error handling skipped: its name, the error, the samples it dropped."""

    stage: str  # Energon's name of the stage, e.g. the task encoder's batch method
    error: str  # ``Type: message``
    keys: tuple[str, ...]  # the dropped samples' keys (empty when the failing input carries none)


@dataclass
class EnergonBuild:
    batches: list[dict[str, Any]]
    config: Any  # the dataset config after MB's finalisation (its fields per era)
    skipped: list[Skipped] = field(default_factory=list)  # what Energon's error handling dropped on the way


def _stage(name: str) -> str:
    """Energon's name of a stage without the object address it embeds (``BatchDataset.HFTaskEncoder.batch``)."""
    return re.sub(r"<bound method (\S+) of <.*>>", r"\1", name)


def _keys(sample: object) -> tuple[str, ...]:
    items = sample if isinstance(sample, (list, tuple)) else [sample]
    return tuple(str(k) for k in (getattr(s, "__key__", None) for s in items) if k is not None)


@contextlib.contextmanager
def _recording_skips(out: list[Skipped]) -> Iterator[None]:
    """Every error an Energon ``ErrorContext`` hands its handler (the sample then skipped) into ``out``.

    Energon without ``ErrorContext`` (older releases): nothing recorded, the batches are still checked.
    """
    try:
        errors = importlib.import_module("megatron.energon.errors")
        context_cls = errors.ErrorContext
    except (ImportError, AttributeError):
        yield
        return
    original = context_cls.__init__

    def init(self: object, name: str, handler: Callable[..., object], *args: object, **kwargs: object) -> None:
        def record(exc: Exception, sample: object, sources: object) -> None:
            out.append(Skipped(_stage(str(name)), f"{type(exc).__name__}: {exc}", _keys(sample)))
            if handler is not None:
                handler(exc, sample, sources)

        original(self, name, record, *args, **kwargs)

    context_cls.__init__ = init
    try:
        yield
    finally:
        context_cls.__init__ = original


def _png(width: int, height: int, shade: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (shade % 256, 40, 90)).save(buf, format="PNG")
    return buf.getvalue()


def add_member(archive: tarfile.TarFile, name: str, payload: bytes) -> None:
    """One file of a WebDataset shard (fixed mtime: the same samples write the same bytes)."""
    info = tarfile.TarInfo(name=name)
    info.size, info.mtime = len(payload), 0
    archive.addfile(info, io.BytesIO(payload))


@functools.cache
def write_dataset(samples: tuple[EnergonSample, ...], shards: int) -> Path:
    """The samples as ``shards`` training tar shards, indexed by MB and declared for its loader."""
    prepare = symbol("megatron.bridge.data.energon", "prepare_webdataset")
    root = Path(tempfile.mkdtemp(prefix="harness-energon-"))
    per = -(-len(samples) // shards)
    for s in range(shards):
        with tarfile.open(root / f"train-shard-{s:06d}.tar", "w") as archive:
            for i, sample in enumerate(samples[s * per : (s + 1) * per], start=s * per):
                add_member(archive, f"{sample.key}.image.png", _png(*sample.image, shade=17 * i))
                add_member(archive, f"{sample.key}.conversation.json", json.dumps(sample.conversation()).encode())
    prepare(root, {"train": "train-shard-.*"}, num_workers=1)
    (root / ".nv-meta" / "dataset.yaml").write_text(DATASET_YAML, encoding="utf-8")
    return root


def _probe() -> Callable[[EnergonRequest], EnergonBuild]:
    cfg_cls = symbol(MODULE, "EnergonDatasetConfig")
    encoders = {"hf": symbol(MODULE, "HFEnergonTaskEncoderConfig")}
    with contextlib.suppress(NotHere):  # the model-owned encoder MB's Qwen-VL Energon recipes configure
        encoders["qwen-vl"] = symbol(MODULE, "QwenVLEnergonTaskEncoderConfig")
    builder_cls = symbol(MODULE, "EnergonDatasetBuilder")
    symbol("megatron.bridge.data.energon", "prepare_webdataset")
    context_cls = symbol("megatron.bridge.data.base", "DatasetBuildContext")
    load_module("megatron.bridge.data.energon.hf_task_encoder")  # the encoder MB builds (its knobs are spied)

    def call(req: EnergonRequest) -> EnergonBuild:
        root = req.prepared or write_dataset(req.samples, req.shards)
        if req.encoder not in encoders:
            raise NotHere(f"no {req.encoder} Energon task-encoder config in {MODULE}")
        pixels = {k: v for k, v in zip(("min_pixels", "max_pixels"), req.pixels) if v is not None}
        config = cfg_cls(
            path=str(root),
            seq_length=req.seq_length,
            micro_batch_size=req.micro_batch_size,
            task_encoder=encoders[req.encoder](
                hf_processor_path=str(req.processor_dir), trust_remote_code=False, **pixels
            ),
            num_workers=0,
            do_validation=False,
            **req.knobs,
        )
        config.finalize()
        groups = {}
        if req.data_parallel:
            collection = symbol("megatron.core.process_groups_config", "ProcessGroupCollection")
            groups = {"pg_collection": collection.use_mpu_process_groups()}
        context = context_cls(train_samples=len(req.samples), valid_samples=0, test_samples=0, **groups)
        skipped: list[Skipped] = []
        with _recording_skips(skipped):
            train, _valid, _test = builder_cls(config).build(context)
            try:
                # no iterator is MB's missing output: the suite fails it, it is no era gap
                batches = [next(train) for _ in range(req.batches)] if train is not None else []
            except Exception as exc:  # Energon giving up after many skips names none of their causes
                if skipped:
                    exc.add_note(
                        f"cause: Energon's error handling skipped {len(skipped)} loader step(s) first; the first: "
                        f"{skipped[0].stage} raised {skipped[0].error}"
                    )
                raise
        return EnergonBuild(batches, config, skipped)

    return call


energon_batches = Operation(
    "energon_batches",
    [Candidate("data/builders/energon.EnergonDatasetBuilder", _probe)],
    before="no declarative Energon dataset builder",
    feature="multimodal-builders",
)
