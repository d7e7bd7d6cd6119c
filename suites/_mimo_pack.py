"""MegatronMIMO step-time in-batch packing held to MB's own unpacked MIMO step, rank by rank.

MB's MIMO step packs in the forward step, after each module's data-parallel slice (dataset config
``enable_in_batch_packing`` with ``defer_in_batch_packing_to_step``; feature ``mimo-step-packing``):
each language shard's rows are concatenated into one THD sequence of their real tokens, a row's
real length taken from the batch's ``attention_mask`` (never from the loss mask: MB's docstring),
and the model gets ``packing_kwargs`` (``cu_seqlens`` and ``max_seqlen`` for block-diagonal
attention). The reference is the same world without packing, at the same commit: the same
micro-batches through the same step, each rank's unpacked rows.

Per language rank and micro-batch, with ``n_r`` the real length of row ``r`` of the unpacked batch:

* ``input_ids``, ``labels``, ``loss_mask`` and ``position_ids`` handed to the model are the
  concatenation of every unpacked row's first ``n_r`` positions (``wrong-targets``,
  ``trains-padding`` / ``drops-trained-token``, ``wrong-logits`` for positions: each sample's
  positions restart at its segment);
* no position past ``n_r`` trains in the unpacked row (it could not be packed:
  ``drops-trained-token``);
* ``cu_seqlens_q``/``_kv`` are ``0, n_0, n_0+n_1, ...`` as int32 and the padded ones equal them (the
  pack is tight; a wrong boundary lets a token attend to another sample: ``cross-document-attention``),
  ``max_seqlen`` is the longest segment (``wrong-logits``: the kernel is told a shorter one);
* MB's loss function on the packed mask counts that mask's tokens (suites/_mimo_dp.check_loss_totals),
  and the step trains as many tokens as the unpacked one (``wrong-loss-normalisation``);
* the encoder ranks get what they get unpacked (packing is the language module's).

Not judged: host reads. The step builds the pack on the host from the lengths by design (its
docstring), so the packed step is not held to the unpacked path's zero reads.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.adapters import mimostep
from harness.errors import Untestable
from harness.oracle.impact import Impact, fail, require
from suites._mimo_dp import LANGUAGE, check_loss_totals

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


def _expected(unpacked: dict[str, Any], name: str, lengths: list[int]) -> torch.Tensor | None:
    value = unpacked.get(name)
    if value is None:
        return None
    return torch.cat([value[r, :n] for r, n in enumerate(lengths)]).unsqueeze(0)


def _check_micro_batch(where: str, unpacked: dict[str, Any], packed: dict[str, Any]) -> int:
    """One micro-batch of one language rank (raises on a violation); the tokens it trains."""
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
    for name, impact in _FIELDS:
        want, got = _expected(unpacked, name, lengths), packed.get(name)
        if want is None:
            continue
        if got is None or tuple(got.shape) != tuple(want.shape):
            shape = None if got is None else tuple(got.shape)
            shorter = got is not None and got.numel() < want.numel()
            raise fail(
                Impact.DROPS_TRAINED_TOKEN if shorter and name != "position_ids" else impact or Impact.CRASH,
                f"{where}: packed {name} of shape {shape}, the rows' real tokens make {tuple(want.shape)} "
                f"(segment lengths {lengths} from the batch's attention_mask)",
            )
        if torch.equal(got.to(want.dtype), want):
            continue
        diff = (got.to(want.dtype) != want).nonzero()
        at = int(diff[0][-1])
        if impact is None:
            more = float(got.sum()) > float(want.sum())
            impact = Impact.TRAINS_PADDING if more else Impact.DROPS_TRAINED_TOKEN
        raise fail(
            impact,
            f"{where}: packed {name} differs from the unpacked rows' real tokens at packed position {at} "
            f"({int(diff.shape[0])} position(s)); segment lengths {lengths}",
        )
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    for key in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        got = kwargs.get(key)
        require(
            got is not None and got.dtype == torch.int32 and got.tolist() == bounds,
            Impact.CROSS_DOCUMENT_ATTENTION,
            f"{where}: {key} {None if got is None else (str(got.dtype), got.tolist())}, the segments' "
            f"boundaries are int32 {bounds}",
        )
    for key in ("max_seqlen_q", "max_seqlen_kv"):
        got = kwargs.get(key)
        require(
            got is not None and int(got) == max(lengths),
            Impact.WRONG_LOGITS,
            f"{where}: {key} {got}, the longest segment has {max(lengths)} tokens",
        )
    return int(loss_mask.sum()) if loss_mask is not None else 0


def check(unpacked: list[Any], packed: list[Any]) -> dict[str, Any]:
    """The contract of the module docstring over two worlds of the same layout (raises on a violation);
    what the packed step trained per language rank and micro-batch (change detection)."""
    refused = [r for r in unpacked + packed if not isinstance(r, mimostep.ModuleRank)]
    if refused:
        raise fail(Impact.REFUSES_VALID_CONFIG, f"MB refused the layout: {refused[0].outcome['message'][:300]}")
    plain, packs = _by_rank(unpacked, LANGUAGE), _by_rank(packed, LANGUAGE)
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
            counts.append(_check_micro_batch(f"micro-batch {b} on language rank {dp}", u, p))
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
                _same(u.get("modality_inputs"), p.get("modality_inputs")),
                Impact.WRONG_LOGITS,
                f"micro-batch {b} on encoder rank {enc.dp_rank}: packing the language shard changed what the "
                "encoder gets",
            )
    return {"trained": trained}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b
