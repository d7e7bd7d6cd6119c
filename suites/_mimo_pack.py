"""MegatronMIMO step-time in-batch packing held to MB's own unpacked MIMO step, rank by rank.

MB's MIMO step packs in the forward step, after each module's data-parallel slice (dataset config
``enable_in_batch_packing`` with ``defer_in_batch_packing_to_step``; feature ``mimo-step-packing``):
each language shard's rows are concatenated into one THD sequence of their real tokens, a row's
real length taken from the batch's ``attention_mask`` (never from the loss mask: MB's docstring),
and the model gets ``packing_kwargs`` (``cu_seqlens`` and ``max_seqlen`` for block-diagonal
attention). The reference is the same world without packing, at the same commit: the same
micro-batches through the same step, each rank's unpacked rows.

Per language replica and micro-batch, with ``n_r`` the real length of row ``r`` of the unpacked batch
and ``p_r`` the start of its segment in the packed stream (``cu_seqlens_q_padded``):

* ``input_ids``, ``labels``, ``loss_mask`` and ``position_ids`` handed to the model hold every
  unpacked row's first ``n_r`` positions at ``p_r`` (``wrong-targets``, ``trains-padding`` /
  ``drops-trained-token``, ``wrong-logits`` for positions: each sample's positions restart at its
  segment), and a segment's padding past its ``n_r`` never trains;
* no position past ``n_r`` trains in the unpacked row (it could not be packed:
  ``drops-trained-token``);
* ``cu_seqlens_q``/``_kv`` are ``0, n_0, n_0+n_1, ...`` as int32, the padded ones hold each segment's
  real tokens (a wrong boundary lets a token attend to another sample: ``cross-document-attention``),
  ``max_seqlen`` is the longest padded segment (``wrong-logits``: the kernel is told a shorter one);
* under context parallelism (the language module's CP > 1) every CP rank of a replica gets the same
  pack, and the padded boundaries split as megatron-core's MIMO model splits the stream among them
  (``PartitionAdapter`` -> TE's ``thd_get_partitioned_indices`` over ``cu_seqlens_q_padded``, on CPU
  the named stand-in :mod:`harness.suite.standins.thd_partition`): every boundary on ``2*CP``, MB's own
  documented CP multiple (``docs/training/packed-sequences.md``), each position on one rank. TE
  asserts it, so a pack off it is ``crash`` (as the GPT layouts' alignment invariant);
* MB's loss function on the packed mask counts that mask's tokens (suites/_mimo_dp.check_loss_totals),
  and the step trains as many tokens as the unpacked one (``wrong-loss-normalisation``);
* the encoder ranks get what they get unpacked (packing is the language module's).

Not judged: host reads. The step builds the pack on the host from the lengths by design (its
docstring), so the packed step is not held to the unpacked path's zero reads.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from harness.errors import Untestable
from harness.records.impact import Impact, fail, require
from harness.suite.adapters import mimostep
from harness.suite.standins import thd_partition
from suites._mimo_dp import LANGUAGE, check_loss_totals, replicas, same_inputs

_FIELDS = (
    ("input_ids", Impact.WRONG_TARGETS),
    ("labels", Impact.WRONG_TARGETS),
    ("loss_mask", None),  # trains-padding or drops-trained-token, by which way it differs
    ("position_ids", Impact.WRONG_LOGITS),
)


def available() -> bool:
    """Whether this MB's MIMO step packs (ledger feature ``mimo-step-packing``)."""
    try:
        mimostep.step_packing(True)
    except Untestable:
        return False
    return True


def _by_rank(ranks: list[Any], module: str) -> dict[int, mimostep.ModuleRank]:
    mine = [r for r in ranks if isinstance(r, mimostep.ModuleRank) and module in r.modules]
    return {r.dp_rank: r for r in mine}


def _padded(kwargs: dict[str, Any], bounds: list[int]) -> list[int]:
    """The packed stream's segment starts: MB's padded boundaries where it sets them, else the real ones."""
    got = kwargs.get("cu_seqlens_q_padded")
    return bounds if got is None else [int(x) for x in got.reshape(-1).tolist()]


def _check_segments_hold(where: str, padded: list[int], lengths: list[int]) -> None:
    """The packed stream's padded segments hold their rows' real tokens, one segment per row (checked
    before any field is read at those segments: a segment cut short drops its row's last tokens)."""
    require(
        len(padded) == len(lengths) + 1
        and padded[0] == 0
        and all(b - a >= n for a, b, n in zip(padded, padded[1:], lengths, strict=False)),
        Impact.DROPS_TRAINED_TOKEN,
        f"{where}: the pack's segments {padded} do not hold rows of {lengths} real tokens (segment lengths "
        "from the batch's attention_mask)",
    )


def _check_alignment(where: str, padded: list[int], lengths: list[int], cp: int) -> None:
    """Under CP, the packed stream splits as megatron-core's MIMO model splits it:
    ``tex.thd_get_partitioned_indices`` over ``cu_seqlens_q_padded``, which needs every padded boundary
    on ``2*CP`` (TE asserts it; the split is not defined off it)."""
    if cp == 1:
        return
    total = padded[-1]
    try:
        held = torch.cat([thd_partition.thd_partitioned_indices(torch.tensor(padded), total, cp, r) for r in range(cp)])
    except thd_partition.PartitionRefused as exc:
        raise fail(
            Impact.CRASH,
            f"{where}: under CP {cp} the model splits the packed stream among the replica's CP ranks by "
            f"cu_seqlens_q_padded, which must sit on 2*CP = {2 * cp} (TE's THD partition): {exc} (segments of "
            f"{lengths} real tokens, not padded for CP)",
        ) from None
    require(
        sorted(held.tolist()) == list(range(total)),
        Impact.DROPS_TRAINED_TOKEN,
        f"{where}: the CP ranks' parts of the packed stream (boundaries {padded}) do not hold each position once",
    )


def _check_field(
    where: str,
    name: str,
    impact: Impact | None,
    want_rows: torch.Tensor,
    got: Any,
    padded: list[int],
    lengths: list[int],
) -> None:
    """One packed field: each segment's real positions are its unpacked row's first ``n`` (raises)."""
    total = padded[-1]
    if got is None or tuple(got.shape) != (1, total):
        shape = None if got is None else tuple(got.shape)
        shorter = got is not None and got.numel() < total
        raise fail(
            Impact.DROPS_TRAINED_TOKEN if shorter and name != "position_ids" else impact or Impact.CRASH,
            f"{where}: packed {name} of shape {shape}, the rows' real tokens make (1, {total}) "
            f"(segment lengths {lengths} from the batch's attention_mask)",
        )
    real = torch.cat([torch.arange(a, a + n) for a, n in zip(padded, lengths, strict=False)])
    want = torch.cat([want_rows[r, :n] for r, n in enumerate(lengths)])
    have = got[0, real].to(want.dtype)
    if name == "loss_mask":  # positions a segment pads with never train
        gaps = torch.ones(total, dtype=torch.bool)
        gaps[real] = False
        extra = float(got[0, gaps].sum())
        require(extra == 0, Impact.TRAINS_PADDING, f"{where}: {extra:g} padding position(s) of the pack train")
    if torch.equal(have, want):
        return
    diff = (have != want).nonzero()
    at = int(real[int(diff[0][-1])])
    if impact is None:
        impact = Impact.TRAINS_PADDING if float(have.sum()) > float(want.sum()) else Impact.DROPS_TRAINED_TOKEN
    raise fail(
        impact,
        f"{where}: packed {name} differs from the unpacked rows' real tokens at packed position {at} "
        f"({int(diff.shape[0])} position(s)); segment lengths {lengths}",
    )


def _check_micro_batch(where: str, unpacked: dict[str, Any], packed: dict[str, Any], cp: int) -> int:
    """One micro-batch of one language replica (raises on a violation); the tokens it trains."""
    mask = unpacked.get("attention_mask")
    if mask is None or mask.dim() != 2:
        raise RuntimeError(f"{where}: the unpacked step handed the model no [batch, seq] attention_mask")
    lengths = [int(n) for n in mask.to(torch.bool).sum(dim=1)]
    kwargs = packed.get("packing_kwargs")
    require(
        kwargs is not None,
        Impact.PERF_CONTRACT,
        f"{where}: step-time packing asked for, the model got padded rows and no packing_kwargs",
    )
    assert kwargs is not None
    loss_mask = unpacked.get("loss_mask")
    if loss_mask is not None:
        for r, n in enumerate(lengths):
            past = int(loss_mask[r, n:].sum())
            require(
                past == 0,
                Impact.DROPS_TRAINED_TOKEN,
                f"{where}: row {r} trains {past} position(s) past its {n} real tokens (attention_mask), which "
                "the pack leaves out",
            )
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    padded = _padded(kwargs, bounds)
    _check_segments_hold(where, padded, lengths)
    for name, impact in _FIELDS:
        if unpacked.get(name) is not None:
            _check_field(where, name, impact, unpacked[name], packed.get(name), padded, lengths)
    for key, want in (("cu_seqlens_q", bounds), ("cu_seqlens_kv", bounds), ("cu_seqlens_kv_padded", padded)):
        got = kwargs.get(key)
        require(
            got is not None and got.dtype == torch.int32 and got.tolist() == want,
            Impact.CROSS_DOCUMENT_ATTENTION,
            f"{where}: {key} {None if got is None else (str(got.dtype), got.tolist())}, the segments' "
            f"boundaries are int32 {want}",
        )
    _check_alignment(where, padded, lengths, cp)
    longest = max(b - a for a, b in itertools.pairwise(padded))
    for key in ("max_seqlen_q", "max_seqlen_kv"):
        got = kwargs.get(key)
        require(
            got is not None and int(got) == longest,
            Impact.WRONG_LOGITS,
            f"{where}: {key} {got}, the longest (padded) segment has {longest} tokens",
        )
    return int(loss_mask.sum()) if loss_mask is not None else 0


def check(unpacked: list[Any], packed: list[Any]) -> dict[str, Any]:
    """The contract of the module docstring over two worlds of the same layout (raises on a violation);
    what the packed step trained per language rank and micro-batch (change detection)."""
    refused = [r for r in unpacked + packed if not isinstance(r, mimostep.ModuleRank)]
    if refused:
        raise fail(Impact.REFUSES_VALID_CONFIG, f"MB refused the layout: {refused[0].outcome['message'][:300]}")
    plain = _by_rank(replicas([r for r in unpacked if isinstance(r, mimostep.ModuleRank)]), LANGUAGE)
    packs = _by_rank(replicas([r for r in packed if isinstance(r, mimostep.ModuleRank)]), LANGUAGE)
    require(sorted(plain) == sorted(packs), Impact.CRASH, f"language ranks {sorted(packs)} packed, {sorted(plain)} not")
    trained: dict[str, list[int]] = {}
    for dp, ref in sorted(plain.items()):
        got = packs[dp]
        require(
            len(got.inputs) == len(ref.inputs),
            Impact.CRASH,
            f"language rank {dp} takes {len(got.inputs)} packed micro-batches, {len(ref.inputs)} unpacked",
        )
        counts = []
        for b, (u, p) in enumerate(zip(ref.inputs, got.inputs, strict=True)):
            counts.append(_check_micro_batch(f"micro-batch {b} on language rank {dp}", u, p, got.cp_size))
        for b, (plain_totals, packed_totals) in enumerate(zip(ref.totals, got.totals, strict=True)):
            if plain_totals is not None and packed_totals is not None:
                require(
                    plain_totals[1] == packed_totals[1],
                    Impact.WRONG_LOSS_NORMALISATION,
                    f"micro-batch {b} on language rank {dp}: MB's loss counts {packed_totals[1]} tokens packed, "
                    f"{plain_totals[1]} unpacked",
                )
        trained[str(dp)] = counts
    check_loss_totals([r for r in packed if isinstance(r, mimostep.ModuleRank)])
    encoders = {(r.modules, r.dp_rank): r for r in unpacked if isinstance(r, mimostep.ModuleRank)}
    for enc in (r for r in packed if isinstance(r, mimostep.ModuleRank) and LANGUAGE not in r.modules):
        ref = encoders[(enc.modules, enc.dp_rank)]
        for b, (u, p) in enumerate(zip(ref.inputs, enc.inputs, strict=True)):
            require(
                same_inputs(u.get("modality_inputs"), p.get("modality_inputs")),
                Impact.WRONG_LOGITS,
                f"micro-batch {b} on encoder rank {enc.dp_rank}: packing the language shard changed what the "
                "encoder gets",
            )
    return {"trained": trained}
