"""Step-3.7's own packing (its Flickr8k SFT pipeline) through its own step, held to each sample alone.

What runs is what a user of MB's Step-3.7 recipe with ``Step37Flickr8kSFTDataProvider`` trains on:
MB's provider tokenises image-caption dialogs with its template, schedules and packs them
(greedy, no truncation, oversize samples dropped or given a pack of their own), MB's pack transform
shifts each sample by one and pads the pack to ``seqlen_divisible_by`` as a sub-sequence of its own,
and MB's ``step37_flickr8k_step.forward_step`` moves it to the device, pads to ``lcm(TP, 16)``,
builds ``PackedSeqParams`` from ``cu_seqlens`` and calls the model; its loss function sums the
loss mask's tokens (harness/suite/adapters/familystep.py names the doubles).

The reference is MB's same pipeline on each sample alone (``pack_samples([sample])``, the same
step): per real token the model must compute the same logits and loss, the loss function must count
the same totals, padding must never train, and the sub-sequence boundaries must be the samples found
by content (``harness.suite.oracle.differential``, with what the model saw as packed rows). The samples
are MB's own tokenisation (``MultimodalSFTSample``: ``tokens[:-1]`` the inputs, ``tokens[1:]`` the
labels, ``loss_mask[1:]`` what trains, as its docstring defines them). A sample longer than
``max_packing_seqlen`` is skipped under the ``drop`` policy (the provider's default) as documented,
and packed alone under ``extend``.
"""

from __future__ import annotations

import functools
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.suite.adapters import familystep, needs
from harness.suite.oracle import differential, stepcheck, tokenizer
from suites import _forward
from suites._model_view import loss_mask_of, params_view, token_outputs

# the image placeholder's tokens as the word-level test tokenizer reads them (spaced: it splits on
# whitespace); the provider lets a recipe name them, and the ids are given where the provider would
# look them up by name
_IMAGE_TOKENS = {"image_start_token": " w150 ", "image_token": " w151 ", "image_end_token": " w152 "}
_PATCH_TOKENS = {"patch_start_token": " w153 ", "patch_end_token": " w154 "}


@dataclass(frozen=True)
class Step37Case:
    """One Step-3.7 packing configuration (the provider's own fields)."""

    id: str
    max_packing_seqlen: int
    seqlen_divisible_by: int
    oversize_policy: str
    dataset_sampling: str
    n: int = 10
    seed: int = 37

    def provider_fields(self) -> dict[str, Any]:
        vocab = tokenizer.vocab()
        return {
            "max_packing_seqlen": self.max_packing_seqlen,
            "seqlen_divisible_by": self.seqlen_divisible_by,
            "oversize_policy": self.oversize_policy,
            "dataset_sampling": self.dataset_sampling,
            "prompt": "w1 w2 w3",
            "image_token_count": 4,
            "patch_token_count": 2,
            **_IMAGE_TOKENS,
            **_PATCH_TOKENS,
            "img_start_token_id": vocab["w150"],
            "patch_start_token_id": vocab["w153"],
            "image_size": 28,
            "patch_image_size": 28,
            "encoder_patch_size": 14,
            "seq_length": self.max_packing_seqlen,
        }


CASES = [
    Step37Case("step37-drop-random-mult64", 64, 64, "drop", "random"),
    Step37Case("step37-extend-sequential-mult8", 64, 8, "extend", "sequential"),
]


@functools.cache
def _images(n: int) -> tuple[Path, ...]:
    """``n`` small RGB images written once per process (distinct colours)."""
    from PIL import Image

    out = Path(tempfile.mkdtemp(prefix="harness-step37-"))
    paths = []
    for i in range(n):
        path = out / f"img{i}.png"
        Image.new("RGB", (16, 12), (20 * i % 256, 80, 200 - 10 * i % 200)).save(path)
        paths.append(path)
    return tuple(paths)


def captions(case: Step37Case) -> list[str]:
    """Captions whose first word marks the sample (found by content in a pack); one is longer than a
    pack (the oversize policy decides it)."""
    rng = random.Random(case.seed)
    lengths = [rng.randint(2, 18) for _ in range(case.n - 1)] + [55]
    return [" ".join([f"id{i}"] + [f"w{rng.randint(10, 99)}" for _ in range(k)]) for i, k in enumerate(lengths)]


def _example(i: int, sample: Any) -> differential.Example:
    tokens = [int(t) for t in sample["tokens"].tolist()]
    mask = [int(bool(m)) for m in sample["loss_mask"].tolist()]
    n = len(tokens) - 1
    return differential.Example(f"id{i}", tuple(tokens[:-1]), tuple(tokens[1:]), tuple(mask[1:]), tuple(range(n)))


def _rows(run: Any) -> list[differential.PackedRow]:
    """What the model received, positions as Step-3.7's model derives them (its RoPE under THD)."""
    k = run.kwargs
    params = k["packed_seq_params"]
    view = params_view(params)
    tokens = k["input_ids"].reshape(-1)
    positions = familystep.positions_from_boundaries(params, tokens.numel())
    inputs = stepcheck.ModelInputs(
        tokens.tolist(), k["labels"].reshape(-1).tolist(), loss_mask_of(run).reshape(-1).tolist(), positions.tolist()
    )
    return [stepcheck.model_row(inputs, view)]


def _special_ids() -> dict[str, int | None]:
    """The test tokenizer's special ids as MB's Step-3.7 pipeline uses them: it pads with 0 (its pad)."""
    vocab = tokenizer.vocab()
    return {"eos_id": vocab[tokenizer.EOS], "pad_id": vocab[tokenizer.PAD], "bos_id": vocab[tokenizer.BOS]}


@functools.cache
def model() -> familystep.Step37RecordingModel:
    """The CPU tiny model of the forward cases, seen through the Step-3.7-shaped double."""
    gpt, _ = _forward.models()
    return familystep.Step37RecordingModel(gpt.gpt)


@functools.cache
def run(case: Step37Case) -> _forward.ForwardResult:
    """Every pack of ``case`` through MB's Step-3.7 step, against each sample alone through the same step."""
    needs(familystep.step37_data, familystep.step37_step)
    pairs = list(zip(_images(case.n), captions(case), strict=True))
    data = familystep.step37_data(pairs, tokenizer.write_tokenizer_dir(), **case.provider_fields())
    m = model()
    examples = [_example(i, s) for i, s in enumerate(data.samples)]
    refs: dict[str, stepcheck.TokenOutputs] = {}
    ref_totals: dict[str, stepcheck.LossTotals] = {}
    for i, ex in enumerate(examples):
        alone = familystep.step37_step(m, data.single(i), data.provider)
        refs[ex.key] = token_outputs(alone, 0, len(ex.tokens))
        ref_totals[ex.key] = stepcheck.LossTotals(alone.loss_sum, alone.num_tokens)
    runs = [familystep.step37_step(m, pack, data.provider) for pack in data.packs]
    rows = [row for r in runs for row in _rows(r)]
    result = _forward.check_runs(
        rows,
        runs,
        examples,
        refs,
        None,
        ref_totals,
        _special_ids(),
        mult=1,
        static_max=False,
        pack_size=case.max_packing_seqlen if case.oversize_policy == "drop" else None,
        tol=_forward.FP32,
        packs_in_step=("preprocess_packed_batch", "_build_packed_seq_params"),
    )
    # MB's rule against padded boundaries without padding is get_packed_seq_params' (its fast path, for
    # TE's padded THD kernel). Step-3.7's step builds its own params with the padded boundaries equal to
    # the logical ones, and TE then sees no padding between sequences (DotProductAttention compares the
    # two): no slower kernel, no impact, so not judged here
    result.violations = [v for v in result.violations if _WITHOUT_PADDING not in v.tags]
    return result


_WITHOUT_PADDING = "padded-variant-without-padding"
