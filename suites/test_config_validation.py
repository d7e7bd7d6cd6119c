"""Packing rules of ``ConfigContainer.validate()``.

Documented rules (MB's config docs and docs/training/packed-sequences.md):
* context parallelism needs ``seq_length % (2 * CP) == 0``;
* finetuning with CP > 1 needs per-token loss and no ``average_in_collective``;
* offline packing needs micro-batch size 1; in-batch packing needs micro-batch size > 1;
* offline and in-batch packing are mutually exclusive;
* ``pad_cu_seqlens`` needs ``pad_to_max_length``.
Each case is a valid or an invalid config; the golden pins accepted/rejected and the error
class; a rejection must also name the rule it enforces (checked by keywords).
"""

from __future__ import annotations

import pytest

from harness.adapters.config import PackingConfigSpec as Spec
from harness.adapters.config import validate_packing_config

pytestmark = pytest.mark.import_group("full")

# (case id, spec, expected accepted, keywords one of which a rejection message must contain)
CASES = [
    ("baseline_sft", Spec(), True, ()),
    ("cp2_seq512", Spec(seq_length=512, context_parallel=2), True, ()),
    ("cp2_seq510", Spec(seq_length=510, context_parallel=2), False, ("divisible", "context parallel")),
    ("cp3_seq256", Spec(seq_length=256, context_parallel=3), False, ("divisible", "context parallel")),
    ("cp4_seq512", Spec(seq_length=512, context_parallel=4), True, ()),
    ("cp4_seq516", Spec(seq_length=516, context_parallel=4), False, ("divisible", "context parallel")),
    (
        "cp2_finetune_no_per_token_loss",
        Spec(context_parallel=2, per_token_loss=False),
        False,
        ("calculate_per_token_loss",),
    ),
    (
        "cp2_finetune_average_in_collective",
        Spec(context_parallel=2, average_in_collective=True),
        False,
        ("average_in_collective",),
    ),
    (
        "cp2_pretrain_average_in_collective",
        Spec(dataset="gpt", context_parallel=2, per_token_loss=False, average_in_collective=True),
        True,
        (),
    ),
    ("offline_mbs1", Spec(offline_packing_size=512, micro_batch_size=1), True, ()),
    ("offline_mbs4", Spec(offline_packing_size=512, micro_batch_size=4), False, ("micro batch", "micro_batch")),
    ("in_batch_mbs1", Spec(in_batch_packing=True, micro_batch_size=1), False, ("micro_batch", "micro batch")),
    ("in_batch_mbs4", Spec(in_batch_packing=True, micro_batch_size=4), True, ()),
    (
        "offline_and_in_batch",
        Spec(offline_packing_size=512, in_batch_packing=True, micro_batch_size=4),
        False,
        ("exclusive", "in_batch", "in-batch", "micro"),
    ),
    (
        "pad_cu_seqlens_without_pad_to_max_length",
        Spec(offline_packing_size=512, pad_cu_seqlens=True),
        False,
        ("pad_to_max_length",),
    ),
    (
        "pad_cu_seqlens_with_pad_to_max_length",
        Spec(offline_packing_size=512, pad_cu_seqlens=True, pad_to_max_length=True),
        True,
        (),
    ),
]


@pytest.mark.parametrize("spec,accepted,keywords", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_packing_rule(golden, spec, accepted, keywords):
    outcome = validate_packing_config(spec)
    assert outcome["accepted"] == accepted, f"expected {'accepted' if accepted else 'rejected'}, got {outcome}"
    if not accepted:
        message = outcome["message"].lower()
        assert any(k.lower() in message for k in keywords), f"rejection must name its rule ({keywords}): {message}"
    golden.check({"accepted": outcome["accepted"], "error_class": outcome["error_class"]})
