"""The checks of a pretraining sample against the documents as written, shared by the
``pretraining_dataset`` suite and the exploration's pretraining space (suites/_explore_pretrain.py).

The reference is the data itself, not the dataset's own index: a sample's tokens and labels are a
window of the document stream (the tail of one document, whole documents, the head of the next),
its loss mask trains every real label (but an EOD input with ``eod_mask_loss``) and never padding,
its position ids restart after EOD with ``reset_position_ids``, and with ``reset_attention_mask``
no token attends to another document.
"""

from __future__ import annotations

from typing import Any

from harness.oracle.impact import Impact, require


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
            require(False, impact, f"{where}: position {i} (token {tokens[i]}) loss mask {mask[i]}, documented {want}")
    want_pos, p = [], 0
    for i in range(seq):
        want_pos.append(p)
        p = 0 if (knobs.get("reset_position_ids") and tokens[i] == eod) else p + 1
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
