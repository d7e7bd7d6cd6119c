"""MB's own SFT data path, driven the way a user's config drives it: tokenizer, builder, datasets.

Operations (era adapters; see :mod:`harness.suite.adapters`):

* the tokenizer a request carries: :mod:`harness.suite.adapters.mbtokenizer` builds it through MB.
* ``build_sft(request)``: MB's dataset builder over a ``dataset_root`` of JSONL files (the
  config a recipe sets: sequence length, preprocessing, offline packing specs) -> the training
  split MB would train on, plus the *reference*: the unpacked dataset MB's own packing
  preparation constructed for these examples (same tokenisation and truncation, captured by a
  spy that records instances and changes nothing), and the unpacked split a user training
  without packing would get.

Eras: ``data/builders/gpt_sft.GPTSFTDatasetBuilder`` with a ``GPTSFTDatasetConfig`` (explicit
``preprocessing``: prompt-completion or chat configs) vs
``data/builders/finetuning_dataset.FinetuningDatasetBuilder(dataset_root, tokenizer, ...)`` with
``dataset_kwargs`` (``chat``/``use_hf_tokenizer_chat_template``, ``answer_only_loss``...).
A preprocessing layout an era does not have (prompt-completion configs before 2026) makes the
case untestable there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import features
from harness.suite.adapters import Candidate, NotHere, Operation, Untestable, accepts, symbol
from harness.suite.adapters.mbtypes import SFTDataset
from harness.suite.adapters.sftspies import packing_algorithm, record_unpacked, unpacked_base, watch_global_rng

KINDS = ("prompt", "completion", "chat")
"""How examples become tokens: ``prompt`` = the prompt-template path ("{input} {output}",
answer from ``answer_start_idx``), ``completion`` = explicit prompt-completion preprocessing
(emits a ``loss_mask``), ``chat`` = multi-turn chat template with assistant masks."""


@dataclass(frozen=True)
class PackedPaths:
    """Packed files the user names (``PackedSequenceSpecs.packed_*_path``) instead of MB's default
    place under ``dataset_root``: MB reads a file that exists there and packs into one that does not."""

    train: Path
    validation: Path | None = None
    metadata: Path | None = None


@dataclass(frozen=True)
class OfflinePacking:
    """The user's offline packing settings (``PackedSequenceSpecs`` + dataset kwargs)."""

    pack_size: int
    pad_seq_to_mult: int = 1
    pad_cu_seqlens: bool = False
    pad_to_max_length: bool = False
    paths: PackedPaths | None = None
    algorithm: str | None = None  # packing_algorithm handed to MB's preparation (None: MB's default)
    max_single: int | None = None  # max_single_sequence_length: one example's cap below the pack size


@dataclass(frozen=True)
class SFTRequest:
    root: Path
    tokenizer: object
    seq_length: int
    kind: str = "prompt"
    full_loss: bool = False  # answer_only_loss=False / loss_mode="full"
    packing: OfflinePacking | None = None
    seed: int = 1234
    max_train_samples: int | None = None
    truncation_method: str | None = None  # "left" / "right" for an overlong prompt; None: MB's default
    validation: bool = False  # build the validation split too (do_validation)
    # the prompt template's prompt field (legacy prompt path): a user's rows name it, "{<key>} {output}"
    prompt_key: str = "input"
    truncation_field: str | None = None  # the template fields cut first ("input" is MB's builder default)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown SFT kind {self.kind!r}; known: {KINDS}")
        if self.truncation_method is not None and self.kind == "chat":
            raise ValueError("chat preprocessing has no truncation_method")
        if (self.truncation_field is not None or self.prompt_key != "input") and self.kind != "prompt":
            raise ValueError("prompt_key and truncation_field belong to the legacy prompt-template path")


@dataclass
class SFTBuild:
    """What MB built: the training split plus the unpacked references."""

    train: SFTDataset  # the packed dataset when packing is on, else the unpacked one
    prep_reference: SFTDataset | None  # the unpacked dataset MB's packing preparation built (None unpacked)
    unpacked: SFTDataset | None  # the unpacked split a user without packing gets (built on request)
    era: str
    metadata_path: Path | None = None
    notes: list[str] = field(default_factory=list)
    # did MB's packing preparation leave numpy's global RNG state as it found it (None: not seen)
    prep_rng_kept: bool | None = None
    valid: SFTDataset | None = None  # the validation split (SFTRequest.validation)
    packed_files: dict[str, Path] = field(default_factory=dict)  # train / validation / metadata, as MB resolved them


# --------------------------------------------------------------------------- builders


def _legacy_kwargs(req: SFTRequest) -> dict[str, object]:
    kwargs: dict[str, object] = {"answer_only_loss": not req.full_loss}
    if req.kind == "chat":
        kwargs.update(chat=True, use_hf_tokenizer_chat_template=True)
    if req.packing is not None and req.packing.pad_to_max_length:
        kwargs["pad_to_max_length"] = True
    if req.truncation_method is not None:  # GPTSFTDataset's truncation of its truncation_field ("input")
        kwargs["truncation_method"] = req.truncation_method
    if req.prompt_key != "input":  # the user's own template over their rows' fields
        kwargs["prompt_template"] = f"{{{req.prompt_key}}} {{output}}"
    if req.truncation_field is not None:
        kwargs["truncation_field"] = req.truncation_field
    return kwargs


_SPEC_FEATURES = {
    "pad_seq_to_mult": "aligned-offline-packing",
    "pad_cu_seqlens": "pad-cu-seqlens",
    "max_single_sequence_length": "max-single-sequence-length",
}
"""The ledger feature (:mod:`harness.features`) a PackedSequenceSpecs field is."""


def _specs(cls: type, packing: OfflinePacking) -> object:
    names = {f.name for f in dataclasses.fields(cls)}
    paths = packing.paths
    wanted = {
        "packed_sequence_size": packing.pack_size,
        "pad_seq_to_mult": packing.pad_seq_to_mult,
        "pad_cu_seqlens": packing.pad_cu_seqlens,
        "max_single_sequence_length": packing.max_single,
        "packed_train_data_path": str(paths.train) if paths else None,
        "packed_val_data_path": str(paths.validation) if paths and paths.validation else None,
        "packed_metadata_path": str(paths.metadata) if paths and paths.metadata else None,
    }
    missing = [k for k, v in wanted.items() if k not in names and v not in (1, False, None)]
    if missing:
        reason = f"PackedSequenceSpecs has no {', '.join(missing)} in this era"
        keys = [_SPEC_FEATURES[k] for k in missing if k in _SPEC_FEATURES]
        raise features.missing(keys[0], reason) if keys else Untestable(reason)
    return cls(**{k: v for k, v in wanted.items() if k in names and v is not None})


_PACKED_FILES = {"train": "train_path_packed", "validation": "validation_path_packed", "metadata": "pack_metadata"}


def _packed_files(builder: object) -> dict[str, Path]:
    """Where MB's builder put (or found) the packed files: its own resolution of the user's paths."""
    out = {}
    for key, attr in _PACKED_FILES.items():
        try:
            out[key] = Path(str(getattr(builder, attr)))
        except (AttributeError, ValueError):
            continue
    return out


Made = tuple[list[Any], list[Any], Any, "bool | None"]
"""One builder run: its splits, the unpacked datasets the spy saw, the builder, the RNG watch."""


def _run(builder: Any, base: object, req: SFTRequest) -> Made:
    algorithm = req.packing.algorithm if req.packing is not None else None
    with record_unpacked(base) as seen, watch_global_rng(builder) as rng, packing_algorithm(algorithm) as handed:
        splits = list(builder.build())
    if algorithm is not None and not handed.calls:
        raise AssertionError(f"MB's builder packed without calling a preparation the harness hands {algorithm!r} to")
    return splits, seen, builder, rng.kept


def _finish(req: SFTRequest, era: str, made: Made) -> SFTBuild:
    """The split(s) of one build: unpacked (the reference is the split itself) or packed."""
    splits, seen, builder, kept = made
    train, valid = splits[0], (splits[1] if req.validation else None)
    if req.packing is None:
        return SFTBuild(train, None, train, era, valid=valid)
    try:  # a property that refuses when nothing is packed (packed_sequence_size <= 0, before 2026)
        meta = getattr(builder, "pack_metadata", None)
    except ValueError:
        meta = None
    return SFTBuild(
        train,
        seen[0] if seen else None,
        None,
        era,
        Path(meta) if meta else None,
        prep_rng_kept=kept,
        valid=valid,
        packed_files=_packed_files(builder),
    )


def _gpt_sft_builder() -> Callable[[SFTRequest], SFTBuild]:
    builder_cls = symbol("megatron.bridge.data.builders.gpt_sft", "GPTSFTDatasetBuilder")
    config_cls = symbol("megatron.bridge.data.builders.gpt_sft", "GPTSFTDatasetConfig")
    specs_cls = symbol("megatron.bridge.data.packing", "PackedSequenceSpecs")
    sft = "megatron.bridge.data.sft_processing"
    base = unpacked_base()

    def preprocessing(req: SFTRequest) -> tuple[Any, dict[str, Any]]:
        if req.kind == "prompt":  # the legacy prompt-template path a config without preprocessing takes
            return None, _legacy_kwargs(req)
        extra = {"pad_to_max_length": True} if req.packing is not None and req.packing.pad_to_max_length else {}
        if req.kind == "completion":
            cls = symbol(sft, "PromptCompletionSFTPreprocessingConfig")
            truncation = {"truncation_method": req.truncation_method} if req.truncation_method else {}
            return cls(
                prompt_column="input",
                completion_column="output",
                separator=" ",
                loss_mode="full" if req.full_loss else "completion",
                **truncation,
            ), extra
        cls = symbol(sft, "ChatSFTPreprocessingConfig")
        return cls(loss_mode="full" if req.full_loss else "assistant"), extra

    def build(req: SFTRequest) -> SFTBuild:
        prep, kwargs = preprocessing(req)
        packing = req.packing
        config = config_cls(
            seq_length=req.seq_length,
            dataset_root=str(req.root),
            seed=req.seed,
            do_validation=req.validation,
            do_test=False,
            preprocessing=prep,
            dataset_kwargs=dict(kwargs) or None,
            max_train_samples=req.max_train_samples,
            enable_offline_packing=packing is not None,
            offline_packing_specs=_specs(specs_cls, packing) if packing else None,
        )
        return _finish(
            req, "data/builders/gpt_sft.GPTSFTDatasetBuilder", _run(builder_cls(config, req.tokenizer), base, req)
        )

    return build


def _finetuning_builder(
    module: str = "megatron.bridge.data.builders.finetuning_dataset",
) -> Callable[[SFTRequest], SFTBuild]:
    """The constructor-style builder: the SFT builder itself until it moved to ``data/builders/gpt_sft``
    (2026), a deprecated ``GPTSFTDatasetBuilder`` adapter of the same signature there since."""
    builder_cls = symbol(module, "FinetuningDatasetBuilder")
    # the packing specs argument: packed_sequence_specs, then (June 2026, before the SFT builder
    # moved to data/builders/gpt_sft) enable_offline_packing + offline_packing_specs
    renamed = accepts(builder_cls.__init__, "enable_offline_packing", "offline_packing_specs")
    if not accepts(builder_cls.__init__, "dataset_root", "dataset_kwargs") or not (
        renamed or accepts(builder_cls.__init__, "packed_sequence_specs")
    ):
        raise NotHere("FinetuningDatasetBuilder takes no dataset_root/packed_sequence_specs/dataset_kwargs")
    specs_cls = None
    for specs_module in ("megatron.bridge.data.packing", "megatron.bridge.data.datasets.packed_sequence"):
        try:
            specs_cls = symbol(specs_module, "PackedSequenceSpecs")
            break
        except NotHere:
            continue
    if specs_cls is None:
        raise NotHere("no PackedSequenceSpecs")
    base = unpacked_base()
    era = module.removeprefix("megatron.bridge.").replace(".", "/") + ".FinetuningDatasetBuilder"

    chat_cls = symbol(base.__module__, "GPTSFTChatDataset")
    hf_chat = accepts(chat_cls.__init__, "use_hf_tokenizer_chat_template")

    def build(req: SFTRequest) -> SFTBuild:
        if req.kind == "completion":
            raise features.missing(
                "prompt-completion-config",
                "prompt-completion preprocessing configs do not exist in this era "
                "(FinetuningDatasetBuilder takes dataset_kwargs only)",
            )
        if req.kind == "chat" and not hf_chat:
            raise features.missing(
                "hf-chat-template",
                "chat datasets over HF chat templates ('messages') do not exist in this era "
                "(GPTSFTChatDataset has no use_hf_tokenizer_chat_template)",
            )

        packing = req.packing
        kwargs: dict[str, object] = {
            "dataset_root": req.root,
            "tokenizer": req.tokenizer,
            "seq_length": req.seq_length,
            "seed": req.seed,
            "max_train_samples": req.max_train_samples,
            "packed_sequence_specs": _specs(specs_cls, packing) if packing else None,
            "offline_packing_specs": _specs(specs_cls, packing) if packing else None,
            "enable_offline_packing": packing is not None,
            "dataset_kwargs": _legacy_kwargs(req),
            "do_validation": req.validation,
            "do_test": False,
        }
        builder = builder_cls(**{k: v for k, v in kwargs.items() if accepts(builder_cls.__init__, k)})
        return _finish(req, era, _run(builder, base, req))

    return build


build_sft = Operation(
    "build_sft",
    [
        Candidate("data/builders/gpt_sft.GPTSFTDatasetBuilder", _gpt_sft_builder),
        Candidate("data/builders/finetuning_dataset.FinetuningDatasetBuilder", _finetuning_builder),
    ],
)

build_sft_constructor = Operation(
    "build_sft_constructor",
    [
        Candidate(
            "data/builders/gpt_sft.FinetuningDatasetBuilder",
            lambda: _finetuning_builder("megatron.bridge.data.builders.gpt_sft"),
        ),
        Candidate("data/builders/finetuning_dataset.FinetuningDatasetBuilder", _finetuning_builder),
    ],
)
"""``FinetuningDatasetBuilder(dataset_root, tokenizer, seq_length, ..., enable_offline_packing,
offline_packing_specs, dataset_kwargs)``: the keyword-argument builder a user's older config calls
(deprecated, still shipped): it must build what ``GPTSFTDatasetBuilder`` builds for the same settings."""
