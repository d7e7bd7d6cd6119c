"""The checks of a pretraining sample against the documents as written, shared by the
``pretraining_dataset`` suite and the exploration's pretraining space (suites/_explore_pretrain.py).

The reference is the data itself, not the dataset's own index: a sample's tokens and labels are a
window of the document stream (the tail of one document, whole documents, the head of the next),
its loss mask trains every real label (but an EOD input with ``eod_mask_loss``) and never padding,
its position ids restart after EOD with ``reset_position_ids`` (or megatron-core's
``inter_document_masking``, which makes each document its own sequence), and with ``reset_attention_mask``
no token attends to another document.
"""

from __future__ import annotations

from typing import Any

from harness import features
from harness.records.impact import Impact, fail, require
from harness.suite.adapters import needs


def plain(sample: dict[str, Any], key: str) -> list[Any]:
    return sample[key].tolist()


def _segments(text: list[int], eod: int) -> list[list[int]]:
    out, cur = [], []
    for t in text:
        cur.append(t)
        if t == eod:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


def _check_window(where: str, text: list[int], docs: list[list[int]], eod: int) -> None:
    """``text`` (real positions only) is a window of the document stream."""
    segs = _segments(text, eod)
    for k, seg in enumerate(segs):
        whole = seg[-1] == eod
        if k == 0:
            ok = (
                any(d[len(d) - len(seg) :] == seg for d in docs if len(d) >= len(seg))
                if whole
                else any(seg == d[i : i + len(seg)] for d in docs for i in range(len(d) - len(seg) + 1))
            )
        elif k == len(segs) - 1 and not whole:
            ok = any(d[: len(seg)] == seg for d in docs)
        else:
            ok = seg in docs
        require(ok, Impact.WRONG_TARGETS, f"{where}: piece {k} ({len(seg)} tokens) is no part of the documents written")


def check_sample(where: str, s: dict[str, Any], docs: list[list[int]], knobs: dict[str, Any], eod: int, pad: int):
    tokens, labels, mask, pos = (plain(s, k) for k in ("tokens", "labels", "loss_mask", "position_ids"))
    seq = len(tokens)
    # the sample's text is its tokens plus the last label (megatron-core draws seq_length + 1 tokens);
    # padding (the pad id, which no document holds here) fills the end of an incomplete sample
    text = tokens + [labels[-1]]
    m = len(text)
    while m > 0 and text[m - 1] == pad:
        m -= 1
    padded, n_real = m < len(text), min(m, seq)
    _check_window(where, text[:m], docs, eod)
    require(
        labels[: m - 1] == text[1:m],
        Impact.WRONG_TARGETS,
        f"{where}: labels are not the tokens shifted by one",
    )
    for i in range(seq):
        real_label = i < m - 1
        want = 1.0 if real_label and not (knobs.get("eod_mask_loss") and tokens[i] == eod) else 0.0
        if mask[i] != want:
            impact = (
                Impact.TRAINS_PADDING
                if not real_label
                else (Impact.TRAINS_MASKED_TOKEN if want == 0 else Impact.DROPS_TRAINED_TOKEN)
            )
            if where.startswith("validation"):  # nothing trains there: the validation loss is off
                impact = Impact.WRONG_LOSS_NORMALISATION
            # megatron-core serves one cached mask when no knob makes it depend on the data: said, so that a
            # failure names the configuration it happened in
            cached = not any(knobs.get(k) for k in ("eod_mask_loss", "reset_position_ids", "reset_attention_mask"))
            require(
                False,
                impact,
                f"{where}: position {i} (token {tokens[i]}) loss mask {mask[i]}, documented {want}"
                + (" (a mask megatron-core caches: no eod_mask_loss, no resets)" if cached else ""),
            )
    # megatron-core's inter_document_masking makes each document its own sequence (its cu_seqlens), and
    # resets the position ids per document as reset_position_ids does ("Reset position IDs per document")
    restart = knobs.get("reset_position_ids") or knobs.get("inter_document_masking")
    want_pos, p = [], 0
    for i in range(seq):
        want_pos.append(p)
        p = 0 if (restart and tokens[i] == eod) else p + 1
    require(
        pos[:n_real] == want_pos[:n_real],
        Impact.WRONG_LOGITS,
        f"{where}: position ids {pos[:n_real]}, documented {want_pos[:n_real]}",
    )
    if knobs.get("reset_attention_mask") and s.get("attention_mask") is not None:
        masked = s["attention_mask"][0].bool()  # True: may not attend
        doc_of = [0] * seq
        for i in range(1, seq):
            doc_of[i] = doc_of[i - 1] + (1 if tokens[i - 1] == eod else 0)
        for i in range(n_real):
            for j in range(i + 1):
                require(
                    bool(masked[i, j]) == (doc_of[i] != doc_of[j]),
                    Impact.CROSS_DOCUMENT_ATTENTION,
                    f"{where}: token {i} (document {doc_of[i]}) {'may not' if masked[i, j] else 'may'} attend to "
                    f"token {j} (document {doc_of[j]})",
                )
    return padded


# reset_attention_mask asks that no token attend to another document; MB's step decides whether the
# dataset's mask reaches the model (skip_getting_attention_mask_from_dataset, MB's default True)
STEP = {
    "dataset-mask": {"skip_getting_attention_mask_from_dataset": False},
    "default": {},
    "inter-document-masking": {"inter_document_masking": True},
}


def core_dataset_fields() -> set[str]:
    """The fields of megatron-core's ``GPTDatasetConfig`` (``inter_document_masking`` is in newer ones)."""
    from dataclasses import fields

    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    return {f.name for f in fields(GPTDatasetConfig)}


def step_knobs(name: str) -> dict[str, Any]:
    """The config fields of step variant ``name`` (:data:`STEP`); untestable where megatron-core lacks them,
    and where MB's step cannot be reached (:mod:`harness.suite.adapters.pretrainstep`)."""
    from harness.suite.adapters.pretrainstep import pretrain_step_attention

    needs(pretrain_step_attention)
    if "inter_document_masking" in STEP[name] and "inter_document_masking" not in core_dataset_fields():
        raise features.missing(
            "inter-document-masking", "megatron-core's GPTDatasetConfig has no inter_document_masking"
        )
    return STEP[name]


def check_step(build: Any, samples: int, eod: int) -> tuple[list[int], list[dict[str, Any]]]:
    """What MB's ``gpt_step.get_batch`` hands the model for each of the first ``samples`` training samples
    (one per micro-batch) of a ``reset_attention_mask`` build keeps documents apart: a mask that blocks
    every earlier document, or packed boundaries that cover the row with one at every document start
    (raises on a violation). Returns the samples that hold two documents, and what the model got."""
    from harness.suite.adapters.pretrainstep import pretrain_step_attention

    crossing, seen = [], []
    for r in range(min(samples, len(build.train))):
        sample = build.train[r]
        tokens = sample["tokens"].tolist()
        ends = [k for k, t in enumerate(tokens[:-1]) if t == eod]  # a document ends here, another starts after
        got = pretrain_step_attention([sample], build.config)
        seen.append({"mask": got.attention_mask is not None, "boundaries": got.boundaries})
        if not ends:
            continue
        crossing.append(r)
        if got.boundaries is not None:
            starts = sorted({0, *(e + 1 for e in ends), len(tokens)})
            # THD kernels refuse boundaries that do not cover the row (empty ones included)
            require(
                got.boundaries[:1] == [0] and got.boundaries[-1:] == [len(tokens)],
                Impact.CRASH,
                f"sample {r}: the model's boundaries {got.boundaries} do not cover its {len(tokens)} tokens",
            )
            require(
                sorted(set(got.boundaries)) == starts,
                Impact.CROSS_DOCUMENT_ATTENTION,
                f"sample {r}: the model's boundaries {got.boundaries}, the documents start at {starts}",
            )
            continue
        if got.attention_mask is None:
            raise fail(
                Impact.CROSS_DOCUMENT_ATTENTION,
                f"reset_attention_mask=True with skip_getting_attention_mask_from_dataset="
                f"{getattr(build.config, 'skip_getting_attention_mask_from_dataset', None)}, but the model gets no "
                f"attention mask and no boundaries (the backend's "
                f"causal mask): in sample {r} token {ends[0] + 1} attends to the document that ends at {ends[0]}",
            )
        mask = got.attention_mask[0, 0]
        for e in ends:
            may = [(i, j) for i in range(e + 1, len(tokens)) for j in range(e + 1) if not bool(mask[i, j])]
            if may:
                raise fail(
                    Impact.CROSS_DOCUMENT_ATTENTION,
                    f"sample {r}: token {may[0][0]} may attend to {may[0][1]} across the document end at {e}",
                )
    return crossing, seen


def pad_id(ds: Any) -> int:
    """The id a served sample holds where megatron-core's GPTDataset padded it. It pads with the tokenizer's
    ``pad``, or with its own ``_PAD_TOKEN_ID`` (-1) where the era's MB tokenizer has none (MB's HuggingFace
    tokenizer at 5e4313cfe), and then writes 0 over that id in tokens and labels "so the embedding layer
    can map the token ID": a negative pad is served as 0."""
    pad = int(ds._pad_token_id)
    return 0 if pad < 0 else pad
