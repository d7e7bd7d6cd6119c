"""Packing rules of ``ConfigContainer.validate()``: each rule case proves its own rule.

Documented rules (MB's config docs and docs/training/packed-sequences.md):
* context parallelism needs ``seq_length % (2 * CP) == 0``;
* finetuning with CP > 1 needs per-token loss and no ``average_in_collective``;
* offline packing needs micro-batch size 1; in-batch packing needs micro-batch size > 1;
* offline and in-batch packing are mutually exclusive;
* ``enable_offline_packing`` and ``offline_packing_specs`` come together (either alone is refused;
  eras before the flag: untestable through the feature ledger);
* ``pad_cu_seqlens`` needs ``pad_to_max_length``;
* the model's ``seq_length`` is the dataset config's (the width packed rows are built to);
* offline packing under CUDA graphs needs static shapes: ``pad_to_max_length``, and
  ``pad_cu_seqlens`` when the capture includes attention (since e4cb868dc; earlier eras:
  untestable through the feature ledger).

Each invalid case breaks one rule (offline with in-batch packing also breaks one of the two
opposite micro-batch rules, whatever the micro-batch size: there the exclusivity rule must be the
one that refuses) and names its *neighbour*, the valid config that differs only where the rule
looks, which must validate. A rejection counts only when it is attributed to the case's rule
(its message carries the rule's signature and an explicit ``raise``/``assert`` in MB's code
raised it: :mod:`harness.suite.adapters.rules`); a rejection by another rule, or any other exception,
is the rule not holding (impact ``accepts-invalid-config``). A valid config that is refused is
``refuses-valid-config``. The golden pins accepted/rejected, the error class and the rule.
"""

from __future__ import annotations

import pytest

from harness.records.impact import Impact, fail
from harness.suite.adapters import kindrules, needs
from harness.suite.adapters.config import TE_CUDA_GRAPHS as _TE_GRAPHS
from harness.suite.adapters.config import PackingConfigSpec as Spec
from harness.suite.adapters.config import in_batch_flag, refusal, validate_packing_config
from harness.suite.adapters.kindrules import kind_validation
from harness.suite.adapters.rules import ConfigOutcome, Rule

pytestmark = pytest.mark.import_group("full")


# (case id, spec, the rule it breaks (None: valid), its valid neighbour's case id)
CASES: list[tuple[str, Spec, Rule | None, str | None]] = [
    ("baseline_sft", Spec(), None, None),
    ("cp2_seq512", Spec(seq_length=512, context_parallel=2), None, None),
    ("cp2_seq510", Spec(seq_length=510, context_parallel=2), Rule.CP_SEQ_DIVISIBLE, "cp2_seq512"),
    ("cp3_seq256", Spec(seq_length=256, context_parallel=3), Rule.CP_SEQ_DIVISIBLE, "cp3_seq258"),
    ("cp3_seq258", Spec(seq_length=258, context_parallel=3), None, None),
    ("cp4_seq512", Spec(seq_length=512, context_parallel=4), None, None),
    # GPTModelProvider's own default seq_length (1024), named by the user as a recipe does
    ("cp4_seq1024", Spec(seq_length=1024, context_parallel=4), None, None),
    ("cp4_seq516", Spec(seq_length=516, context_parallel=4), Rule.CP_SEQ_DIVISIBLE, "cp4_seq512"),
    (
        "cp2_finetune_no_per_token_loss",
        Spec(context_parallel=2, per_token_loss=False),
        Rule.CP_FINETUNE_PER_TOKEN_LOSS,
        "cp2_seq512",
    ),
    (
        "cp2_finetune_average_in_collective",
        Spec(context_parallel=2, average_in_collective=True),
        Rule.CP_FINETUNE_NO_AVERAGE_IN_COLLECTIVE,
        "cp2_seq512",
    ),
    (
        "cp2_pretrain_average_in_collective",
        Spec(dataset="gpt", context_parallel=2, per_token_loss=False, average_in_collective=True),
        None,
        None,
    ),
    ("offline_mbs1", Spec(offline_packing_size=512, micro_batch_size=1), None, None),
    ("offline_mbs4", Spec(offline_packing_size=512, micro_batch_size=4), Rule.OFFLINE_MICRO_BATCH_1, "offline_mbs1"),
    (
        "in_batch_mbs1",
        Spec(in_batch_packing=True, micro_batch_size=1),
        Rule.IN_BATCH_MICRO_BATCH_OVER_1,
        "in_batch_mbs4",
    ),
    ("in_batch_mbs4", Spec(in_batch_packing=True, micro_batch_size=4), None, None),
    (
        "offline_and_in_batch",
        Spec(offline_packing_size=512, in_batch_packing=True, micro_batch_size=4),
        Rule.OFFLINE_IN_BATCH_EXCLUSIVE,
        "in_batch_mbs4",
    ),
    # the enable_offline_packing flag and the specs it switches on must come together (since 814ad79af): specs
    # that are set but not enabled would leave a user believing packing is on
    (
        "offline_enabled_without_specs",
        Spec(offline_enabled=True),
        Rule.OFFLINE_FLAG_NEEDS_SPECS,
        "offline_mbs1",
    ),
    (
        "offline_specs_not_enabled",
        Spec(offline_packing_size=512, offline_enabled=False),
        Rule.OFFLINE_SPECS_NEED_FLAG,
        "offline_mbs1",
    ),
    (
        "pad_cu_seqlens_without_pad_to_max_length",
        Spec(offline_packing_size=512, pad_cu_seqlens=True),
        Rule.PAD_CU_SEQLENS_NEEDS_PAD_TO_MAX,
        "pad_cu_seqlens_with_pad_to_max_length",
    ),
    (
        "pad_cu_seqlens_with_pad_to_max_length",
        Spec(offline_packing_size=512, pad_cu_seqlens=True, pad_to_max_length=True),
        None,
        None,
    ),
    # the packed rows are as wide as the dataset's seq_length: the model must be built for that length
    (
        "sft_dataset_seq1024_model_seq512",
        Spec(dataset_seq_length=1024),
        Rule.MODEL_DATASET_SEQ_LENGTH_MATCH,
        "baseline_sft",
    ),
    (
        "offline_dataset_seq1024_model_seq512",
        Spec(offline_packing_size=512, dataset_seq_length=1024),
        Rule.MODEL_DATASET_SEQ_LENGTH_MATCH,
        "offline_mbs1",
    ),
    # offline packing under Transformer Engine's CUDA graphs (scoped capture, attention included): a
    # captured graph replays fixed shapes, so the packed width and the boundaries must be static
    (
        "offline_cuda_graphs_static_shapes",
        Spec(offline_packing_size=512, pad_cu_seqlens=True, pad_to_max_length=True, cuda_graph_impl=_TE_GRAPHS),
        None,
        None,
    ),
    (
        "offline_cuda_graphs_without_pad_to_max_length",
        Spec(offline_packing_size=512, cuda_graph_impl=_TE_GRAPHS),
        Rule.CUDA_GRAPHS_NEED_PAD_TO_MAX,
        "offline_cuda_graphs_static_shapes",
    ),
    (
        "offline_cuda_graphs_without_pad_cu_seqlens",
        Spec(offline_packing_size=512, pad_to_max_length=True, cuda_graph_impl=_TE_GRAPHS),
        Rule.CUDA_GRAPHS_NEED_PAD_CU_SEQLENS,
        "offline_cuda_graphs_static_shapes",
    ),
]
_SPECS = {c[0]: c[1] for c in CASES}


@pytest.mark.parametrize("spec,rule,neighbour", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_packing_rule(golden, spec, rule, neighbour):
    outcome = validate_packing_config(spec)
    if rule is None:
        if not outcome["accepted"]:
            raise fail(Impact.REFUSES_VALID_CONFIG, f"a valid config was {refusal(outcome)}")
        golden.check({"accepted": True, "error_class": None})
        return
    near = validate_packing_config(_SPECS[neighbour])
    if not near.get("accepted"):
        raise fail(
            Impact.REFUSES_VALID_CONFIG,
            f"the valid neighbour {neighbour} (only {rule.value} differs) was {refusal(near)}",
        )
    _refused_by(rule, outcome, "the config")
    golden.check({"accepted": False, "error_class": outcome["error_class"], "rule": rule.value})


def _refused_by(rule: Rule, outcome: ConfigOutcome, what: str) -> None:
    """``outcome`` must be ``what`` refused by ``rule``'s own check (its message and MB's raising statement)."""
    if outcome["accepted"]:
        raise fail(Impact.ACCEPTS_INVALID_CONFIG, f"{rule.value} does not hold: {what} was accepted")
    if rule.value not in outcome["rules"] or not outcome["raised_at"]:
        raise fail(
            Impact.ACCEPTS_INVALID_CONFIG,
            f"{rule.value} does not hold: {what} was {refusal(outcome)}, not by {rule.value}",
        )


# (case id, spec, variable_seq_lengths the model must have after finalisation)
PIPELINE_SHAPES = [
    # in-batch packing makes every micro-batch's packed length its own: PP stages must send shapes
    ("in_batch_pp2", Spec(micro_batch_size=4, in_batch_packing=True, pipeline_parallel=2), True),
    (
        "in_batch_pp2_user_static",
        Spec(micro_batch_size=4, in_batch_packing=True, pipeline_parallel=2, variable_seq_lengths=False),
        True,
    ),
    ("in_batch_pp1", Spec(micro_batch_size=4, in_batch_packing=True), False),
    ("offline_pp2", Spec(offline_packing_size=512, pipeline_parallel=2), False),  # fixed pack-size rows
]
# (a user's own variable_seq_lengths=True is refused by megatron-core's MoE dispatcher check even for a
# dense model, the false positive MB's finalisation sidesteps by setting it after __post_init__)


@pytest.mark.parametrize("spec,expected", [c[1:] for c in PIPELINE_SHAPES], ids=[c[0] for c in PIPELINE_SHAPES])
def test_pipeline_shapes_follow_in_batch_packing(golden, spec, expected):
    """With in-batch packing and PP > 1, finalisation turns the model's ``variable_seq_lengths`` on
    (``ConfigContainer.validate`` -> ``TransformerConfig.finalize``: "PP stages must communicate
    tensor shapes dynamically instead of using static buffers"), whatever the user set; offline
    packing (rows of the pack size) and PP 1 keep static shapes."""
    in_batch_flag()  # untestable in an era without in-batch packing
    outcome = validate_packing_config(spec)
    if not outcome["accepted"]:
        raise fail(Impact.REFUSES_VALID_CONFIG, f"a valid config was {refusal(outcome)}")
    got = outcome["variable_seq_lengths"]
    if got is not expected:
        impact = Impact.CRASH if expected else Impact.PERF_CONTRACT  # static buffers of one shape vs varying rows
        raise fail(impact, f"variable_seq_lengths is {got} after finalisation, documented {expected}")
    golden.check({"variable_seq_lengths": got})


# the CP finetuning rules, broken alone, with each SFT dataset config kind ConfigContainer.validate names
KIND_RULES = [
    (Rule.CP_FINETUNE_PER_TOKEN_LOSS, {"per_token_loss": False, "average_in_collective": False}),
    (Rule.CP_FINETUNE_NO_AVERAGE_IN_COLLECTIVE, {"per_token_loss": True, "average_in_collective": True}),
]


@pytest.mark.parametrize("kind", kindrules.KINDS)
def test_cp_finetuning_rules_hold_for_every_sft_dataset_kind(kind):
    """CP > 1 finetuning needs the per-token loss and no averaging in the collective, whatever the
    SFT dataset config (GPT SFT, direct HF, mock VLM, Energon): a rank of a CP group whose tokens are
    all masked makes a per-rank mean NaN. Each rule is broken alone next to its valid neighbour and
    must refuse it by its own check; a rule that holds for one kind and not another is a failure."""
    needs(kind_validation)  # an era without the config API: untestable before anything is built
    valid = kind_validation(kind, cp=2, per_token_loss=True, average_in_collective=False)
    if not valid["accepted"]:
        raise fail(Impact.REFUSES_VALID_CONFIG, f"{kind}: the valid CP 2 finetuning config was {refusal(valid)}")
    for rule, knobs in KIND_RULES:
        _refused_by(rule, kind_validation(kind, cp=2, **knobs), f"{kind} with {knobs}")
