"""MB's MegatronMIMO data path: text with one placeholder per encoder embedding, padded to the sequence.

Operation ``mimo_samples(request)``: MB's mock MIMO dataset provider (synthetic images, as its
docstring says: "uses real HuggingFace processors to preprocess them") with a local image processor
(``CLIPImageProcessor`` written offline) and the offline tokenizer directory; the provider's
``build_datasets`` over a ``DatasetBuildContext``; every training sample (its ``input_ids``,
``labels``, ``loss_mask``, ``modality_inputs``). Knobs: ``seq_length`` and
``encoder_seq_lengths`` (placeholders inserted per present modality).

Operation ``mimo_hf_samples(request)``: MB's Hugging Face MIMO provider over a user's local image
folder (PNG files and a ``metadata.jsonl`` with the text column, the ``imagefolder`` loader named
through ``hf_data_files``), the same processor and tokenizer; every sample has its image.

Eras: ``data/megatron_mimo.mock_provider.MockMegatronMIMOProvider`` (994b7f2e4, 2026-04-23), before
it ``data/mimo.mock_provider.MockMimoProvider`` (877779a05, 2026-03-20); earlier: untestable.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import features
from harness.suite.adapters import Candidate, NotHere, Operation, field_names, symbol


@dataclass(frozen=True)
class MimoRequest:
    tokenizer_dir: Path
    seq_length: int
    placeholder_id: int
    encoder_seq_length: int | None  # None: MB's default (no entry for the modality)
    text_prompt: str
    samples: int = 6
    presence: float = 0.5  # probability that a sample holds an image
    knobs: dict[str, object] = field(default_factory=dict)  # further provider fields (drop_last, workers)


@functools.cache
def image_processor_dir() -> Path:
    """A CLIP image processor written locally (32x32 crops: small, as real as the hub's)."""
    from transformers import CLIPImageProcessor

    out = Path(tempfile.mkdtemp(prefix="harness-clip-"))
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(str(out))
    return out


@dataclass
class MimoSamples:
    samples: list[dict[str, Any]]
    mixed: bool  # the era samples the image's presence (modality_presence_prob); else every sample has it
    provider: object = None  # the provider they were built from: what a user's config hands MB's loader


def _encoder_lengths(length: int | None) -> dict[str, object]:
    """The provider's ``encoder_seq_lengths`` keyword: none at all for MB's default (an empty mapping)."""
    return {} if length is None else {"encoder_seq_lengths": {"vision": length}}


def _context_cls() -> Any:
    for module in ("megatron.bridge.data.base", "megatron.bridge.training.config"):
        try:
            return symbol(module, "DatasetBuildContext")
        except NotHere:
            continue
    raise NotHere("no DatasetBuildContext in data/base or training/config")


def _probe(module: str, name: str) -> Callable[[], Callable[[MimoRequest], MimoSamples]]:
    def probe() -> Callable[[MimoRequest], MimoSamples]:
        provider_cls = symbol(module, name)
        if not hasattr(provider_cls, "build_datasets"):
            raise NotHere(f"{name} has no build_datasets")
        context_cls = _context_cls()
        mixed = "modality_presence_prob" in field_names(provider_cls)

        def call(req: MimoRequest) -> MimoSamples:
            provider = provider_cls(
                seq_length=req.seq_length,
                processor_paths={"vision": str(image_processor_dir())},
                tokenizer_path=str(req.tokenizer_dir),
                special_token_ids={"vision": req.placeholder_id},
                **_encoder_lengths(req.encoder_seq_length),
                modality_configs={"vision": {"type": "image", "width": 40, "height": 40}},
                text_prompt=req.text_prompt,
                **({"modality_presence_prob": {"vision": req.presence}} if mixed else {}),
                **req.knobs,
            )
            train, _valid, _test = provider.build_datasets(
                context_cls(train_samples=req.samples, valid_samples=0, test_samples=0)
            )
            return MimoSamples([train[i] for i in range(len(train))], mixed, provider)

        return call

    return probe


mimo_samples = Operation(
    "mimo_samples",
    [
        Candidate(
            "data/megatron_mimo.mock_provider.MockMegatronMIMOProvider",
            _probe("megatron.bridge.data.megatron_mimo.mock_provider", "MockMegatronMIMOProvider"),
        ),
        Candidate(
            "data/mimo.mock_provider.MockMimoProvider",
            _probe("megatron.bridge.data.mimo.mock_provider", "MockMimoProvider"),
        ),
    ],
    before="no MIMO data providers",
    feature="mimo-data",
)


@dataclass(frozen=True)
class MimoHFRequest:
    tokenizer_dir: Path
    seq_length: int
    placeholder_id: int
    encoder_seq_length: int | None  # None: MB's default (no entry for the modality)
    texts: tuple[str, ...]  # one image and one text per sample
    knobs: dict[str, object] = field(default_factory=dict)  # further provider fields (drop_last, workers)


def _image_folder(texts: tuple[str, ...]) -> Path:
    """A user's local image folder: one PNG per text, ``metadata.jsonl`` naming each with its text."""
    import json

    from PIL import Image

    root = Path(tempfile.mkdtemp(prefix="harness-mimo-hf-")) / "train"
    root.mkdir()
    rows = []
    for i, text in enumerate(texts):
        Image.new("RGB", (40, 40), (17 * i % 256, 60, 120)).save(root / f"img{i:04d}.png")
        rows.append({"file_name": f"img{i:04d}.png", "text": text})
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def _hf_probe(module: str, name: str) -> Callable[[], Callable[[MimoHFRequest], MimoSamples]]:
    def probe() -> Callable[[MimoHFRequest], MimoSamples]:
        provider_cls = symbol(module, name)
        if "hf_data_files" not in field_names(provider_cls):  # the provider is here, its knob came later
            reason = f"{name} has no hf_data_files: a local dataset cannot be named"
            raise features.missing("mimo-hf-data-files", reason)
        context_cls = _context_cls()

        def call(req: MimoHFRequest) -> MimoSamples:
            folder = _image_folder(req.texts)
            provider = provider_cls(
                seq_length=req.seq_length,
                hf_dataset_path="imagefolder",
                hf_data_files={"train": str(folder / "**")},
                hf_tokenizer_path=str(req.tokenizer_dir),
                processor_paths={"vision": str(image_processor_dir())},
                special_token_ids={"vision": req.placeholder_id},
                **_encoder_lengths(req.encoder_seq_length),
                modality_columns={"vision": "image"},
                trust_remote_code=False,
                **req.knobs,
            )
            train, _valid, _test = provider.build_datasets(
                context_cls(train_samples=len(req.texts), valid_samples=0, test_samples=0)
            )
            return MimoSamples([train[i] for i in range(len(train))] if train is not None else [], False, provider)

        return call

    return probe


mimo_hf_samples = Operation(
    "mimo_hf_samples",
    [
        Candidate(
            "data/megatron_mimo.hf_provider.HFMegatronMIMODatasetProvider",
            _hf_probe("megatron.bridge.data.megatron_mimo.hf_provider", "HFMegatronMIMODatasetProvider"),
        ),
        Candidate(
            "data/mimo.hf_provider.HFMimoDatasetProvider",
            _hf_probe("megatron.bridge.data.mimo.hf_provider", "HFMimoDatasetProvider"),
        ),
    ],
    before="no MIMO data providers",
    feature="mimo-data",
)
