"""One epoch through MB's own loader builder, with the dataset config's ``drop_last`` as a user sets it.

The ``padding_loss_masks`` and ``data_loaders`` cases hand MB's batch sampler its ``drop_last``
directly. A user never does: they set ``drop_last`` on the dataset config (``DataloaderConfig``,
documented since 0.4.0 as "whether to drop the last incomplete batch"), and MB's
``build_train_valid_test_data_loaders`` decides what its sampler gets. So here each rank of a
data-parallel world runs that builder and MB's split into micro-batches
(:mod:`harness.suite.adapters.loaders`) until the loader is exhausted, with the config built in the
suite process (where the knob recorder sees it).

The contract, per epoch, over all data-parallel ranks (what ``drop_last`` documents, and what the
sampler cases hold the sampler to):

* every rank takes as many micro-batches (a rank short of one hangs the step's collectives);
* ``drop_last=False``: every packed row trains exactly once, and the padding that fills the last
  global batch (MB's negative indices) is as many rows as the batch lacks and trains nothing;
* ``drop_last=True``: only complete global batches train, each of their rows once, no padding.

The loader's own rules, each case proving one: ``drop_last=True`` needs at least one complete
global batch (:attr:`Rule.DROP_LAST_NEEDS_A_GLOBAL_BATCH`), and keeping the incomplete last batch
of a "batch" loader needs a dataset that turns MB's negative indices into padding rows, which only
the GPT SFT datasets do (:attr:`Rule.KEEP_LAST_NEEDS_SFT_PADDING`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from harness.records.impact import Impact, ImpactFailure, fail, require
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import config as config_ops
from harness.suite.adapters import directsft, loaders, rules
from harness.suite.adapters.directsft import DirectSFTRequest
from harness.suite.adapters.refusal import said
from harness.suite.adapters.rules import ConfigOutcome
from harness.suite.adapters.world import Layout, rank_groups, run_world
from harness.suite.oracle import differential
from suites import _dataparallel, _sftcases
from suites._explain import multiset_difference


@dataclass
class RankEpoch:
    """What one data-parallel rank got from MB's loader in one epoch, or how the builder refused."""

    rows: list[list[differential.PackedRow]] = field(default_factory=list)  # per micro-batch
    refused: ConfigOutcome | None = None  # config_ops.rejected's outcome
    fetched: list[int] = field(default_factory=list)  # the dataset indices the rank's loader read
    micro_batches: int = 0


class _Fetched:
    """``dataset`` as the loader sees it, noting every index read (``collate_fn`` and the rest are
    the dataset's own): which samples a rank trains, for datasets whose rows do not name them."""

    def __init__(self, dataset: Any, log: list[int]) -> None:
        self._dataset, self._log = dataset, log

    def __len__(self) -> int:
        return len(self._dataset)

    def __getitem__(self, index: int) -> Any:
        self._log.append(int(index))
        return self._dataset[index]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dataset, name)


def _on_rank(
    dataset: Any,
    dataset_config: Any,
    seq: int,
    seed: int,
    dp: int,
    mbs: int,
    gbs: int,
    steps: int | None = None,
) -> Callable[[int], RankEpoch]:
    def on_rank(_rank: int) -> RankEpoch:
        fetched: list[int] = []
        groups = rank_groups()
        model = config_ops.tiny_gpt_provider(seq, 1, 1, False, True)
        try:
            batches = loaders.train_micro_batches(
                _Fetched(dataset, fetched),
                model,
                seq_length=seq,
                seed=seed,
                global_batch_size=gbs,
                micro_batch_size=mbs,
                data_parallel_size=dp,
                steps=steps,
                dp_group=groups.dp,
                dataset_config=dataset_config,
            )
        except ImpactFailure:
            raise  # a contract broken on the rank (MB's loader ran out): reported with its impact, not a refusal
        except (ValueError, RuntimeError, AssertionError) as exc:
            return RankEpoch(refused=config_ops.rejected(exc))  # attributed here: the traceback stays
        rows = [batch_ops.packed_rows(b) for b in batches if "cu_seqlens" in b or "cu_seqlens_q" in b]
        return RankEpoch(rows=rows, fetched=fetched, micro_batches=len(batches))

    return on_rank


def epoch(
    seq: int, seed: int, dp: int, mbs: int, gbs: int, dataset_config: Any, dataset: Any, steps: int | None = None
) -> list[RankEpoch]:
    """Every data-parallel rank's epoch (or first ``steps`` steps) of MB's loader over ``dataset``."""
    return run_world(Layout(dp=dp), _on_rank(dataset, dataset_config, seq, seed, dp, mbs, gbs, steps))


def refusal(ranks: list[RankEpoch]) -> ConfigOutcome | None:
    """The builder's refusal, when every rank refused alike (one refusing alone is a hang)."""
    return rules.world_refusal([r.refused for r in ranks], "the loader")


def refused_failure(refused: ConfigOutcome, what: str) -> ImpactFailure:
    """A valid configuration the loader refused: MB's up-front check deciding (a finding,
    ``refuses-valid-config``, see :mod:`harness.suite.adapters.refusal`), or a crash anywhere else."""
    if refused.get("up_front"):
        return fail(
            Impact.REFUSES_VALID_CONFIG, said(refused["error_class"], refused["message"][:300], refused["up_front"])
        )
    return fail(Impact.CRASH, f"{what} {refused['error_class']}: {refused['message'][:300]}")


def require_refused_by(ranks: list[RankEpoch], rule: rules.Rule, what: str) -> dict[str, Any]:
    """Every rank's builder refused ``what`` by ``rule``'s own check (message and raising statement)."""
    return rules.require_world_refused_by([r.refused for r in ranks], rule, what, "MB's loader")


@dataclass(frozen=True)
class RowKey:
    """A packed row's training: the sequences begun before its last trained token, and its fields up
    to there (see :func:`_content`)."""

    starts: tuple[tuple[int, int], ...]  # (real, padded) start of each sequence
    tokens: tuple[int, ...]
    labels: tuple[int, ...]
    loss_mask: tuple[int, ...]
    position_ids: tuple[int, ...]

    @property
    def trains(self) -> bool:
        return bool(self.tokens)


def _content(row: differential.PackedRow) -> RowKey:
    """What names a packed row in any batch: everything up to its last trained token.

    The loader collates a rank's whole global batch at once, so a row comes padded to the widest
    row of that batch, its tail padding as one more sequence or its last one made longer; a row
    collated alone has neither. Nothing after the last trained token can change a trained token's
    logit (attention is causal) or the loss, so the row's training is its fields and sequence
    boundaries up to there; a row that trains nothing has none."""
    trained = [i for i, m in enumerate(row.loss_mask) if m]
    end = trained[-1] + 1 if trained else 0
    real = row.cu_seqlens_q or ()
    starts = tuple((q, p) for q, p in zip(real, row.cu_seqlens_q_padded or real) if p < end)  # sequences begun
    return RowKey(starts, row.tokens[:end], row.labels[:end], row.loss_mask[:end], row.position_ids[:end])


def check_epoch(case: _sftcases.SFTCase, dp: int, mbs: int, gbs: int, drop_last: bool) -> dict[str, Any]:
    """One epoch of ``case``'s packed rows through MB's loader with the SFT config's ``drop_last``,
    held to the contract of the module docstring (raises on a violation); what each rank trained."""
    b = _sftcases.built(case)
    ds = b.build.train
    config = loaders.make_dataset_config(seq_length=case.seq, seed=case.seed, drop_last=drop_last)
    ranks = epoch(case.seq, case.seed, dp, mbs, gbs, config, ds)
    refused = refusal(ranks)
    if refused is not None:
        raise fail(
            Impact.CRASH,
            f"drop_last={drop_last}, {len(ds)} rows, global batch {gbs}: the loader refused "
            f"({refused['error_class']}: {refused['message'][:300]})",
        )
    counts = [len(r.rows) for r in ranks]
    require(len(set(counts)) == 1, Impact.CRASH, f"every DP rank takes as many micro-batches: {counts}")
    # rows that train nothing (padding rows, and a packed row whose every token is masked) cannot be
    # told apart, and need not be: what they are trains nothing either way
    keys = [_content(row) for row in (_dataparallel.rows_of(ds, [i])[0] for i in range(len(ds)))]
    index = {key: i for i, key in enumerate(keys) if key.trains}
    if len(index) < sum(key.trains for key in keys):  # the case's data, not MB's: rows must be told apart
        raise RuntimeError(f"{case.id}: packed rows that train alike; the epoch cannot be matched to rows")
    seen = [_content(row) for r in ranks for micro in r.rows for row in micro]
    sampled = sorted(index[key] for key in seen if key in index)
    stray = [sum(key.loss_mask) for key in seen if key.trains and key not in index]
    require(
        not stray,
        Impact.TRAINS_PADDING,
        f"drop_last={drop_last}: rows that are none of the dataset's rows train {stray} tokens",
    )
    epoch_rows = -(-len(ds) // gbs) * gbs if not drop_last else len(ds) // gbs * gbs
    want = sorted(index.values()) if not drop_last else None
    if want is not None:
        require(
            sampled == want,
            Impact.DROPS_TRAINED_TOKEN if len(set(sampled)) < len(want) else Impact.WRONG_LOSS_NORMALISATION,
            "drop_last=False: across DP ranks every packed row that trains trains once per epoch: "
            + multiset_difference(want, sampled, "row"),
        )
    else:
        require(
            len(set(sampled)) == len(sampled),
            Impact.WRONG_LOSS_NORMALISATION,
            "drop_last=True: a row trained twice in one epoch: " + multiset_difference(set(sampled), sampled, "row"),
        )
    require(
        len(seen) == epoch_rows,
        Impact.DROPS_TRAINED_TOKEN if len(seen) < epoch_rows else Impact.WRONG_LOSS_NORMALISATION,
        f"drop_last={drop_last}: {len(ds)} rows in global batches of {gbs} make an epoch of {epoch_rows} rows "
        f"over the DP ranks (padding included), got {len(seen)}",
    )
    return {"rows": len(ds), "micro_batches_per_rank": counts[0], "untrained_rows": len(seen) - len(sampled)}


def check_keep_last_rule(req: DirectSFTRequest, dp: int, mbs: int, gbs: int, drop_last: bool) -> dict[str, Any]:
    """The direct Hugging Face SFT config with a "batch" loader over rows that leave an incomplete
    global batch: keeping it (``drop_last=False``) is refused by the rule naming the GPT SFT
    datasets (the direct dataset has no padding rows for MB's negative indices); dropping it is
    accepted, and every rank trains the complete global batches alike."""
    n = len(req.rows)
    if n % gbs == 0 or n < gbs:
        raise RuntimeError(f"{n} rows in global batches of {gbs}: the case needs an incomplete last batch")
    config, provider = directsft.user_config(
        replace(req, knobs={**req.knobs, **loaders.WORKERS_OFF, "dataloader_type": "batch", "drop_last": drop_last})
    )
    config = loaders.finalized(config)
    # MB's provider builds the split here, in the suite process: the ranks are daemonic processes,
    # where the Hugging Face datasets' map workers cannot start
    train, _valid, _test = provider([n, 0, 0], config)
    ranks = epoch(req.seq_length, 0, dp, mbs, gbs, config, train)
    if not drop_last:
        return require_refused_by(
            ranks,
            rules.Rule.KEEP_LAST_NEEDS_SFT_PADDING,
            f"a 'batch' loader keeping {n % gbs} rows of {n} without padding rows",
        )
    refused = refusal(ranks)
    if refused is not None:
        raise refused_failure(refused, f"drop_last=True over {n} rows: the loader refused")
    counts = [len(r.fetched) for r in ranks]
    want = n // gbs * gbs // dp
    require(
        counts == [want] * dp,
        Impact.DROPS_TRAINED_TOKEN if min(counts) < want else Impact.WRONG_LOSS_NORMALISATION,
        f"drop_last=True: every DP rank trains {want} rows of the complete global batches, got {counts}",
    )
    return {"rows_per_rank": want}


def check_sampled(
    dataset: Any, dataset_config: Any, *, seq: int, dp: int, mbs: int, gbs: int, steps: int
) -> dict[str, Any]:
    """``steps`` training steps of MB's loader over a split MB sized to them (``steps x gbs``
    samples, as MB's setup asks its providers for ``train_iters x global batch``), on every rank
    of a data-parallel world, the dataset config's ``drop_last`` as the user set it: the epoch is
    whole global batches, so the ranks take as many micro-batches of ``mbs`` samples and, between
    them, every sample exactly once, whichever ``drop_last`` (it has nothing to drop)."""
    ranks = epoch(seq, 0, dp, mbs, gbs, dataset_config, dataset, steps)
    refused = refusal(ranks)
    if refused is not None:
        raise refused_failure(refused, "MB's loader raised")
    counts = [r.micro_batches for r in ranks]
    want = steps * gbs // (dp * mbs)
    require(counts == [want] * dp, Impact.CRASH, f"every DP rank takes {want} micro-batches in {steps} steps: {counts}")
    fetched = sorted(i for r in ranks for i in r.fetched)
    whole = list(range(steps * gbs))
    require(
        fetched == whole,
        Impact.DROPS_TRAINED_TOKEN if set(fetched) != set(whole) else Impact.WRONG_LOSS_NORMALISATION,
        f"{steps} steps over {len(dataset)} samples read every sample once across the DP ranks: "
        + multiset_difference(whole, fetched, "sample"),
    )
    return {"samples": len(dataset), "micro_batches_per_rank": want, "per_rank": [len(r.fetched) for r in ranks]}
