"""MB's Energon VLM data path: image/chat WebDataset shards to the micro-batches the step receives.

Documented contract (``EnergonDatasetConfig``, ``HFTaskEncoder`` and the model collate MB resolves
from the processor, here Qwen2.5-VL's; MB's Energon tutorial for the data layout): each image
becomes its grid of placeholders inside the chat-rendered text; the assistant turns train and
nothing else; unpacked rows are right-padded to ``pad_to_multiple_of`` (capped at
``seq_length``) or, with ``pad_to_max_length``, to exactly ``seq_length``; with
``enable_in_batch_packing`` the micro-batch is one MCore THD row, each sequence padded to
``in_batch_packing_pad_to_multiple_of``; ``defer_in_batch_packing_to_step`` leaves the rows
unpacked for the step; invalid loader settings are refused by the config's ``validate``.

The reference is MB's own unpadded path: the same shards and builder with one sample per
micro-batch and multiple 1. Every row is matched to its sample by the sample's marker token,
so neither Energon's order nor its shuffling decides the verdict.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

from harness.adapters import batch as batch_ops
from harness.adapters import rules
from harness.adapters.energon import EnergonRequest, EnergonSample, energon_batches
from harness.oracle import differential, tokenizer, vlprocessor
from harness.oracle.impact import Impact, fail, require
from harness.oracle.padded import require_documented_width, require_row_equals_example
from harness.oracle.records import Example
from suites._inputs import IGNORE_INDEX

pytestmark = pytest.mark.import_group("full")  # the builder imports MB's HF model helpers

PIXELS = (28 * 28 * 4, 28 * 28 * 8)  # min_pixels, max_pixels: 56 x 56 and 112 x 56 images kept as drawn
IMAGES = ((56, 56), (112, 56))


@functools.cache
def _vocab() -> dict[str, int]:
    from transformers import AutoTokenizer

    return dict(AutoTokenizer.from_pretrained(str(vlprocessor.write_processor_dir())).get_vocab())


def samples(seed: int, n: int, max_answer: int = 12, multi_turn_rate: float = 0.3) -> tuple[EnergonSample, ...]:
    """Seeded samples: images of two sizes, answers of varied length, some with a second turn."""
    rng = np.random.default_rng(seed)

    def words(k: int) -> str:
        return " ".join(tokenizer.WORDS[int(w)] for w in rng.integers(0, 160, size=k))

    out = []
    for i in range(n):
        turns = [(f"{words(2)} {tokenizer.MARKERS[seed % 200 + i]}", words(int(rng.integers(1, max_answer + 1))))]
        if rng.random() < multi_turn_rate:
            turns.append((words(2), words(int(rng.integers(1, 4)))))
        out.append(EnergonSample(f"s{seed}-{i:04d}", IMAGES[int(rng.integers(0, 2))], tuple(turns)))
    return tuple(out)


@dataclass(frozen=True)
class Case:
    id: str
    seed: int
    mbs: int = 3
    seq: int = 64
    n: int = 6
    shards: int = 1
    knobs: dict[str, Any] = field(default_factory=dict)
    encoder: str = "hf"  # "qwen-vl": the model-owned QwenVLTaskEncoder of MB's Qwen-VL Energon recipes

    def request(self, **overrides: Any) -> EnergonRequest:
        req = EnergonRequest(
            samples(self.seed, self.n),
            vlprocessor.write_processor_dir(),
            self.seq,
            self.mbs,
            batches=-(-self.n // self.mbs),
            shards=self.shards,
            pixels=PIXELS,
            knobs=dict(self.knobs),
            encoder=self.encoder,
        )
        return replace(req, **overrides)


def _marker(tokens: list[int]) -> str | None:
    vocab = _vocab()
    found = [m for m in tokenizer.MARKERS if vocab[m] in tokens]
    return found[0] if len(found) == 1 else None


_REFERENCES: dict[str, dict[str, Example]] = {}


def reference(case: Case) -> dict[str, Example]:
    """MB's unpadded path: one sample per micro-batch, multiple 1, packing off; by marker."""
    if case.id in _REFERENCES:
        return _REFERENCES[case.id]
    # Energon's training order samples its slices (a sample can come twice before another once):
    # no shuffle buffer and a few epochs' steps see every sample; the order decides no verdict
    plain = {"pad_to_multiple_of": 1, "shuffle_buffer_size": 1}
    build = energon_batches(case.request(micro_batch_size=1, batches=4 * case.n, knobs=plain))
    out: dict[str, Example] = {}
    for b in build.batches:
        # one sample on multiple 1 has no padding; should MB pad it anyway, its attention mask says where
        mask = b.get("attention_mask")
        n = int(mask[0].sum()) if mask is not None else int(b["input_ids"].shape[1])
        require(not b["loss_mask"][0, n:].any(), Impact.TRAINS_PADDING, f"{case.id}: the unpadded path trains padding")
        row = {k: b[k][0, :n].tolist() for k in ("input_ids", "labels", "loss_mask", "position_ids")}
        key = _marker(row["input_ids"])
        if key is None:
            raise RuntimeError(f"{case.id}: a reference row without one marker")
        as_int = {k: tuple(int(x) for x in v) for k, v in row.items()}
        out[key] = Example(
            key,
            as_int["input_ids"],
            as_int["labels"],
            tuple(int(bool(x)) for x in as_int["loss_mask"]),
            as_int["position_ids"],
        )
    if len(out) != case.n:  # the input's fault or the loader's order: the case would test less
        raise RuntimeError(f"{case.id}: the reference saw {len(out)} of {case.n} samples in {4 * case.n} steps")
    _REFERENCES[case.id] = out
    return out


def _assistant_targets(tokens: tuple[int, ...]) -> set[int]:
    """Positions whose token the documented loss trains: each assistant turn's text and its end."""
    v = _vocab()
    start, assistant, end = v[tokenizer.TURN_START], v["assistant"], v[tokenizer.TURN_END]
    out: set[int] = set()
    k = 0
    while k + 1 < len(tokens):
        if tokens[k] == start and tokens[k + 1] == assistant:
            j = k + 2
            while j < len(tokens) and tokens[j] != end:
                out.add(j)
                j += 1
            if j < len(tokens):
                out.add(j)
            k = j
        k += 1
    return out


def _check_reference(ex: Example, width_height: tuple[int, int]) -> None:
    """MB's unpadded row itself: the image's placeholders, then the assistant turns trained, nothing else."""
    v = _vocab()
    n_img = ex.tokens.count(v[vlprocessor.IMAGE_PAD])
    want = vlprocessor.placeholders(*width_height)
    require(n_img == want, Impact.WRONG_LOGITS, f"{ex.key}: {n_img} image placeholders, its image needs {want}")
    trained = _assistant_targets(ex.tokens)
    for k, m in enumerate(ex.loss_mask):
        documented = k + 1 in trained
        if bool(m) != documented:
            impact = Impact.DROPS_TRAINED_TOKEN if documented else Impact.TRAINS_MASKED_TOKEN
            raise fail(impact, f"{ex.key} position {k}: loss mask {m}, the assistant turns say {int(documented)}")
        if m and ex.labels[k] != ex.tokens[k + 1]:
            raise fail(Impact.WRONG_TARGETS, f"{ex.key} position {k}: label {ex.labels[k]}, next {ex.tokens[k + 1]}")


def _images(batch: dict[str, Any]) -> None:
    """The visual inputs feed exactly the placeholders: one grid row per image, one embedding each."""
    visual = batch.get("visual_inputs")
    grid = getattr(visual, "image_grid_thw", None)
    require(grid is not None, Impact.WRONG_LOGITS, "the batch carries no image_grid_thw for its images")
    embeddings = sum(int(t * h * w) // vlprocessor.MERGE**2 for t, h, w in grid.tolist())
    placeholders = int((batch["input_ids"] == _vocab()[vlprocessor.IMAGE_PAD]).sum())
    require(
        embeddings == placeholders,
        Impact.WRONG_LOGITS,
        f"{placeholders} image placeholders for {embeddings} image embeddings",
    )


def _keyed(batch: dict[str, Any]) -> dict[str, Any]:
    return {"tokens": batch["input_ids"], **{k: v for k, v in batch.items() if k != "input_ids"}}


PADDED = [
    Case("mbs3-default-multiple-seq2048", 201, seq=2048),  # MB's default multiple 128 (and the loader's seq)
    Case("mbs2-multiple8", 202, mbs=2, knobs={"pad_to_multiple_of": 8}),
    Case("mbs3-pad-to-max-seq96", 203, seq=96, knobs={"pad_to_max_length": True, "pad_to_multiple_of": 8}),
    Case("mbs2-two-shards", 204, mbs=2, n=8, shards=2, knobs={"pad_to_multiple_of": 16}),
    Case("qwen-vl-mbs3-multiple8", 205, knobs={"pad_to_multiple_of": 8}, encoder="qwen-vl"),
    Case(
        "qwen-vl-mbs2-pad-to-max",
        206,
        mbs=2,
        knobs={"pad_to_max_length": True, "pad_to_multiple_of": 8},
        encoder="qwen-vl",
    ),
]
PACKED = [
    Case("mbs3-seq4096", 211, seq=4096, knobs={"enable_in_batch_packing": True}),  # the task encoder's default
    Case(
        "mbs3-mult8-seq128",
        212,
        seq=128,
        knobs={"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 8},
    ),
    Case("mbs2-mult4", 213, mbs=2, knobs={"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 4}),
    Case(
        "qwen-vl-mbs3-mult8",
        214,
        knobs={"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 8},
        encoder="qwen-vl",
    ),
]


def _ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]


def _rows_by_marker(case: Case, batch: dict[str, Any], r: int) -> tuple[Example, int]:
    ref = reference(case)
    key = _marker(batch["input_ids"][r].tolist())
    require(key is not None and key in ref, Impact.WRONG_TARGETS, f"row {r}: no sample of the shards")
    assert key is not None
    return ref[key], len(ref[key].tokens)


@pytest.mark.parametrize("case", PADDED, ids=_ids(PADDED))
def test_padded_rows(golden, case):
    """Unpacked rows: the documented width, equal to the unpadded path per real token, padding untrained."""
    energon_batches.resolved  # noqa: B018 - untestable before the builder, before anything is built
    ref = reference(case)
    drawn = {s.turns[0][0].split()[-1]: s.image for s in case.request().samples}
    for ex in ref.values():
        _check_reference(ex, drawn[ex.key])
    widths = _check_padded(case, energon_batches(case.request()))
    golden.check({"widths": widths, "token_count": {k: len(e.tokens) for k, e in sorted(ref.items())}})


def _check_padded(case: Case, build: Any) -> list[int]:
    """Every unpacked micro-batch: its rows, their documented width, the real tokens, untrained padding."""
    require(build.batches, Impact.CRASH, "MB's Energon builder yielded no training batch")
    multiple, to_max = int(build.config.pad_to_multiple_of), bool(build.config.pad_to_max_length)
    widths = []
    for b, batch in enumerate(build.batches):
        rows, width = batch["input_ids"].shape
        require(rows == case.mbs, Impact.CRASH, f"batch {b}: {rows} rows, micro_batch_size {case.mbs}")
        counts = []
        for r in range(rows):
            ex, n_real = _rows_by_marker(case, batch, r)
            require_row_equals_example(f"batch {b} ", batch, r, ex, IGNORE_INDEX)
            counts.append(n_real)
        require_documented_width(f"batch {b}: ", width, max(counts), multiple, case.seq, to_max)
        _images(batch)
        widths.append(width)
    return widths


@pytest.mark.parametrize("case", PACKED, ids=_ids(PACKED))
def test_in_batch_packed_rows(golden, case):
    """In-batch packing in the task encoder: one THD row per micro-batch, held to the oracle."""
    energon_batches.resolved  # noqa: B018
    build = energon_batches(case.request())
    require(build.batches, Impact.CRASH, "MB's Energon builder yielded no training batch")
    multiple = int(build.config.in_batch_packing_pad_to_multiple_of)
    ref = reference(case)
    bounds = []
    for b, batch in enumerate(build.batches):
        (row,) = batch_ops.packed_rows(_keyed(batch))
        keys = [m for m in tokenizer.MARKERS if _vocab()[m] in row.tokens]
        require(
            len(keys) == case.mbs, Impact.DROPS_TRAINED_TOKEN, f"batch {b}: {len(keys)} samples, micro-batch {case.mbs}"
        )
        examples = [ref[k] for k in keys if k in ref]
        differential.compare([row], examples, pad_seq_to_mult=multiple, padding_ids=(0,)).assert_ok()
        require(len(row.tokens) <= case.seq * case.mbs, Impact.CRASH, f"batch {b}: {len(row.tokens)} tokens packed")
        _images(batch)
        bounds.append(list(row.cu_seqlens_q_padded or row.cu_seqlens_q or ()))
    golden.check({"multiple": multiple, "cu_seqlens": bounds})


@pytest.mark.parametrize("encoder", ["hf", "qwen-vl"])
def test_deferred_packing_leaves_rows_unpacked(golden, encoder):
    """``defer_in_batch_packing_to_step``: the loader hands the step right-padded rows, not a THD row."""
    energon_batches.resolved  # noqa: B018
    deferred = {"enable_in_batch_packing": True, "defer_in_batch_packing_to_step": True}
    case = Case(f"mbs3-deferred-{encoder}", 221, knobs=deferred, encoder=encoder)
    build = energon_batches(case.request())
    require(build.batches, Impact.CRASH, "MB's Energon builder yielded no training batch")
    for b, batch in enumerate(build.batches):
        packed = [k for k in ("cu_seqlens_q", "cu_seqlens_q_padded") if batch.get(k) is not None]
        # the deferring step packs what it gets: a THD row handed to it again is one sequence of all samples
        require(not packed, Impact.CROSS_DOCUMENT_ATTENTION, f"batch {b}: the loader packed already ({packed})")
        rows = batch["input_ids"].shape[0]
        require(rows == case.mbs, Impact.CROSS_DOCUMENT_ATTENTION, f"batch {b}: {rows} rows for {case.mbs} samples")
        for r in range(rows):
            ex, n_real = _rows_by_marker(case, batch, r)
            require(
                tuple(batch["input_ids"][r, :n_real].tolist()) == ex.tokens
                and tuple(int(bool(x)) for x in batch["loss_mask"][r, :n_real].tolist()) == ex.loss_mask,
                Impact.WRONG_TARGETS,
                f"batch {b} row {r} ({ex.key}): differs from the unpadded path",
            )
            require(
                not batch["loss_mask"][r, n_real:].any(), Impact.TRAINS_PADDING, f"batch {b} row {r}: padding trains"
            )
    golden.check({"widths": [int(b["input_ids"].shape[1]) for b in build.batches]})


# one invalid setting each: (knob, value, what MB's message names)
REFUSED = [
    ("pad_to_multiple_of", 0, "pad_to_multiple_of"),
    ("in_batch_packing_pad_to_multiple_of", 0, "in_batch_packing_pad_to_multiple_of"),
    ("packing_buffer_size", 0, "packing_buffer_size"),
]


@pytest.mark.parametrize("knob,value,named", REFUSED, ids=[r[0] for r in REFUSED])
def test_invalid_setting_is_refused(knob, value, named):
    """A multiple or buffer of 0 divides nothing: ``EnergonDatasetConfig.validate`` refuses it by name."""
    energon_batches.resolved  # noqa: B018
    case = Case(f"refused-{knob}", 231, knobs={knob: value})
    try:
        energon_batches(case.request(batches=1))
    except (ValueError, AssertionError, TypeError) as exc:
        if rules.raising_check(exc) is None or named not in str(exc):
            raise fail(Impact.CRASH, f"{knob}={value} refused, but not by MB's check on it: {exc}") from exc
        return
    raise fail(Impact.ACCEPTS_INVALID_CONFIG, f"{knob}={value} accepted")


def test_energon_sample_packing_needs_an_encoder_that_packs():
    """``packing_buffer_size`` turns on Energon's own sample packing, which calls the task encoder's
    ``select_samples_to_pack`` and ``pack_selected_samples``; MB's HF task encoder packs in its collate
    and has neither. Refused by Energon's check before any batch is made, the setting is safe; a loader
    that accepts it must still hand the step rows that hold every invariant of the unpacked path."""
    energon_batches.resolved  # noqa: B018
    case = Case("packing-buffer-4", 241, mbs=2, knobs={"packing_buffer_size": 4, "pad_to_multiple_of": 8})
    try:
        build = energon_batches(case.request())
    except AssertionError as exc:
        if "select_samples_to_pack" not in str(exc):
            raise fail(
                Impact.CRASH, f"packing_buffer_size 4 refused, but not for the encoder's packing: {exc}"
            ) from exc
        return
    _check_padded(case, build)
