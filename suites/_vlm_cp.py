"""Qwen3-VL's step under context parallelism: what each CP rank's model is handed to train.

Why: Qwen3-VL is the VLM MB trains with CP > 1 (a recipe sets ``context_parallel_size = 2``), and
it keeps sequence preparation in its own step (``qwen3_vl_step``): the step pads each row to a
multiple of ``2 * CP``, splits the labels and the loss mask over the CP group with MCore's
``get_batch_on_this_cp_rank`` and hands the model the whole rows of tokens (the model splits them
itself, the same zigzag way). MB's loss function then runs on each rank's part; the training loop
sums the ranks' loss totals. A label or a loss-mask entry that lands on the wrong rank or slot, or
twice, or nowhere, trains the wrong target or miscounts the loss while every batch check holds.

Judged per micro-batch, every rank of a gloo world of ``CP`` processes running MB's step with its own
process groups, against the same step at CP = 1 (MB's own path, same commit, same micro-batch):

* each rank's labels and loss mask, per row, are the CP = 1 row (padded as the CP step pads it)
  at the positions of MCore's load-balanced CP layout: chunks ``r`` and ``2 * CP - 1 - r`` of
  ``2 * CP`` equal chunks (``wrong-targets`` for a label, ``trains-padding`` / ``drops-trained-token``
  for the loss mask);
* every rank is handed the row's tokens whole (``wrong-targets``: the model splits what it gets);
* MB's loss totals summed over the ranks equal the CP = 1 totals (``wrong-loss-normalisation``);
* no host read of a device tensor in the step (``perf-contract``).

Not judged: how Qwen3-VL's model splits the tokens and the vision embeddings under CP (its
attention and vision tower are Transformer Engine modules, which need a GPU; the model is the
recording double of :mod:`harness.adapters.qwen3vlstep`, here with a loss of each position's
label alone, the same at any CP).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.adapters import forward as fwd
from harness.adapters import hostsync, step
from harness.adapters.energon import EnergonBuild
from harness.adapters.world import Layout, rank_groups, run_world
from harness.oracle.impact import Impact, fail
from suites import _forward

IGNORE = -100  # the label the CP step pads with (as the loss mask pads with 0)


def zigzag(width: int, cp: int, rank: int) -> torch.Tensor:
    """MCore's load-balanced CP layout of a row of ``width``: the positions rank ``rank`` holds."""
    chunk = width // (2 * cp)
    return torch.cat([torch.arange(c * chunk, (c + 1) * chunk) for c in (rank, 2 * cp - 1 - rank)])


def _model(qwen3vlstep: Any) -> Any:
    gpt = fwd.tiny_gpt(seed=_forward.SEED, vocab_size=_forward.MODEL_VOCAB)
    return qwen3vlstep.Qwen3VLRecordingModel(gpt, seq_length=fwd.MAX_POS, tokens_in_loss=False)


def check_qwen3_step_under_cp(build: EnergonBuild, cp: int = 2) -> None:
    """Every micro-batch of ``build`` through MB's Qwen3-VL step with in-batch packing, at CP = 1 and
    on every rank of a CP world (see the module docstring; the raises name the impact)."""
    from harness.adapters import qwen3vlstep

    ones = [qwen3vlstep.qwen3_vl_step(_model(qwen3vlstep), b, packing=True) for b in build.batches]

    def on_rank(_rank: int) -> list[step.StepRun]:
        groups = rank_groups()
        model = _model(qwen3vlstep)
        return [qwen3vlstep.qwen3_vl_step(model, b, packing=True, groups=groups) for b in build.batches]

    ranks = run_world(Layout(cp=cp), on_rank)
    for b, one in enumerate(ones):
        _compare(f"micro-batch {b}", one, [r[b] for r in ranks], cp)


def _rows(run: step.StepRun, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    labels = step.plain(run.kwargs["labels"]).reshape(rows, -1)
    if run.loss_mask is None:
        raise fail(Impact.WRONG_LOSS_NORMALISATION, "MB's loss function read no loss mask")
    return labels, step.plain(run.loss_mask).reshape(rows, -1)


def _compare(where: str, one: step.StepRun, ranks: list[step.StepRun], cp: int) -> None:
    ids = step.plain(one.kwargs["input_ids"])
    rows = ids.shape[0]
    labels_1, mask_1 = _rows(one, rows)
    loss_sum = num_tokens = 0.0
    for rank, run in enumerate(ranks):
        at = f"{where}, CP rank {rank} of {cp}"
        if run.host_reads:
            raise fail(Impact.PERF_CONTRACT, f"{at}: {hostsync.describe(run.host_reads)}")
        got_ids = step.plain(run.kwargs["input_ids"])
        width = got_ids.shape[-1]
        if got_ids.shape[0] != rows or got_ids[:, : ids.shape[1]].tolist() != ids.tolist():
            raise fail(Impact.WRONG_TARGETS, f"{at}: the model is not handed the rows of tokens whole")
        labels, mask = _rows(run, rows)
        pad = width - labels_1.shape[1]
        want_labels = torch.nn.functional.pad(labels_1, (0, pad), value=IGNORE)[:, zigzag(width, cp, rank)]
        want_mask = torch.nn.functional.pad(mask_1, (0, pad), value=0)[:, zigzag(width, cp, rank)]
        if labels.shape != want_labels.shape:
            raise fail(
                Impact.WRONG_TARGETS,
                f"{at}: {tuple(labels.shape)} labels handed over, {tuple(want_labels.shape)} in MCore's CP layout",
            )
        # a position that trains here or at CP 1 with another label: the wrong target (a split
        # other than the model's puts labels beside the wrong tokens)
        wrong = ((labels != want_labels) & ((want_mask > 0) | (mask > 0))).nonzero()
        if len(wrong):
            r, j = (int(x) for x in wrong[0])
            raise fail(
                Impact.WRONG_TARGETS,
                f"{at}: row {r}, local slot {j} holds label {int(labels[r, j])}, "
                f"{int(want_labels[r, j])} in MCore's CP layout of the CP 1 row",
            )
        extra = (mask > want_mask).nonzero()
        if len(extra):
            r, j = (int(x) for x in extra[0])
            raise fail(Impact.TRAINS_PADDING, f"{at}: row {r}, local slot {j} trains; at CP 1 it does not")
        lost = (mask < want_mask).nonzero()
        if len(lost):
            r, j = (int(x) for x in lost[0])
            raise fail(Impact.DROPS_TRAINED_TOKEN, f"{at}: row {r}, local slot {j} trains at CP 1, not here")
        loss_sum, num_tokens = loss_sum + run.loss_sum, num_tokens + run.num_tokens
    if num_tokens != one.num_tokens or abs(loss_sum - one.loss_sum) > 1e-4 * max(1.0, abs(one.loss_sum)):
        raise fail(
            Impact.WRONG_LOSS_NORMALISATION,
            f"{where}: the CP ranks' loss totals sum to {loss_sum:.6g} over {num_tokens:g} tokens, "
            f"{one.loss_sum:.6g} over {one.num_tokens:g} at CP 1",
        )
