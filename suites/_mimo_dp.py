"""MegatronMIMO under data parallelism: each module's ranks, and the text and image of a sample kept together.

MB's MIMO training gives every data-loading rank the same global micro-batches (its sampler runs
with data-parallel size 1) and slices each, in the forward step, for the rank's place in its own
module's data-parallel group (``slice_batch_for_megatron_mimo``: contiguous, "to match the
BridgeCommunicator's batch-dimension split / concatenate logic"). Modules may have different
data-parallel sizes (one divides the other); the communicator concatenates the encoder ranks'
outputs in their group's order and splits the result the same way among the language ranks. So a
sample's image embeddings reach the language rank holding its text only when both modules slice
the same global rows in the same order.

The contract, over ``steps`` steps of a heterogeneous world (the encoder's ranks, then the
language module's; :mod:`harness.suite.adapters.mimostep`), each checked per micro-batch:

* every rank of every module takes the same number of micro-batches (one short hangs the pipeline);
* a module's ranks, concatenated in their data-parallel order, hold whole samples as the provider
  built them: the language ranks the text with its labels and loss mask (``wrong-targets``,
  ``trains-padding``), the encoder ranks the image;
* position by position, the encoder's concatenation is the images of the language's texts
  (``wrong-logits``: another sample's image embeddings fill a text's placeholders);
* over the steps the language ranks train every sample exactly once (``drops-trained-token``,
  ``wrong-loss-normalisation``).

MB's own rule, proved by one case breaking only it: the micro-batch size must be divisible by
every module's data-parallel size (:attr:`Rule.MIMO_MICRO_BATCH_DIVISIBLE_BY_MODULE_DP`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.records.impact import Impact, ImpactFailure, fail, require
from harness.suite.adapters import config as config_ops
from harness.suite.adapters import hostsync, mimo, mimoloader, mimostep, rules
from harness.suite.adapters.rules import ConfigOutcome
from harness.suite.adapters.world import Layout, run_world
from suites._explain import multiset_difference
from suites._mimo import ENCODER, pixels

LANGUAGE = "language"  # megatron-core's MIMO_LANGUAGE_MODULE_KEY in every era the step exists


@dataclass
class _Refused:
    """A rank where MB's MIMO path refused the layout (picklable): its attributed outcome."""

    outcome: ConfigOutcome


def _on_rank(built: mimo.MimoSamples, step_args: dict[str, Any]) -> Any:
    """Each rank's call of :data:`mimostep.mimo_step_inputs` with ``step_args``, a refusal attributed there."""

    def on_rank(_rank: int) -> mimostep.ModuleRank | _Refused:
        try:
            return mimostep.mimo_step_inputs(built.provider, **step_args)
        except ImpactFailure:
            raise  # a contract broken on the rank: the world reports it with its impact
        except (ValueError, AssertionError) as exc:
            return _Refused(config_ops.rejected(exc))  # attributed here, where the traceback is

    return on_rank


def world(
    built: mimo.MimoSamples,
    modules: dict[str, int],
    *,
    seq: int,
    mbs: int,
    gbs: int,
    steps: int,
    pack: bool = False,
    cp: dict[str, int] | None = None,
) -> list[mimostep.ModuleRank | _Refused]:
    """Every rank's record of MB's MIMO forward steps, the modules tiling a world in ``modules``' order
    (``pack``: with MB's step-time in-batch packing asked for, suites/_mimo_pack.py; ``cp``: a module's
    context-parallel size, its replicas then span that many ranks each)."""
    _ = mimostep.mimo_step_inputs.era  # untestable here, before a world starts, where MB has no such step
    mimostep.step_packing(pack)  # likewise where MB's step cannot pack
    step_args = {
        "modules": modules,
        "seq_length": seq,
        "micro_batch_size": mbs,
        "global_batch_size": gbs,
        "steps": steps,
        "pack": pack,
        "context_parallel": cp,
    }
    return run_world(Layout(dp=mimoloader.world_size(modules, cp)), _on_rank(built, step_args))


def replicas(ranks: list[mimostep.ModuleRank]) -> list[mimostep.ModuleRank]:
    """The first context-parallel rank of every module replica, after checking that the replica's other
    CP ranks got exactly what it got: megatron-core's MIMO model partitions the sequence among a
    replica's CP ranks after MB's step, so a CP rank holding other rows would attend across another
    sample's chunks (``wrong-logits``)."""
    first = {(r.modules, r.dp_rank): r for r in ranks if r.cp_rank == 0}
    for r in ranks:
        if r.cp_rank == 0:
            continue
        ref = first.get((r.modules, r.dp_rank))
        require(ref is not None, Impact.CRASH, f"{', '.join(r.modules)} dp rank {r.dp_rank}: no CP rank 0")
        assert ref is not None
        same = len(r.inputs) == len(ref.inputs) and all(
            same_inputs(a, b) for a, b in zip(r.inputs, ref.inputs, strict=True)
        )
        require(
            same,
            Impact.WRONG_LOGITS,
            f"{', '.join(r.modules)} dp rank {r.dp_rank}: CP rank {r.cp_rank} got other inputs than CP rank 0 of "
            "its replica, among which the model partitions one sequence",
        )
    return [r for r in ranks if r.cp_rank == 0]


def same_inputs(a: Any, b: Any) -> bool:
    """Two recorded model inputs (tensors, dicts of them, plain values) are equal."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_inputs(a[k], b[k]) for k in a)
    return bool(a == b)


def require_refused(ranks: list[mimostep.ModuleRank | _Refused], what: str) -> dict[str, Any]:
    """Every rank refused ``what`` by MB's check of the micro-batch against the modules' DP sizes."""
    outcomes = [r.outcome if isinstance(r, _Refused) else None for r in ranks]
    rule = rules.Rule.MIMO_MICRO_BATCH_DIVISIBLE_BY_MODULE_DP
    return rules.require_world_refused_by(outcomes, rule, what, "MB's MIMO path")


def _views(
    ranks: list[mimostep.ModuleRank], module: str, per_batch: int, row: Callable[[dict[str, Any], int], Any]
) -> list[list[Any]]:
    """Per micro-batch, ``row`` of every row of ``module``'s ranks, concatenated in data-parallel order."""
    mine = sorted((r for r in ranks if module in r.modules), key=lambda r: r.dp_rank)
    counts = [len(r.inputs) for r in mine]
    require(
        counts == [per_batch] * len(mine),
        Impact.CRASH,
        f"{module} ranks take {per_batch} micro-batches each, got {counts}",
    )
    require(
        [r.dp_rank for r in mine] == list(range(len(mine))),
        Impact.CRASH,
        f"{module}: data-parallel ranks {[r.dp_rank for r in mine]}",
    )
    out = []
    for b in range(per_batch):
        rows = []
        for r in mine:
            kwargs = r.inputs[b]
            own = kwargs.get("input_ids") if module == LANGUAGE else (kwargs.get("modality_inputs") or {}).get(module)
            if own is None:
                raise fail(Impact.CRASH, f"micro-batch {b}: {module} rank {r.dp_rank} got no input of its module")
            width = int((own if module == LANGUAGE else own["pixel_values"]).shape[0])
            rows += [row(kwargs, k) for k in range(width)]
        out.append(rows)
    return out


def check_world(
    built: mimo.MimoSamples, ranks: list[mimostep.ModuleRank | _Refused], *, mbs: int, gbs: int, steps: int
) -> dict[str, Any]:
    """A layout whose micro-batch divides among every module's ranks: MB takes it, and :func:`check` holds."""
    refused = [r.outcome for r in ranks if isinstance(r, _Refused)]
    if refused:
        raise fail(Impact.REFUSES_VALID_CONFIG, f"MB refused micro-batches of {mbs}: {refused[0]['message'][:300]}")
    return check(built, [r for r in ranks if isinstance(r, mimostep.ModuleRank)], mbs=mbs, gbs=gbs, steps=steps)


def check_loss_totals(ranks: list[mimostep.ModuleRank]) -> None:
    """On every rank of the language module's last stage, each micro-batch's loss totals are MB's
    own sum of the per-token loss over the loss mask the model was handed, and that mask's tokens:
    the loss is normalised by the tokens this rank trains (``wrong-loss-normalisation``)."""
    for r in ranks:
        if LANGUAGE not in r.modules:
            continue
        for b, (kwargs, totals) in enumerate(zip(r.inputs, r.totals, strict=False)):
            mask = kwargs.get("loss_mask")
            if totals is None or mask is None:
                continue
            per_token = mimostep.per_token_loss(tuple(kwargs["labels"].shape)).view(-1)
            flat = mask.reshape(-1).float()
            want = (float((per_token * flat).sum()), int(flat.sum()))
            loss, tokens = totals
            require(
                tokens == want[1] and abs(loss - want[0]) <= 1e-4 * max(1.0, abs(want[0])),
                Impact.WRONG_LOSS_NORMALISATION,
                f"micro-batch {b} on language rank {r.dp_rank}: MB's loss function gives (loss {loss:g}, "
                f"{tokens} tokens), the rank's {want[1]} trained tokens give (loss {want[0]:g}, {want[1]} tokens)",
            )


def check_host_reads(ranks: list[mimostep.ModuleRank]) -> None:
    """MB's MIMO step and loss function read no device tensor back on the host on any rank: each
    read stalls every micro-batch (``perf-contract``; harness.suite.adapters.hostsync counts them)."""
    for r in ranks:
        require(
            not r.host_reads,
            Impact.PERF_CONTRACT,
            f"the MIMO step on the rank of {', '.join(r.modules)} (dp rank {r.dp_rank}) reads device tensors "
            f"back on the host every micro-batch: {hostsync.describe(r.host_reads)}",
        )


def check(
    built: mimo.MimoSamples, ranks: list[mimostep.ModuleRank], *, mbs: int, gbs: int, steps: int
) -> dict[str, Any]:
    """The contract of the module docstring over ``ranks`` (raises on a violation); what trained where."""
    everyone, ranks = ranks, replicas(ranks)
    samples = built.samples
    by_text = {tuple(s["input_ids"].tolist()): i for i, s in enumerate(samples)}
    by_image = {pixels(s): i for i, s in enumerate(samples)}
    if len(by_text) < len(samples) or len(by_image) < len(samples):  # the case's data, not MB's
        raise RuntimeError(
            f"{len(samples)} samples, {len(by_text)} texts, {len(by_image)} images: rows cannot be told apart"
        )
    per_batch = steps * gbs // mbs

    def text_row(kwargs: dict[str, Any], k: int) -> int:
        ids = tuple(kwargs["input_ids"][k].tolist())
        i = by_text.get(ids)
        if i is None:
            raise fail(Impact.WRONG_TARGETS, f"a language row that is none of the provider's texts ({ids[:8]}...)")
        for name, impact in (("labels", Impact.WRONG_TARGETS), ("loss_mask", Impact.TRAINS_PADDING)):
            got = kwargs.get(name)
            require(got is not None, Impact.CRASH, f"sample {i}: the language module's last stage got no {name}")
            assert got is not None  # for the type checker: require raised otherwise
            require(
                got[k].tolist() == samples[i][name].tolist(),
                impact,
                f"sample {i} on a language rank: {name} differ from the sample MB built",
            )
        return i

    def image_row(kwargs: dict[str, Any], k: int) -> int:
        i = by_image.get(pixels(kwargs, k))
        if i is None:
            raise fail(Impact.WRONG_LOGITS, "an encoder row that is none of the provider's images")
        return i

    texts = _views(ranks, LANGUAGE, per_batch, text_row)
    images = _views(ranks, ENCODER, per_batch, image_row)
    check_loss_totals(everyone)
    check_host_reads(everyone)
    for b, (t, v) in enumerate(zip(texts, images, strict=True)):
        require(len(t) == mbs, Impact.CRASH, f"micro-batch {b}: the language ranks hold {len(t)} rows, not {mbs}")
        require(len(v) == mbs, Impact.CRASH, f"micro-batch {b}: the encoder ranks hold {len(v)} rows, not {mbs}")
        for j, (a, c) in enumerate(zip(t, v, strict=True)):
            require(
                a == c,
                Impact.WRONG_LOGITS,
                f"micro-batch {b} row {j}: the text of sample {a} gets the image embeddings of sample {c}",
            )
    seen = [i for rows in texts for i in rows]
    whole = list(range(len(samples)))
    require(
        sorted(seen) == whole,
        Impact.DROPS_TRAINED_TOKEN if set(seen) != set(whole) else Impact.WRONG_LOSS_NORMALISATION,
        f"{steps} steps over the language ranks train every sample once: " + multiset_difference(whole, seen, "sample"),
    )
    return {
        "micro_batches": per_batch,
        "order": texts,
    }
