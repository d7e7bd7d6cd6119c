"""Right-padded (unpacked) collate batches held to MB's own unpadded batch of the same rows.

A collate that pads rows to a multiple or to a fixed width changes nothing a real token sees:
per real token (the reference's ``token_count``), tokens, labels, loss mask and position ids
equal the unpadded batch; every padding position trains nothing (loss mask 0, label the ignore
index). Used by the suites of MB's text collates (chat, prompt-completion, direct HF SFT).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from harness.records.impact import Impact, require
from harness.records.oracle import Example

if TYPE_CHECKING:
    import torch

_IMPACT = {"tokens": Impact.WRONG_TARGETS, "labels": Impact.WRONG_TARGETS, "position_ids": Impact.WRONG_LOGITS}


def require_same_real_tokens(
    got: Mapping[str, torch.Tensor], ref: Mapping[str, torch.Tensor], ignore_index: int
) -> None:
    """``got`` equals ``ref`` on every row's real tokens and trains none of its padding."""
    for r, n_real in enumerate(ref["token_count"]):
        for key in ("tokens", "labels", "loss_mask", "position_ids"):
            require(
                got[key][r, :n_real].tolist() == ref[key][r, :n_real].tolist(),
                _IMPACT.get(key, Impact.DROPS_TRAINED_TOKEN),
                f"row {r}: {key} of the real tokens differs from the unpadded collate",
            )
        pad_mask, pad_labels = got["loss_mask"][r, n_real:].tolist(), got["labels"][r, n_real:].tolist()
        require(not any(pad_mask), Impact.TRAINS_PADDING, f"row {r}: padding trains (loss mask {pad_mask})")
        require(
            all(x == ignore_index for x in pad_labels), Impact.TRAINS_PADDING, f"row {r}: padding labels {pad_labels}"
        )


def require_row_equals_example(
    where: str, got: Mapping[str, torch.Tensor], r: int, ex: Example, ignore_index: int
) -> None:
    """Row ``r`` of an unpacked batch (``input_ids`` or ``tokens`` keyed) equals ``ex``, MB's unpadded
    path of the same example, on its real tokens (the loss mask as trained or not), and trains none
    of its padding. For references that are rows of their own, not one padded batch."""
    n = len(ex.tokens)
    tokens = got["tokens"] if "tokens" in got else got["input_ids"]
    want = {"tokens": ex.tokens, "labels": ex.labels, "position_ids": ex.position_ids}
    for key, ref in want.items():
        row = tuple((tokens if key == "tokens" else got[key])[r, :n].tolist())
        require(row == ref, _IMPACT[key], f"{where}row {r} ({ex.key}): {key} of the real tokens differ from unpadded")
    require(
        tuple(int(bool(x)) for x in got["loss_mask"][r, :n].tolist()) == ex.loss_mask,
        Impact.DROPS_TRAINED_TOKEN,
        f"{where}row {r} ({ex.key}): loss mask differs from the unpadded path",
    )
    pad_mask, pad_labels = got["loss_mask"][r, n:].tolist(), got["labels"][r, n:].tolist()
    require(not any(pad_mask), Impact.TRAINS_PADDING, f"{where}row {r}: padding trains ({pad_mask})")
    require(
        all(x == ignore_index for x in pad_labels),
        Impact.TRAINS_PADDING,
        f"{where}row {r}: padding labels {pad_labels}",
    )


def require_documented_width(where: str, width: int, longest: int, multiple: int, seq: int, to_max: bool) -> None:
    """The width MB's collates document for unpacked rows: exactly ``seq`` with ``pad_to_max_length``
    (the fixed shape pipeline parallelism and CUDA graphs rely on: a crash otherwise), else the
    longest row rounded up to ``multiple`` and capped at ``seq`` (wider is padding computed for
    nothing, narrower misses the multiple CP/SP or the kernels asked for)."""
    if to_max:
        require(width == seq, Impact.CRASH, f"{where}pad_to_max_length: rows {width} wide, not seq_length {seq}")
        return
    expected = min(-(-longest // multiple) * multiple, seq)
    require(
        width == expected,
        Impact.PERF_CONTRACT,
        f"{where}rows {width} wide, documented {expected} (longest {longest}, multiple {multiple}, cap {seq})",
    )
