"""The checks of MB's Energon VLM data path, shared by the ``energon_dataset`` suite and exploration.

Documented contract (``EnergonDatasetConfig``, ``HFTaskEncoder`` and the model collate MB resolves
from the processor, here Qwen2.5-VL's; MB's Energon tutorial for the data layout): each image
becomes its grid of placeholders inside the chat-rendered text; the assistant turns train and
nothing else; unpacked rows are right-padded to ``pad_to_multiple_of`` (capped at
``seq_length``) or, with ``pad_to_max_length``, to exactly ``seq_length``; with
``enable_in_batch_packing`` the micro-batch is one MCore THD row, each sequence padded to
``in_batch_packing_pad_to_multiple_of``; ``defer_in_batch_packing_to_step`` leaves the rows
unpacked for the step; every sample the shards hold reaches the step (a micro-batch Energon's
error handling skips never does, nor do the samples in it).

The reference is MB's own unpadded path: the same shards and builder with one sample per
micro-batch and multiple 1. Every row is matched to its sample by the sample's marker token,
so neither Energon's order nor its shuffling decides the verdict. Why a module of its own: the
hand-written cases (suites/test_energon_dataset.py) and the Energon space of exploration
(suites/_explore_energon.py) hold a build to the same checks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from harness.records.impact import Impact, fail, require
from harness.records.oracle import Example
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters.energon import EnergonBuild, EnergonRequest, EnergonSample, energon_batches
from harness.suite.oracle import differential, tokenizer, vlprocessor
from harness.suite.oracle.padded import require_documented_width, require_row_equals_example
from suites._inputs import IGNORE_INDEX

PIXELS = (28 * 28 * 4, 28 * 28 * 8)  # min_pixels, max_pixels: 56 x 56 and 112 x 56 images kept as drawn
IMAGES = ((56, 56), (112, 56))
UNCUT = 4096  # the task encoder's default seq_length: no drawn sample is that long


@functools.cache
def vocab() -> dict[str, int]:
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
    max_answer: int = 12  # words in an answer, at most
    multi_turn_rate: float = 0.3  # the share of samples with a second turn

    @property
    def samples(self) -> tuple[EnergonSample, ...]:
        return samples(self.seed, self.n, self.max_answer, self.multi_turn_rate)

    def request(self, **overrides: Any) -> EnergonRequest:
        req = EnergonRequest(
            self.samples,
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


def marker(tokens: list[int]) -> str | None:
    """The one sample marker among ``tokens`` (None: none or several)."""
    v = vocab()
    found = [m for m in tokenizer.MARKERS if v[m] in tokens]
    return found[0] if len(found) == 1 else None


def require_nothing_skipped(build: EnergonBuild, what: str) -> None:
    """No micro-batch dropped by Energon's error handling: its samples, every one of them, never train."""
    if build.skipped:
        first = build.skipped[0]
        keys = sorted({k for s in build.skipped for k in s.keys})
        raise fail(
            Impact.DROPS_TRAINED_TOKEN,
            f"{what}: Energon's error handling skipped {len(build.skipped)} loader step(s) and the samples in them "
            f"({', '.join(keys) or 'keys unknown'}) never reach the step; the first: {first.stage} raised "
            f"{first.error}",
        )


_REFERENCES: dict[str, dict[str, Example]] = {}


def reference(case: Case) -> dict[str, Example]:
    """MB's unpadded path: one sample per micro-batch, multiple 1, packing off; by marker."""
    if case.id in _REFERENCES:
        return _REFERENCES[case.id]
    # Energon's training order samples its slices (a sample can come twice before another once):
    # no shuffle buffer and a few epochs' steps see every sample; the order decides no verdict
    plain = {"pad_to_multiple_of": 1, "shuffle_buffer_size": 1}
    build = energon_batches(case.request(micro_batch_size=1, batches=4 * case.n, knobs=plain))
    require_nothing_skipped(build, f"{case.id}: the unpadded path")
    out: dict[str, Example] = {}
    for b in build.batches:
        # one sample on multiple 1 has no padding; should MB pad it anyway, its attention mask says where
        mask = b.get("attention_mask")
        n = int(mask[0].sum()) if mask is not None else int(b["input_ids"].shape[1])
        require(not b["loss_mask"][0, n:].any(), Impact.TRAINS_PADDING, f"{case.id}: the unpadded path trains padding")
        row = {k: b[k][0, :n].tolist() for k in ("input_ids", "labels", "loss_mask", "position_ids")}
        key = marker(row["input_ids"])
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
    v = vocab()
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


def _documented_loss(ex: Example) -> None:
    """A whole sample's row: the assistant turns (text and end) train, nothing else, each on its next token."""
    trained = _assistant_targets(ex.tokens)
    for k, m in enumerate(ex.loss_mask):
        documented = k + 1 in trained
        if bool(m) != documented:
            impact = Impact.DROPS_TRAINED_TOKEN if documented else Impact.TRAINS_MASKED_TOKEN
            raise fail(impact, f"{ex.key} position {k}: loss mask {m}, the assistant turns say {int(documented)}")
        if m and ex.labels[k] != ex.tokens[k + 1]:
            label, following = ex.labels[k], ex.tokens[k + 1]
            raise fail(Impact.WRONG_TARGETS, f"{ex.key} position {k}: label {label}, next {following}")


def _cut_from(ex: Example, whole: Example) -> None:
    """A row cut at ``seq_length`` is the whole sample's row up to there: its last target is the sample's
    next token (cut from the row, not from the sample), nothing else changes."""
    n = len(ex.tokens)
    for name in ("tokens", "labels", "loss_mask", "position_ids"):
        got, want = getattr(ex, name), getattr(whole, name)[:n]
        if got != want:
            k = next(i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b)
            trained, documented = bool(ex.loss_mask[k]), bool(whole.loss_mask[k])
            impact = (
                Impact.DROPS_TRAINED_TOKEN
                if documented and not trained
                else Impact.TRAINS_MASKED_TOKEN
                if trained and not documented
                else Impact.WRONG_TARGETS
            )
            raise fail(
                impact, f"{ex.key}: cut at {n} tokens, its {name} at {k} is {got[k]}, the whole sample's {want[k]}"
            )


def check_reference(case: Case) -> dict[str, Example]:
    """MB's unpadded rows themselves: each image's placeholders, then the assistant turns trained,
    nothing else; returns them by marker. A row cut at ``seq_length`` is held to the same sample
    read whole (``seq_length`` of :data:`UNCUT`)."""
    ref = reference(case)
    cut = any(len(ex.tokens) >= case.seq for ex in ref.values())
    whole = reference(replace(case, id=f"{case.id}@uncut", seq=UNCUT)) if cut else ref
    drawn = {s.turns[0][0].split()[-1]: s.image for s in case.samples}
    v = vocab()
    for ex in ref.values():
        n_img = ex.tokens.count(v[vlprocessor.IMAGE_PAD])
        want = vlprocessor.placeholders(*drawn[ex.key])
        require(n_img == want, Impact.WRONG_LOGITS, f"{ex.key}: {n_img} image placeholders, its image needs {want}")
        _documented_loss(whole[ex.key])
        if whole is not ref:
            _cut_from(ex, whole[ex.key])
    return ref


def _images(batch: dict[str, Any]) -> None:
    """The visual inputs feed exactly the placeholders: one grid row per image, one embedding each."""
    visual = batch.get("visual_inputs")
    grid = getattr(visual, "image_grid_thw", None)
    require(grid is not None, Impact.WRONG_LOGITS, "the batch carries no image_grid_thw for its images")
    assert grid is not None  # for the type checker: require raised otherwise
    embeddings = sum(int(t * h * w) // vlprocessor.MERGE**2 for t, h, w in grid.tolist())
    placeholders = int((batch["input_ids"] == vocab()[vlprocessor.IMAGE_PAD]).sum())
    require(
        embeddings == placeholders,
        Impact.WRONG_LOGITS,
        f"{placeholders} image placeholders for {embeddings} image embeddings",
    )


def _keyed(batch: dict[str, Any]) -> dict[str, Any]:
    return {"tokens": batch["input_ids"], **{k: v for k, v in batch.items() if k != "input_ids"}}


def _row_example(case: Case, batch: dict[str, Any], r: int) -> tuple[Example, int]:
    ref = reference(case)
    key = marker(batch["input_ids"][r].tolist())
    require(key is not None and key in ref, Impact.WRONG_TARGETS, f"row {r}: no sample of the shards")
    assert key is not None
    return ref[key], len(ref[key].tokens)


def _built(build: EnergonBuild) -> None:
    require(build.batches, Impact.CRASH, "MB's Energon builder yielded no training batch")
    require_nothing_skipped(build, "MB's Energon loader")


def check_padded(case: Case, build: EnergonBuild) -> list[int]:
    """Every unpacked micro-batch: its rows, their documented width, the real tokens, untrained
    padding; returns the widths."""
    _built(build)
    multiple, to_max = int(build.config.pad_to_multiple_of), bool(build.config.pad_to_max_length)
    widths = []
    for b, batch in enumerate(build.batches):
        rows, width = batch["input_ids"].shape
        require(rows == case.mbs, Impact.CRASH, f"batch {b}: {rows} rows, micro_batch_size {case.mbs}")
        counts = []
        for r in range(rows):
            ex, n_real = _row_example(case, batch, r)
            require_row_equals_example(f"batch {b} ", batch, r, ex, IGNORE_INDEX)
            counts.append(n_real)
        require_documented_width(f"batch {b}: ", width, max(counts), multiple, case.seq, to_max)
        _images(batch)
        widths.append(width)
    return widths


def check_packed(case: Case, build: EnergonBuild) -> dict[str, Any]:
    """In-batch packing in the task encoder: one THD row per micro-batch, held to the oracle;
    returns its multiple and boundaries (golden form)."""
    _built(build)
    multiple = int(build.config.in_batch_packing_pad_to_multiple_of)
    ref = reference(case)
    bounds = []
    for b, batch in enumerate(build.batches):
        (row,) = batch_ops.packed_rows(_keyed(batch))
        # Energon's training order may put one sample twice into a micro-batch: count sequences, not samples
        sequences = len(row.cu_seqlens_q or ()) - 1
        require(
            sequences == case.mbs,
            Impact.DROPS_TRAINED_TOKEN,
            f"batch {b}: {sequences} sequences packed, micro-batch {case.mbs}",
        )
        cu = list(row.cu_seqlens_q_padded or row.cu_seqlens_q or ())  # where each sequence starts in the row
        examples = []  # one per packed sequence (a sample met twice is two occurrences, each found once)
        for i in range(sequences):
            key = marker(list(row.tokens[cu[i] : cu[i + 1]]))
            require(key in ref, Impact.WRONG_TARGETS, f"batch {b} sequence {i}: no one sample of the shards")
            examples.append(replace(ref[str(key)], key=f"{key}#{i}"))
        differential.compare([row], examples, pad_seq_to_mult=multiple, padding_ids=(0,)).assert_ok()
        require(len(row.tokens) <= case.seq * case.mbs, Impact.CRASH, f"batch {b}: {len(row.tokens)} tokens packed")
        _images(batch)
        bounds.append(list(row.cu_seqlens_q_padded or row.cu_seqlens_q or ()))
    return {"multiple": multiple, "cu_seqlens": bounds}


def check_deferred(case: Case, build: EnergonBuild) -> dict[str, Any]:
    """``defer_in_batch_packing_to_step``: the loader hands the step right-padded rows, not a THD
    row; returns the widths (golden form)."""
    _built(build)
    for b, batch in enumerate(build.batches):
        packed = [k for k in ("cu_seqlens_q", "cu_seqlens_q_padded") if batch.get(k) is not None]
        # the deferring step packs what it gets: a THD row handed to it again is one sequence of all samples
        require(not packed, Impact.CROSS_DOCUMENT_ATTENTION, f"batch {b}: the loader packed already ({packed})")
        rows = batch["input_ids"].shape[0]
        require(rows == case.mbs, Impact.CROSS_DOCUMENT_ATTENTION, f"batch {b}: {rows} rows for {case.mbs} samples")
        for r in range(rows):
            ex, n_real = _row_example(case, batch, r)
            require(
                tuple(batch["input_ids"][r, :n_real].tolist()) == ex.tokens
                and tuple(int(bool(x)) for x in batch["loss_mask"][r, :n_real].tolist()) == ex.loss_mask,
                Impact.WRONG_TARGETS,
                f"batch {b} row {r} ({ex.key}): differs from the unpadded path",
            )
            require(
                not batch["loss_mask"][r, n_real:].any(), Impact.TRAINS_PADDING, f"batch {b} row {r}: padding trains"
            )
    return {"widths": [int(b["input_ids"].shape[1]) for b in build.batches]}
