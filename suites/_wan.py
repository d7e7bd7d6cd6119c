"""Wan's packed video path to the loss: every pack held to MB's own pack-of-one path, sample by sample.

Why: Wan always trains packed (MB's ``WanTaskEncoder``); a user cannot turn packing off, so the
reference is MB's own path with one sample per pack (``packing_buffer_size`` 1: every pack is a
single video, the unpacked case of the same code). Samples are told apart by their key, which the
side info carries into the batch (``video_metadata``).

Judged per micro-batch of MB's Wan data module (:mod:`harness.suite.adapters.wan`), for each sample in the
pack at its place (the running sums of ``seq_len_q_padded`` and ``seq_len_kv_padded``):

* its video positions are its patches (Wan's 2 x 2 spatial patches of every latent frame), and the
  text its video attends to covers its whole caption (``drops-trained-token``, ``wrong-logits``): the
  absolute check, which a fault in the packing shared by the pack of one cannot pass;
* its lengths (video and text, real and padded), from which the step builds attention's boundaries,
  are its pack of one's (``cross-document-attention``);
* its patch grid covers its video positions, one per patch (``wrong-logits``: Wan's 3-D RoPE);
* its video latents (what the flow-matching target is built from) equal its pack of one
  (``wrong-targets``), and its text embeddings (what its video attends to) too (``wrong-logits``),
  and its patch grid (Wan's 3-D RoPE positions) (``wrong-logits``);
* the loss mask trains exactly its real positions (``trains-padding`` / ``drops-trained-token``).

Then the micro-batch through MB's ``WanForwardStep`` (its model recorded, Transformer Engine only):

* self-attention's ``cu_seqlens_q`` / ``_kv`` are the samples' boundaries in the packed video
  sequence, and cross-attention's ``cu_seqlens_kv`` the boundaries of their texts, padded forms
  alike (``cross-document-attention``: a video attending to another video or to another caption);
* the model is handed the patch grids of the pack, in order (``wrong-logits``);
* the mask MB's loss function reduces with is the batch's: every real position, no padding
  (``trains-padding`` / ``drops-trained-token``), and the token count it returns is the pack's real
  positions (``wrong-loss-normalisation``).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import torch

from harness.records.impact import Impact, fail
from harness.suite.adapters import wan
from suites._vlm_cp import zigzag

# videos of 1 or 2 latent frames at a few sizes, captions of 2 to 9 tokens (patches: F * H/2 * W/2)
SAMPLES = tuple(
    wan.WanSample(f"v{i:03d}", (4, f, h, w), t, 300 + i)
    for i, (f, h, w, t) in enumerate(
        [(1, 4, 4, 5), (2, 4, 6, 7), (1, 6, 4, 3), (1, 2, 4, 9), (2, 2, 2, 6), (1, 4, 2, 2)]
    )
)

BY_KEY = {s.key: s for s in SAMPLES}


def reference(*, data_parallel: bool = False) -> wan.WanRequest:
    """MB's pack-of-one path over :data:`SAMPLES`: a packing buffer of 1, read until every sample came."""
    request = wan.WanRequest(SAMPLES, 64, packing_buffer_size=1, batches=200, every_sample=True)
    return dataclasses.replace(request, data_parallel=data_parallel)


def _key(meta: Any) -> str:
    return str(meta["key"]) if isinstance(meta, dict) else str(meta)


def _bounds(lengths: torch.Tensor) -> list[int]:
    return [0, *torch.cumsum(lengths.flatten().to(torch.int64), 0).tolist()]


def singles(batches: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """key -> MB's pack of one of that sample (from a data module with ``packing_buffer_size`` 1), for
    every sample of :data:`SAMPLES` (a reference without one is the harness's error, not MB's)."""
    out: dict[str, dict[str, Any]] = {}
    for batch in batches:
        metas = batch["video_metadata"]
        if len(metas) != 1:
            raise fail(Impact.CRASH, f"a packing buffer of 1 made a pack of {len(metas)} samples")
        out.setdefault(_key(metas[0]), batch)
    missing = sorted({s.key for s in SAMPLES} - set(out))
    if missing:
        raise RuntimeError(f"the reference read {len(batches)} packs of one without {missing}: read more")
    return out


def check_pack(where: str, batch: dict[str, Any], single: dict[str, dict[str, Any]]) -> None:
    """Each sample of ``batch`` at its place equals its pack of one (module docstring)."""
    q, kv = _bounds(batch["seq_len_q_padded"]), _bounds(batch["seq_len_kv_padded"])
    video, text = batch["video_latents"][:, 0], batch["context_embeddings"][:, 0]
    mask = batch["loss_mask"][:, 0].float()
    if video.shape[0] != q[-1] or text.shape[0] != kv[-1] or mask.shape[0] != q[-1]:
        raise fail(
            Impact.WRONG_TARGETS,
            f"{where}: {video.shape[0]} video rows, {text.shape[0]} text rows, {mask.shape[0]} loss-mask rows; "
            f"the samples' padded lengths sum to {q[-1]} and {kv[-1]}",
        )
    for n, meta in enumerate(batch["video_metadata"]):
        key = _key(meta)
        one = single[key]  # every sample has one (singles)
        at = f"{where}, sample {n} ({key})"
        real = int(batch["seq_len_q"][n])
        for name in ("seq_len_q", "seq_len_q_padded", "seq_len_kv", "seq_len_kv_padded"):
            if int(batch[name][n]) != int(one[name][0]):  # what the step builds attention's boundaries from
                raise fail(
                    Impact.CROSS_DOCUMENT_ATTENTION,
                    f"{at}: {name} {int(batch[name][n])} in the pack, {int(one[name][0])} in its pack of one",
                )
        sample = BY_KEY[key]  # what was written: every patch of its video a position, its whole caption seen
        patches = sample.latent[1] * (sample.latent[2] // 2) * (sample.latent[3] // 2)
        if real != patches:
            raise fail(Impact.DROPS_TRAINED_TOKEN, f"{at}: {real} video positions for its {patches} patches")
        if int(batch["seq_len_kv"][n]) < sample.text:
            raise fail(
                Impact.WRONG_LOGITS,
                f"{at}: its video attends to {int(batch['seq_len_kv'][n])} text rows, its caption has {sample.text}",
            )
        grid = [int(x) for x in batch["grid_sizes"][n].tolist()]
        if grid[0] * grid[1] * grid[2] != real:  # Wan's 3-D RoPE: one position per patch of the video
            raise fail(Impact.WRONG_LOGITS, f"{at}: patch grid {grid} for {real} video positions")
        if not torch.equal(video[q[n] : q[n + 1]], one["video_latents"][:, 0]):
            raise fail(Impact.WRONG_TARGETS, f"{at}: its video latents in the pack differ from its pack of one")
        if not torch.equal(text[kv[n] : kv[n + 1]], one["context_embeddings"][:, 0]):
            raise fail(Impact.WRONG_LOGITS, f"{at}: its text embeddings in the pack differ from its pack of one")
        if not torch.equal(batch["grid_sizes"][n], one["grid_sizes"][0]):
            raise fail(
                Impact.WRONG_LOGITS,
                f"{at}: patch grid {batch['grid_sizes'][n].tolist()}, {one['grid_sizes'][0].tolist()} alone",
            )
        want = torch.zeros(q[n + 1] - q[n])
        want[:real] = 1
        got = mask[q[n] : q[n + 1]]
        if bool((got > want).any()):
            raise fail(Impact.TRAINS_PADDING, f"{at}: a padding position of its video trains")
        if bool((got < want).any()):
            raise fail(Impact.DROPS_TRAINED_TOKEN, f"{at}: one of its {real} video positions does not train")


def check_step(where: str, batch: dict[str, Any], runs: list[wan.WanStepRun]) -> None:
    """What MB's Wan step handed the model and its loss (module docstring), on each of the ``len(runs)``
    CP ranks: each rank's loss mask is the batch's at its positions of MCore's THD layout (all of it
    at CP 1), and the ranks' token counts sum to the pack's real positions."""
    cp = len(runs)
    mask = batch["loss_mask"].flatten().float()
    counted = 0.0
    for rank, run in enumerate(runs):
        at = where if cp == 1 else f"{where}, CP rank {rank} of {cp}"
        check_boundaries(at, batch, run)
        if run.loss_mask is None:
            raise fail(Impact.WRONG_LOSS_NORMALISATION, f"{at}: MB's loss function read no loss mask")
        want = mask if cp == 1 else mask[thd_positions(batch["seq_len_q_padded"], cp, rank)]
        _same_mask(at, run.loss_mask.flatten().float(), want)
        counted += run.num_tokens
    real = int(batch["seq_len_q"].sum())
    if counted != real:
        who = "MB's loss function counts" if cp == 1 else "the CP ranks' loss functions count"
        raise fail(
            Impact.WRONG_LOSS_NORMALISATION,
            f"{where}: {who} {counted:g} tokens, the pack has {real} real positions",
        )


def _same_mask(where: str, mask: torch.Tensor, want: torch.Tensor) -> None:
    if mask.shape != want.shape or bool((mask > want).any()):
        raise fail(Impact.TRAINS_PADDING, f"{where}: the loss trains a position the batch's loss mask does not")
    if bool((mask < want).any()):
        raise fail(Impact.DROPS_TRAINED_TOKEN, f"{where}: a position the batch trains is out of the loss")


def check_boundaries(where: str, batch: dict[str, Any], run: wan.WanStepRun) -> None:
    """The model is called once with the pack's attention boundaries and patch grids."""
    if run.calls != 1:
        raise fail(Impact.CRASH, f"{where}: the step called the model {run.calls} times (expected once)")
    params = run.kwargs.get("packed_seq_params") or {}
    if "self_attention" not in params or "cross_attention" not in params:
        raise fail(Impact.CROSS_DOCUMENT_ATTENTION, f"{where}: the model is handed no packed boundaries")
    want = {
        ("self_attention", "cu_seqlens_q"): _bounds(batch["seq_len_q"]),
        ("self_attention", "cu_seqlens_kv"): _bounds(batch["seq_len_q"]),
        ("self_attention", "cu_seqlens_q_padded"): _bounds(batch["seq_len_q_padded"]),
        ("self_attention", "cu_seqlens_kv_padded"): _bounds(batch["seq_len_q_padded"]),
        ("cross_attention", "cu_seqlens_q"): _bounds(batch["seq_len_q"]),
        ("cross_attention", "cu_seqlens_kv"): _bounds(batch["seq_len_kv"]),
        ("cross_attention", "cu_seqlens_q_padded"): _bounds(batch["seq_len_q_padded"]),
        ("cross_attention", "cu_seqlens_kv_padded"): _bounds(batch["seq_len_kv_padded"]),
    }
    for (attention, name), bounds in want.items():
        got = getattr(params[attention], name, None)
        if got is None or [int(x) for x in got.tolist()] != bounds:
            raise fail(
                Impact.CROSS_DOCUMENT_ATTENTION,
                f"{where}: {attention}.{name} is {None if got is None else got.tolist()}, the samples' boundaries "
                f"are {bounds}",
            )
    grids = run.kwargs.get("grid_sizes")
    if grids is None or not torch.equal(torch.as_tensor(grids), batch["grid_sizes"]):
        raise fail(Impact.WRONG_LOGITS, f"{where}: the model is handed patch grids other than the pack's")


def thd_positions(padded: torch.Tensor, cp: int, rank: int) -> torch.Tensor:
    """The packed positions CP rank ``rank`` holds in MCore's THD layout: of each sample's padded
    segment (a multiple of ``2 * cp``), its load-balanced chunks (:func:`suites._vlm_cp.zigzag`)."""
    parts = [start + zigzag(end - start, cp, rank) for start, end in itertools.pairwise(_bounds(padded))]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)


def check_step_under_cp(req_single: wan.WanRequest, req_packed: wan.WanRequest, cp: int) -> None:
    """Wan under context parallelism: every rank of a gloo CP world builds MB's Wan data module with
    its process groups (its task encoder pads each video to a multiple of ``2 * CP``) and runs the step
    (the flow-matching pipeline splits the target and the loss mask over the CP group). The ranks read
    the same packs; each pack holds its samples as their packs of one do in that world; each rank's
    loss mask is the batch's at its positions of MCore's THD layout, and the ranks' token counts sum to
    the pack's real positions."""
    from harness.suite.adapters.world import Layout, run_world

    wan.write_dataset(req_packed.samples, req_packed.text_dim)  # indexed here: MB's preparation starts processes

    def on_rank(_rank: int) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], list[wan.WanStepRun]]:
        single = singles(wan.wan_batches(req_single))
        packed = wan.wan_batches(req_packed)
        return single, packed, [wan.wan_step(b) for b in packed]

    ranks = run_world(Layout(cp=cp), on_rank)
    single, packed, _ = ranks[0]
    for rank, (_, other, _) in enumerate(ranks[1:], start=1):
        if [b["video_metadata"] for b in other] != [b["video_metadata"] for b in packed]:
            raise fail(
                Impact.WRONG_LOGITS,
                f"CP ranks 0 and {rank} read different packs: each computes its part of another sequence",
            )
    for b, batch in enumerate(packed):
        check_pack(f"micro-batch {b}", batch, single)
        check_step(f"micro-batch {b}", batch, [runs[b] for _, _, runs in ranks])
