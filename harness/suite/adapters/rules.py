"""Which of MB's documented rules refused a configuration (or an input): attribution, not any raise.

A rule case proves its rule only when the rejection comes from that rule. Counting any exception
as the rule's rejection lets a rule vanish unnoticed: delete MB's offline/in-batch exclusivity
and the same config is still refused, by the micro-batch rule. So a rejection is attributed:

* by its message, against each rule's signature (the phrases MB's message for that rule has
  carried in every era, checked against the releases and main: ``git log -S`` on
  ``training/config.py``);
* and by the raising frame: the innermost frame of the exception inside Megatron-Bridge's own
  files must be an explicit ``raise`` or ``assert`` (a documented check), not torch or Python
  failing somewhere inside a call (an ``IndexError`` from a shape that happened not to fit).

The frame found (``file:line``) is kept in the outcome, so a report names the code that refused.
"""

from __future__ import annotations

import enum
import linecache
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict


class ConfigOutcome(TypedDict):
    """What MB did with a configuration: accepted, or refused by whom, where and with what message.

    ``rules`` and ``raised_at`` say who refused (the documented rules the message names, MB's raising
    statement), so a case proves its own rule, not any raise. The optional keys are what a stage
    adds on acceptance (the packing multiple it chose, what finalisation left on the model).
    """

    accepted: bool
    error_class: str | None
    message: str
    rules: list[str]
    raised_at: str | None
    up_front: NotRequired[str | None]  # a gate's check before any batch (harness.suite.adapters.refusal)
    multiple: NotRequired[int | None]
    seq_length_rule: NotRequired[bool]
    variable_seq_lengths: NotRequired[object]


class Rule(enum.StrEnum):
    """The packing rules of ``ConfigContainer.validate`` (and the stages that enforced them earlier)."""

    CP_SEQ_DIVISIBLE = "cp-seq-length-divisible-by-2cp"
    CP_FINETUNE_PER_TOKEN_LOSS = "cp-finetune-per-token-loss"
    CP_FINETUNE_NO_AVERAGE_IN_COLLECTIVE = "cp-finetune-no-average-in-collective"
    OFFLINE_MICRO_BATCH_1 = "offline-packing-micro-batch-1"
    IN_BATCH_MICRO_BATCH_OVER_1 = "in-batch-packing-micro-batch-over-1"
    OFFLINE_IN_BATCH_EXCLUSIVE = "offline-in-batch-exclusive"
    PAD_CU_SEQLENS_NEEDS_PAD_TO_MAX = "pad-cu-seqlens-needs-pad-to-max-length"
    SEQ_DIVISIBLE_BY_COLLATE_MULTIPLE = "seq-length-divisible-by-collate-multiple"
    NAMED_PACKED_FILE_EXISTS = "named-packed-file-must-exist"  # PackedSequenceSpecs.packed_*_path
    EOD_MASK_LOSS_DEFINED = "eod-mask-loss-must-be-defined"  # GPTDatasetConfig: EOD's loss policy stated
    PACK_SIZE_POSITIVE = "offline-pack-size-positive"  # offline packing specs that pack nothing (2026 configs)
    OFFLINE_FLAG_NEEDS_SPECS = "offline-flag-needs-specs"  # enable_offline_packing without PackedSequenceSpecs
    OFFLINE_SPECS_NEED_FLAG = "offline-specs-need-flag"  # PackedSequenceSpecs with enable_offline_packing off
    MODEL_DATASET_SEQ_LENGTH_MATCH = "model-and-dataset-seq-length-match"
    # offline packing under CUDA graphs: captured graphs need static shapes (e4cb868dc, 2026-08-06)
    CUDA_GRAPHS_NEED_PAD_TO_MAX = "offline-cuda-graphs-need-pad-to-max-length"
    CUDA_GRAPHS_NEED_PAD_CU_SEQLENS = "packed-attention-cuda-graphs-need-pad-cu-seqlens"
    # MB's loader builder (data/loaders.py) and its global-batch sampler, not ConfigContainer.validate
    DROP_LAST_NEEDS_A_GLOBAL_BATCH = "drop-last-needs-one-global-batch"
    KEEP_LAST_NEEDS_SFT_PADDING = "keep-last-batch-needs-sft-padding-rows"
    # MB's MIMO loader builder: the forward step slices each micro-batch among a module's DP ranks
    MIMO_MICRO_BATCH_DIVISIBLE_BY_MODULE_DP = "mimo-micro-batch-divisible-by-module-dp"


SIGNATURES: dict[Rule, re.Pattern[str]] = {
    Rule.CP_SEQ_DIVISIBLE: re.compile(r"divisible by 2 \* context parallel"),
    Rule.CP_FINETUNE_PER_TOKEN_LOSS: re.compile(r"cp ?> ?1.*calculate_per_token_loss must be true"),
    Rule.CP_FINETUNE_NO_AVERAGE_IN_COLLECTIVE: re.compile(r"cp ?> ?1.*average_in_collective must be false"),
    Rule.OFFLINE_MICRO_BATCH_1: re.compile(r"micro batch size should be 1 when training with packed sequence"),
    Rule.IN_BATCH_MICRO_BATCH_OVER_1: re.compile(
        r"micro_batch_size should be greater than 1 when using (enable_in_batch_packing|pack_sequences_in_batch)"
    ),
    Rule.OFFLINE_IN_BATCH_EXCLUSIVE: re.compile(r"offline_packing and enable_in_batch_packing are mutually exclusive"),
    Rule.PAD_CU_SEQLENS_NEEDS_PAD_TO_MAX: re.compile(r"pad_cu_seqlens.*pad_to_max_length|pad_to_max_length.*pad_cu"),
    Rule.SEQ_DIVISIBLE_BY_COLLATE_MULTIPLE: re.compile(r"divisible by the cp/sp collate padding multiple"),
    # 0.3.1: "packed training data file does not exist"; since: "packed_train_data_path file does not
    # exist" (.npy) or "... resolved to no files" / "could not be resolved" (parquet)
    Rule.NAMED_PACKED_FILE_EXISTS: re.compile(
        r"packed[ _](training|train|validation|val)[ _]data([ _]path)? file does not exist"
        r"|packed_(train|val)_data_path (resolved to no files|could not be resolved)"
    ),
    Rule.EOD_MASK_LOSS_DEFINED: re.compile(r"eod_mask_loss must be defined"),
    Rule.PACK_SIZE_POSITIVE: re.compile(r"packed_sequence_size must be greater than 0"),
    Rule.OFFLINE_FLAG_NEEDS_SPECS: re.compile(r"offline_packing_specs must be set when enable_offline_packing"),
    Rule.OFFLINE_SPECS_NEED_FLAG: re.compile(r"enable_offline_packing must be true when offline_packing_specs is set"),
    Rule.MODEL_DATASET_SEQ_LENGTH_MATCH: re.compile(
        r"ensure sequence length configuration in model config and\s+dataset config match"
    ),
    Rule.CUDA_GRAPHS_NEED_PAD_TO_MAX: re.compile(
        r"offline packing with cuda graphs requires dataset pad_to_max_length"
    ),
    Rule.CUDA_GRAPHS_NEED_PAD_CU_SEQLENS: re.compile(
        r"packed attention cuda graphs require offline_packing_specs\.pad_cu_seqlens"
    ),
    # the loader's "not enough train samples for a single global batch", or its sampler's own
    # "drop_last=true requires at least one full global batch"
    Rule.DROP_LAST_NEEDS_A_GLOBAL_BATCH: re.compile(
        r"not enough train samples for a single global batch|drop_last=true requires at least one full global batch"
    ),
    Rule.KEEP_LAST_NEEDS_SFT_PADDING: re.compile(r"drop_last=false requires gptsftdatasetconfig"),
    # the loader builder's "micro_batch_size (3) must be divisible by data_parallel_size (2) of module
    # 'language'", or the training contract's "micro batch size 3 not divisible by language dp size 2"
    Rule.MIMO_MICRO_BATCH_DIVISIBLE_BY_MODULE_DP: re.compile(
        r"micro_batch_size \(\d+\) must be divisible by data_parallel_size"
        r"|micro batch size \d+ not divisible by \w+ dp size"
    ),
}


@dataclass(frozen=True)
class Attribution:
    """Who refused: the rules whose signature the message carries, and MB's raising statement."""

    rules: tuple[Rule, ...]
    frame: str | None  # "megatron/bridge/...py:LINE" of an explicit raise/assert, None: not MB's check

    @property
    def by_check(self) -> bool:
        return self.frame is not None

    def names(self) -> list[str]:
        return [r.value for r in self.rules]


def attribute(exc: BaseException, mb_roots: tuple[Path, ...] = ()) -> Attribution:
    """The rules ``exc``'s message names, and the MB statement that raised it (see module doc)."""
    text = " ".join(str(exc).split()).lower()
    rules = tuple(rule for rule, sig in SIGNATURES.items() if sig.search(text))
    return Attribution(rules, raising_check(exc, mb_roots))


def require_refused_by(exc: BaseException, rule: Rule, what: str) -> None:
    """``exc`` must be MB refusing ``what`` by ``rule``, in an explicit check of its own; any other
    exception is a crash of MB's (raised chained to ``exc``), never counted as the rule's work."""
    from harness.records.impact import ImpactFailure

    who = attribute(exc)
    try:
        require_named(rule, what, f"{type(exc).__name__}: {str(exc)[:300]}", who.names(), who.frame)
    except ImpactFailure as failure:
        raise failure from exc


def world_refusal(outcomes: list[ConfigOutcome | None], what: str) -> ConfigOutcome | None:
    """The refusal every rank of a world gave alike (each outcome as ``config.rejected`` makes it, None
    where the rank went on); None when no rank refused. Some ranks refusing and the others going on is
    a crash: the others wait in a collective the refusing ranks never join."""
    from harness.records.impact import Impact, require

    if all(o is None for o in outcomes):
        return None
    require(
        all(o is not None for o in outcomes),
        Impact.CRASH,
        f"{what} refused on some ranks only: {[o is not None for o in outcomes]}",
    )
    return outcomes[0]


def require_world_refused_by(outcomes: list[ConfigOutcome | None], rule: Rule, what: str, by: str) -> dict[str, object]:
    """Every rank refused ``what`` by ``rule``'s own check (message and raising statement); ``by``
    names the MB path that must refuse. Returns the refusal in golden form."""
    from harness.records.impact import Impact, fail

    out = world_refusal(outcomes, by)
    if out is None:
        raise fail(Impact.ACCEPTS_INVALID_CONFIG, f"{what}: {by} accepted it")
    error = f"{out['error_class']}: {out['message'][:300]}"
    require_named(rule, what, error, out["rules"], out["raised_at"])
    return {"refused": out["error_class"], "rules": out["rules"]}


def require_named(rule: Rule, what: str, error: str, names: list[str], frame: str | None) -> None:
    """A refusal (``error``, attributed to rules ``names`` and MB's raising statement ``frame``,
    as :func:`attribute` finds them) must be ``rule``'s own, else it is MB crashing."""
    from harness.records.impact import Impact, fail

    if rule.value not in names or frame is None:
        raise fail(
            Impact.CRASH,
            f"{what} must be refused by MB's check naming it ({rule.value}); got {error} "
            f"(rules {names}, frame {frame})",
        )


def raising_check(exc: BaseException, mb_roots: tuple[Path, ...] = ()) -> str | None:
    """``file:line`` of the innermost Megatron-Bridge frame when it is an explicit ``raise`` or
    ``assert`` statement (its first line); None when MB's code did not refuse by a check."""
    frames = traceback.extract_tb(exc.__traceback__)
    mb = [f for f in frames if _is_mb(f.filename, mb_roots)]
    if not mb:
        return None
    last = mb[-1]
    line = (linecache.getline(last.filename, last.lineno or 0) or last.line or "").strip()
    if not line.startswith(("raise", "assert")):
        # a multi-line raise/assert reports the line of its first token on 3.11+; look back a little
        statement = _statement_start(last.filename, last.lineno or 0)
        if statement is None:
            return None
    short = last.filename.replace("\\", "/")
    short = short[short.index("megatron/bridge") :] if "megatron/bridge" in short else short
    return f"{short}:{last.lineno}"


def _statement_start(filename: str, lineno: int) -> str | None:
    for back in range(0, 6):
        text = linecache.getline(filename, lineno - back).strip()
        if text.startswith(("raise", "assert")):
            return text
        if not text or text.endswith(":"):
            return None
    return None


def _is_mb(filename: str, roots: tuple[Path, ...]) -> bool:
    name = filename.replace("\\", "/")
    if roots:
        return any(str(Path(filename)).startswith(str(r)) for r in roots)
    return "/megatron/bridge/" in name


__all__ = ["SIGNATURES", "Attribution", "Rule", "attribute", "raising_check", "require_named", "require_refused_by"]
