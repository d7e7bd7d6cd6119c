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

Under data and context parallelism at once (:func:`check_qwen3_step_under_dp_cp`), every rank of a
DP x CP world reads its micro-batches from MB's Energon loader, built with the rank's process
groups as MB's setup builds it, and runs the step: the CP ranks of one data-parallel replica read
the same samples (``wrong-logits`` otherwise: a rank computes its part of another sequence), the
replicas read different ones (``wrong-loss-normalisation``: a sample trains twice a step), and each
replica's CP ranks hold, together, the CP = 1 step of that replica's micro-batches as above. Code
that splits over the wrong group (the data-and-context group is the CP group in a world of CP
alone) is right by accident in a CP world and wrong here.

Not judged: how Qwen3-VL's model splits the tokens and the vision embeddings under CP (its
attention and vision tower are Transformer Engine modules, which need a GPU; the model is the
recording double of :mod:`harness.suite.adapters.qwen3vlstep`, here with a loss of each position's
label alone, the same at any CP).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.records.impact import Impact, fail
from harness.suite.adapters import forward as fwd
from harness.suite.adapters import hostsync, step
from harness.suite.adapters.energon import EnergonBuild, EnergonRequest, energon_batches
from harness.suite.adapters.world import Layout, rank_groups, run_world
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
    from harness.suite.adapters import qwen3vlstep

    ones = [qwen3vlstep.qwen3_vl_step(_model(qwen3vlstep), b, packing=True) for b in build.batches]

    def on_rank(_rank: int) -> list[step.StepRun]:
        groups = rank_groups()
        model = _model(qwen3vlstep)
        return [qwen3vlstep.qwen3_vl_step(model, b, packing=True, groups=groups) for b in build.batches]

    ranks = run_world(Layout(cp=cp), on_rank)
    for b, one in enumerate(ones):
        _compare(f"micro-batch {b}", one, [r[b] for r in ranks], cp)


def check_qwen3_step_under_dp_cp(req: EnergonRequest, layout: Layout) -> None:
    """Every rank of ``layout`` (DP x CP) reads its micro-batches from MB's Energon loader of ``req``
    (``data_parallel``: the rank's groups handed to the builder) and runs them through MB's Qwen3-VL
    step with in-batch packing; judged per replica against the CP = 1 step of its micro-batches."""
    from harness.suite.adapters import qwen3vlstep

    def on_rank(_rank: int) -> tuple[int, list[dict[str, Any]], list[step.StepRun]]:
        from megatron.core import parallel_state

        batches = energon_batches(req).batches
        groups = rank_groups()
        model = _model(qwen3vlstep)
        runs = [qwen3vlstep.qwen3_vl_step(model, b, packing=True, groups=groups) for b in batches]
        return parallel_state.get_data_parallel_rank(), batches, runs

    replicas: dict[int, list[tuple[list[dict[str, Any]], list[step.StepRun]]]] = {}
    for dp_rank, batches, runs in run_world(layout, on_rank):  # rank order: CP ranks in order within a replica
        replicas.setdefault(dp_rank, []).append((batches, runs))
    rows = {dp: [[row_tokens(b) for b in batches] for batches, _ in ranks] for dp, ranks in replicas.items()}
    check_replicas(rows, layout)
    for dp_rank, ranks in sorted(replicas.items()):
        batches = ranks[0][0]
        for b, batch in enumerate(batches):
            one = qwen3vlstep.qwen3_vl_step(_model(qwen3vlstep), batch, packing=True)
            where = f"data-parallel replica {dp_rank}, micro-batch {b}"
            _compare(where, one, [runs[b] for _, runs in ranks], layout.cp)


def row_tokens(batch: dict[str, Any]) -> list[tuple[int, ...]]:
    return [tuple(int(t) for t in r.tolist()) for r in batch["input_ids"]]


def check_replicas(rows: dict[int, list[list[list[tuple[int, ...]]]]], layout: Layout) -> None:
    """``rows``: data-parallel rank -> its CP ranks (in order) -> micro-batches -> rows of tokens. The CP
    ranks of a replica read the same samples; no two replicas read a sample alike."""
    if sorted(rows) != list(range(layout.dp)) or any(len(v) != layout.cp for v in rows.values()):
        got = {dp: len(v) for dp, v in rows.items()}
        raise fail(Impact.CRASH, f"a {layout} world has {layout.dp} replicas of {layout.cp} CP ranks: {got}")
    for dp_rank, cp_ranks in sorted(rows.items()):
        for cp_rank, read in enumerate(cp_ranks[1:], start=1):
            if read != cp_ranks[0]:
                raise fail(
                    Impact.WRONG_LOGITS,
                    f"data-parallel replica {dp_rank}: its CP ranks 0 and {cp_rank} read different samples, so "
                    "each CP rank computes its part of another sequence",
                )
    seen: dict[tuple[int, ...], int] = {}
    for dp_rank, cp_ranks in sorted(rows.items()):
        for row in {row for batch in cp_ranks[0] for row in batch}:
            if row in seen:
                raise fail(
                    Impact.WRONG_LOSS_NORMALISATION,
                    f"data-parallel replicas {seen[row]} and {dp_rank} read a sample alike: it trains twice a step",
                )
            seen[row] = dp_rank


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
