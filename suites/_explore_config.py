"""The configuration space of exploration: MB's packing rules met in combination.

Each case of the ``config_validation`` suite breaks one rule, and its neighbour differs from it
only where that rule looks; the rest of the config is MB's default. A rule that holds alone can
still be lost where it meets another knob: a check moved under a condition (``if not packing``),
an early ``return`` for one dataset class, a flag the rule reads before finalisation rewrites it.
So Hypothesis draws whole packing configurations, valid ones over every knob (the model's
``seq_length`` around the multiples of ``2*CP``, CP 1-4, TP 1-2 with or without sequence
parallelism, PP 1-2, micro and global batch sizes, finetuning or pretraining, no packing, offline
specs with their enable flag, ``pad_to_max_length``, ``pad_cu_seqlens`` and Transformer Engine's
CUDA graphs, or in-batch packing; per-token loss and ``average_in_collective``), and breaks one
rule in them, or none: the enable flag set against the specs, a ``seq_length`` off ``2*CP``, the
dataset's ``seq_length`` not the model's, and so on.

What MB must answer comes from the documented rules alone (:func:`broken_rules`, the rules the
suite's module docstring lists, with where each applies): a config that breaks none must be
accepted (else ``refuses-valid-config``); one that breaks some must be refused, and the refusal
attributed to one of them, by its message and an explicit check in MB's code (else
``accepts-invalid-config``: a rejection by another rule, or any other exception, is not the rule
holding). Which of several broken rules refuses first is MB's order, not a rule, so any of them
may, with one documented exception: offline with in-batch packing also breaks a micro-batch rule
(they ask for opposite sizes), and the exclusivity rule must be the one that refuses it, as in
``config_validation``. One rule cannot be seen alone here: CUDA graphs without
``pad_to_max_length`` always break a ``pad_cu_seqlens`` rule too, so a lost static-width rule is
covered by its listed case only. A knob the era lacks makes the case untestable (the adapter's era
signals), never a verdict.

A drawn case is an :class:`~suites._explore.ExploredCase` whose ``config`` holds the fields of
:class:`~harness.suite.adapters.config.PackingConfigSpec` that differ from its defaults.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.records.impact import Impact, fail
from harness.suite.adapters.config import TE_CUDA_GRAPHS as _TE_GRAPHS
from harness.suite.adapters.config import PackingConfigSpec, refusal, validate_packing_config
from harness.suite.adapters.rules import Rule
from suites._explore import ExploredCase, named

# around the multiples of 2*CP (2, 4, 6, 8 for CP 1-4): 256 and 512 divide by 8, not 6; 258 and 510 by 6, not 4;
# 516 by 4 and 6, not 8
SEQS = (256, 258, 510, 512, 516)


# what breaking each rule needs of the context: a finetuning dataset, CP > 1, the packing path
_NEEDS: dict[Rule, tuple[bool, bool, tuple[str, ...]]] = {
    Rule.CP_SEQ_DIVISIBLE: (False, True, ()),
    Rule.CP_FINETUNE_PER_TOKEN_LOSS: (True, True, ()),
    Rule.CP_FINETUNE_NO_AVERAGE_IN_COLLECTIVE: (True, True, ()),
    Rule.OFFLINE_IN_BATCH_EXCLUSIVE: (True, False, ("offline",)),
    Rule.OFFLINE_FLAG_NEEDS_SPECS: (True, False, ("none", "in_batch")),
    Rule.OFFLINE_SPECS_NEED_FLAG: (True, False, ("offline",)),
    Rule.OFFLINE_MICRO_BATCH_1: (True, False, ("offline",)),
    Rule.IN_BATCH_MICRO_BATCH_OVER_1: (True, False, ("in_batch",)),
    Rule.PAD_CU_SEQLENS_NEEDS_PAD_TO_MAX: (True, False, ("offline",)),
    Rule.CUDA_GRAPHS_NEED_PAD_TO_MAX: (True, False, ("offline",)),
    Rule.CUDA_GRAPHS_NEED_PAD_CU_SEQLENS: (True, False, ("offline",)),
    Rule.MODEL_DATASET_SEQ_LENGTH_MATCH: (False, False, ()),
}
RULES = tuple(_NEEDS)


def config_cases() -> Any:
    """The Hypothesis strategy of the configuration space: a valid configuration drawn over every knob,
    then none or one of the rules broken in it by the smallest change that breaks it (see the module
    docstring). Breaking one rule where the others hold is what shows a rule lost in a context: with
    several broken, another rule's refusal would hide it. The rule is drawn first, so the context is
    one where it applies; the judge is :func:`broken_rules`, which does not know what was meant."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: Any) -> ExploredCase:
        # half the configs break a rule; Hypothesis shrinks toward a valid config
        rule = d(st.sampled_from(RULES)) if d(st.booleans()) else None
        sft, cp_over_1, paths = _NEEDS[rule] if rule is not None else (False, False, ())
        dataset = "sft" if sft else d(st.sampled_from(("sft", "gpt")))
        cp = d(st.sampled_from((2, 3, 4) if cp_over_1 else (1, 2, 3, 4)))
        finetuning_cp = dataset == "sft" and cp > 1  # MB: per-token loss, no average_in_collective
        # packing is finetuning's (GPTDatasetConfig has neither)
        packing = "none" if dataset == "gpt" else d(st.sampled_from(paths or ("none", "offline", "in_batch")))
        tp = d(st.sampled_from((1, 2)))
        mbs = 1 if packing == "offline" else d(st.sampled_from((2, 4) if packing == "in_batch" else (1, 2, 4)))
        fields: dict[str, Any] = {
            "seq_length": d(st.sampled_from(tuple(s for s in SEQS if cp == 1 or s % (2 * cp) == 0))),
            "context_parallel": cp,
            "tensor_parallel": tp,
            "sequence_parallel": tp > 1 and d(st.booleans()),  # megatron-core refuses SP without TP
            "pipeline_parallel": d(st.sampled_from((1, 2))),
            "micro_batch_size": mbs,
            "global_batch_size": mbs * d(st.sampled_from((1, 8))),  # DP 1: whole micro-batches
            "dataset": dataset,
            "per_token_loss": finetuning_cp or d(st.booleans()),
            "average_in_collective": not finetuning_cp and d(st.booleans()),
            "in_batch_packing": packing == "in_batch",
            "offline_enabled": d(st.sampled_from((None, True))) if packing == "offline" else None,
        }
        if packing == "offline":
            pad_to_max = d(st.booleans())
            pad_cu = pad_to_max and d(st.booleans())
            fields.update(
                offline_packing_size=d(st.sampled_from((fields["seq_length"], fields["seq_length"] // 2))),
                pad_to_max_length=pad_to_max,
                pad_cu_seqlens=pad_cu,
                cuda_graph_impl=_TE_GRAPHS if pad_cu and d(st.booleans()) else None,
            )
        if rule is not None:
            fields.update(_break(d, rule, fields))
        spec = dataclasses.replace(PackingConfigSpec(), **fields)
        return named(ExploredCase(id="", seed=0, config=_changed(spec)))

    return draw()


def _break(d: Any, rule: Rule, fields: dict[str, Any]) -> dict[str, Any]:
    """The smallest change to a valid config that breaks ``rule`` (it may break a rule tied to it too:
    offline with in-batch packing breaks a micro-batch rule, CUDA graphs without ``pad_to_max_length``
    a ``pad_cu_seqlens`` rule)."""
    from hypothesis import strategies as st

    seq, mbs = fields["seq_length"], fields["micro_batch_size"]
    if rule is Rule.CP_SEQ_DIVISIBLE:
        return {"seq_length": seq + 2}  # seq is a multiple of 2*CP >= 4
    if rule is Rule.CP_FINETUNE_PER_TOKEN_LOSS:
        return {"per_token_loss": False}
    if rule is Rule.CP_FINETUNE_NO_AVERAGE_IN_COLLECTIVE:
        return {"average_in_collective": True}
    if rule is Rule.OFFLINE_IN_BATCH_EXCLUSIVE:
        return {"in_batch_packing": True}
    if rule is Rule.OFFLINE_FLAG_NEEDS_SPECS:
        return {"offline_enabled": True}
    if rule is Rule.OFFLINE_SPECS_NEED_FLAG:
        return {"offline_enabled": False}
    if rule in (Rule.OFFLINE_MICRO_BATCH_1, Rule.IN_BATCH_MICRO_BATCH_OVER_1):
        size = 2 if rule is Rule.OFFLINE_MICRO_BATCH_1 else 1
        return {"micro_batch_size": size, "global_batch_size": fields["global_batch_size"] // mbs * size}
    if rule is Rule.PAD_CU_SEQLENS_NEEDS_PAD_TO_MAX:
        return {"pad_cu_seqlens": True, "pad_to_max_length": False, "cuda_graph_impl": None}
    if rule is Rule.CUDA_GRAPHS_NEED_PAD_TO_MAX:
        return {"cuda_graph_impl": _TE_GRAPHS, "pad_to_max_length": False, "pad_cu_seqlens": d(st.booleans())}
    if rule is Rule.CUDA_GRAPHS_NEED_PAD_CU_SEQLENS:
        return {"cuda_graph_impl": _TE_GRAPHS, "pad_to_max_length": True, "pad_cu_seqlens": False}
    return {"dataset_seq_length": 2 * seq}  # MODEL_DATASET_SEQ_LENGTH_MATCH


def _changed(spec: PackingConfigSpec) -> dict[str, Any]:
    """The fields of ``spec`` that differ from the defaults (what a saved spec carries)."""
    default = PackingConfigSpec()
    return {f.name: v for f in dataclasses.fields(spec) if (v := getattr(spec, f.name)) != getattr(default, f.name)}


def config_spec(case: ExploredCase) -> PackingConfigSpec:
    return dataclasses.replace(PackingConfigSpec(), **case.config)


def broken_rules(spec: PackingConfigSpec) -> frozenset[Rule]:
    """The documented packing rules ``spec`` breaks (config_validation's module docstring lists them):

    * CP > 1 needs ``seq_length % (2*CP) == 0`` (every dataset);
    * finetuning with CP > 1 needs per-token loss and no ``average_in_collective``;
    * offline and in-batch packing are mutually exclusive;
    * ``enable_offline_packing`` and the offline specs come together;
    * offline packing needs micro-batch size 1, in-batch packing a micro-batch size over 1;
    * with offline specs, ``pad_cu_seqlens`` needs ``pad_to_max_length``, and CUDA graphs that
      capture attention need both (a captured graph replays fixed widths and boundaries);
    * the model's ``seq_length`` is the dataset config's.
    """
    specs = spec.offline_packing_size is not None
    enabled = spec.offline_enabled if spec.offline_enabled is not None else specs
    finetuning = spec.dataset == "sft"
    cp = spec.context_parallel
    rules: dict[Rule, bool] = {
        Rule.CP_SEQ_DIVISIBLE: cp > 1 and spec.seq_length % (2 * cp) != 0,
        Rule.CP_FINETUNE_PER_TOKEN_LOSS: cp > 1 and finetuning and not spec.per_token_loss,
        Rule.CP_FINETUNE_NO_AVERAGE_IN_COLLECTIVE: cp > 1 and finetuning and spec.average_in_collective,
        Rule.OFFLINE_IN_BATCH_EXCLUSIVE: enabled and spec.in_batch_packing,
        Rule.OFFLINE_FLAG_NEEDS_SPECS: enabled and not specs,
        Rule.OFFLINE_SPECS_NEED_FLAG: specs and not enabled,
        Rule.OFFLINE_MICRO_BATCH_1: enabled and spec.micro_batch_size > 1,
        Rule.IN_BATCH_MICRO_BATCH_OVER_1: spec.in_batch_packing and spec.micro_batch_size == 1,
        Rule.PAD_CU_SEQLENS_NEEDS_PAD_TO_MAX: specs and spec.pad_cu_seqlens and not spec.pad_to_max_length,
        Rule.CUDA_GRAPHS_NEED_PAD_TO_MAX: specs and spec.cuda_graph_impl == _TE_GRAPHS and not spec.pad_to_max_length,
        Rule.CUDA_GRAPHS_NEED_PAD_CU_SEQLENS: specs and spec.cuda_graph_impl == _TE_GRAPHS and not spec.pad_cu_seqlens,
        Rule.MODEL_DATASET_SEQ_LENGTH_MATCH: spec.dataset_seq_length not in (None, spec.seq_length),
    }
    return frozenset(rule for rule, broken in rules.items() if broken)


# offline with in-batch packing breaks a micro-batch rule whatever the micro-batch size (the two ask for
# opposite sizes): the user's error is the combination, so the exclusivity rule must be the one that
# refuses it, as config_validation's case holds it; a micro-batch rule refusing means exclusivity was lost
_SHADOWED_BY: dict[Rule, frozenset[Rule]] = {
    Rule.OFFLINE_IN_BATCH_EXCLUSIVE: frozenset({Rule.OFFLINE_MICRO_BATCH_1, Rule.IN_BATCH_MICRO_BATCH_OVER_1}),
}


def may_refuse(broken: frozenset[Rule]) -> frozenset[Rule]:
    """The broken rules whose refusal is the right answer: any of them (which refuses first is MB's
    order, not a rule), except those a broken rule shadows (:data:`_SHADOWED_BY`)."""
    shadowed = {r for rule in broken for r in _SHADOWED_BY.get(rule, ())}
    return broken - shadowed


def check(case: ExploredCase) -> dict[str, Any]:
    """MB's ``validate()`` of the drawn config against the rules it breaks (raises on a violation);
    the golden form: accepted, or the broken rules that refused it (change detection only)."""
    spec = config_spec(case)
    broken = broken_rules(spec)
    outcome = validate_packing_config(spec)
    names = sorted(r.value for r in broken)
    if not broken:
        if not outcome["accepted"]:
            raise fail(Impact.REFUSES_VALID_CONFIG, f"a config that breaks no documented rule was {refusal(outcome)}")
        return {"accepted": True}
    if outcome["accepted"]:
        raise fail(Impact.ACCEPTS_INVALID_CONFIG, f"the config breaks {', '.join(names)} and was accepted")
    right = sorted(r.value for r in may_refuse(broken))
    by = sorted(set(outcome["rules"]) & set(right))
    if not by or not outcome["raised_at"]:
        raise fail(
            Impact.ACCEPTS_INVALID_CONFIG,
            f"the config breaks {', '.join(names)} and was {refusal(outcome)}, not by {' or '.join(right)}",
        )
    return {"accepted": False, "broken": names, "refused_by": by}
