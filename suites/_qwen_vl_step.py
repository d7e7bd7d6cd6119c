"""Qwen2.5-VL under in-batch packing, through its own model: each sample's rotary positions and input
embeddings as MB's unpacked path gives them.

Why a check of its own: the Energon step check runs the packed rows into the tiny GPTModel, which has
neither a vision tower nor multimodal rotary positions. Qwen2.5-VL's model computes both itself from
the packed row (:mod:`harness.suite.adapters.qwenvl`), so a packed sample whose MRoPE positions or image
embeddings come out differently trains differently while every batch check still holds.

Judged per micro-batch, against the same samples through MB's loader with packing off and the same
step and model (MB's own unpacked path):

* the multimodal rotary positions handed to the language model, ``[3, 1, T]`` packed against
  ``[3, B, S]`` unpacked: per axis (temporal, height, width), each real token's position relative to
  its sample's first token (``wrong-logits``; a constant shift of a whole sample is no change:
  rotary attention sees only differences);
* the input embeddings handed to the language model, per real token (text, and the vision tower's
  output at the image placeholders; ``wrong-logits``);
* MB's loss function totals: the loss sum and the token count (``wrong-loss-normalisation``);
* no host read of a device tensor in the step (``perf-contract``).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.records.impact import Impact, fail
from harness.suite.adapters import hostsync, qwenvl, step, vlmstep
from harness.suite.adapters.energon import EnergonBuild
from harness.suite.oracle import vlprocessor
from suites import _forward
from suites._energon import Case, vocab
from suites._energon_step import require_same_totals, unpacked

AXES = ("temporal", "height", "width")

_MODEL: list[qwenvl.QwenVLRecordingModel] = []


def model() -> qwenvl.QwenVLRecordingModel:
    """One tiny Qwen2.5-VL per process, its token ids the processor's."""
    if not _MODEL:
        v = vocab()
        ids = qwenvl.VisionTokens(v[vlprocessor.IMAGE_PAD], v[vlprocessor.VIDEO_PAD], v[vlprocessor.VISION_START])
        _MODEL.append(qwenvl.qwen25_vl_model(ids, vocab_size=_forward.MODEL_VOCAB))
    return _MODEL[0]


def _segments(params: Any, width: int) -> list[tuple[int, int]]:
    """(start, real length) of each sample of the packed row, from the params the model was handed."""
    if params is None:
        raise fail(Impact.CROSS_DOCUMENT_ATTENTION, "the packed micro-batch reached the model without PackedSeqParams")
    logical = [int(x) for x in step.plain(params.cu_seqlens_q).reshape(-1).tolist()]
    padded_t = getattr(params, "cu_seqlens_q_padded", None)
    padded = [int(x) for x in step.plain(padded_t).reshape(-1).tolist()] if padded_t is not None else logical
    out = [(padded[i], logical[i + 1] - logical[i]) for i in range(len(logical) - 1)]
    if any(start + n > width for start, n in out):
        raise fail(Impact.CRASH, f"the packed params point past the {width}-token row: {out}")
    return out


def _row_of(tokens: list[int], rows: torch.Tensor, taken: set[int]) -> int:
    """The unpacked row whose first tokens are ``tokens`` (each row matched once)."""
    for r in range(rows.shape[0]):
        if r not in taken and rows[r, : len(tokens)].tolist() == tokens:
            return r
    raise fail(Impact.WRONG_TARGETS, f"a packed sample ({len(tokens)} tokens) is no unpacked row's first tokens")


def check(case: Case, packed: EnergonBuild) -> None:
    """Each micro-batch MB's loader packed, and the same samples unpacked, through MB's
    ``vlm_step.forward_step`` into Qwen2.5-VL's own model (the raises name the impact)."""
    plain = unpacked(case, packed)
    qwen = model()
    forward = vlmstep._vlm_forward()
    on = step.minimal_state(enable_in_batch_packing=True, defer_in_batch_packing_to_step=False, sequence_parallel=False)
    off = step.minimal_state(enable_in_batch_packing=False)
    for b, (pb, ub) in enumerate(zip(packed.batches, plain.batches, strict=True)):
        p = step.run_step(forward, on, pb, qwen)
        p_lm = qwen.language_call
        u = step.run_step(forward, off, ub, qwen)
        u_lm = qwen.language_call
        where = f"micro-batch {b}"
        if p.host_reads:
            raise fail(Impact.PERF_CONTRACT, f"{where}: {hostsync.describe(p.host_reads)}")
        ids = step.plain(p.kwargs["input_ids"])
        if ids.dim() != 2 or ids.shape[0] != 1:
            shape = tuple(ids.shape)
            raise fail(Impact.CRASH, f"{where}: the packed micro-batch reached the model as {shape}, not one row")
        pos_p, pos_u = p_lm.get("position_ids"), u_lm.get("position_ids")
        emb_p, emb_u = p_lm["decoder_input"], u_lm["decoder_input"]  # [s, b, h]
        if pos_p is None or pos_u is None or pos_p.dim() != 3 or pos_u.dim() != 3:
            raise fail(Impact.WRONG_LOGITS, f"{where}: the language model got no [3, B, S] rotary positions")
        rows = step.plain(ub["input_ids"])
        taken: set[int] = set()
        for k, (start, n) in enumerate(_segments(p.kwargs.get("packed_seq_params"), ids.shape[1])):
            tokens = ids[0, start : start + n].tolist()
            r = _row_of(tokens, rows, taken)
            taken.add(r)
            _same_positions(pos_p[:, 0, start : start + n], pos_u[:, r, :n], f"{where}, sample {k} (unpacked row {r})")
            got, want = emb_p[start : start + n, 0], emb_u[:n, r]
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
                bad = int((~torch.isclose(got, want, rtol=1e-4, atol=1e-5).all(-1)).nonzero()[0])
                kind = "an image placeholder" if tokens[bad] == vocab()[vlprocessor.IMAGE_PAD] else "a text token"
                raise fail(
                    Impact.WRONG_LOGITS,
                    f"{where}, sample {k} (unpacked row {r}): the input embedding at its token {bad} ({kind}) "
                    "differs from the unpacked run's",
                )
        require_same_totals(where, p, u)


def _same_positions(packed: torch.Tensor, alone: torch.Tensor, where: str) -> None:
    """Per axis, positions relative to the sample's first token (rotary attention sees differences)."""
    for a, axis in enumerate(AXES):
        got = (packed[a] - packed[a, 0]).tolist()
        want = (alone[a] - alone[a, 0]).tolist()
        if got != want:
            at = next(i for i, (x, y) in enumerate(zip(got, want, strict=True)) if x != y)
            raise fail(
                Impact.WRONG_LOGITS,
                f"{where}: its {axis} rotary position at token {at} is {got[at]} from its first token, "
                f"{want[at]} unpacked: attention within it sees other distances",
            )


def check_qwen3_step(case: Case, build: EnergonBuild) -> None:
    """Qwen3-VL's step-owned packing: each right-padded micro-batch MB's loader defers packing for
    (``build``) through MB's ``qwen3_vl_step.forward_step`` with in-batch packing on, against the same
    micro-batch with it off (the raises name the impact). Per row: its real tokens, labels and loss
    mask reach the model in place (``wrong-targets``), inside one sequence of the params that starts
    at the row (``cross-document-attention``); no padding position trains (``trains-padding``); MB's
    loss totals are the unpacked ones (``wrong-loss-normalisation``); no host read in the step."""
    from harness.suite.adapters import forward as fwd
    from harness.suite.adapters import qwen3vlstep
    from suites._energon import _row_example

    gpt = fwd.tiny_gpt(seed=_forward.SEED, vocab_size=_forward.MODEL_VOCAB)
    qwen = qwen3vlstep.Qwen3VLRecordingModel(gpt, seq_length=fwd.MAX_POS)
    for b, batch in enumerate(build.batches):
        p = qwen3vlstep.qwen3_vl_step(qwen, batch, packing=True)
        u = qwen3vlstep.qwen3_vl_step(qwen, batch, packing=False)
        where = f"micro-batch {b}"
        if p.host_reads:
            raise fail(Impact.PERF_CONTRACT, f"{where}: {hostsync.describe(p.host_reads)}")
        ids = step.plain(p.kwargs["input_ids"])
        rows, width = ids.shape
        labels = step.plain(p.kwargs["labels"]).reshape(rows, -1)
        mask = step.plain(p.loss_mask).reshape(rows, -1) if p.loss_mask is not None else None
        u_labels, u_mask = step.plain(u.kwargs["labels"]), step.plain(u.loss_mask)
        params = p.kwargs.get("packed_seq_params")
        bounds = [int(x) for x in step.plain(params.cu_seqlens_q).reshape(-1).tolist()] if params is not None else None
        for r in range(rows):
            ex, n = _row_example(case, batch, r)
            at = f"{where}, row {r} ({ex.key})"
            if ids[r, :n].tolist() != list(ex.tokens):
                raise fail(Impact.WRONG_TARGETS, f"{at}: its tokens do not reach the model in place")
            if labels.shape[1] != width or labels[r, :n].tolist() != u_labels[r, :n].tolist():
                raise fail(Impact.WRONG_TARGETS, f"{at}: its labels differ from the unpacked step's")
            if mask is None or u_mask is None or mask[r, :n].tolist() != u_mask.reshape(rows, -1)[r, :n].tolist():
                raise fail(Impact.WRONG_TARGETS, f"{at}: its loss mask differs from the unpacked step's")
            if mask[r, n:].any():
                raise fail(Impact.TRAINS_PADDING, f"{at}: {int(mask[r, n:].count_nonzero())} padding position(s) train")
            if bounds is not None:
                start = r * width
                inside = [i for i in range(len(bounds) - 1) if bounds[i] <= start < bounds[i + 1]]
                if not inside or bounds[inside[0]] != start or bounds[inside[0] + 1] < start + n:
                    raise fail(
                        Impact.CROSS_DOCUMENT_ATTENTION,
                        f"{at}: its {n} real tokens at {start} are not one sequence of the params' boundaries {bounds}",
                    )
        require_same_totals(where, p, u)
