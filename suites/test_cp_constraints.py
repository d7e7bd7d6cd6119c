"""Context/sequence-parallel padding multiples chosen by ``ConfigContainer.validate``.

Documented rule (docs/training/packed-sequences.md, "Derive the internal sequence alignment"):
``cp_multiple = 2*CP if CP > 1 else 1``; ``sp_multiple = CP*TP`` with sequence parallelism and
TP > 1; the alignment is their lcm, and with an evaluation CP it must satisfy both topologies.
THD with CP splits every sequence into 2*CP chunks, SP splits the token dimension over TP, so
the multiple MB writes into the collate config must be divisible by these; a sequence length
the multiple does not divide is refused. The packed batch built with that multiple then has
every sequence boundary on the grid.
"""

from __future__ import annotations

import math

import pytest

from harness import features
from harness.records.impact import Impact, require
from harness.suite.adapters import cp as cp_ops
from harness.suite.adapters import thd
from suites import _inputs
from suites._explain import first_offender

pytestmark = pytest.mark.import_group("full")

TOPOLOGIES = [
    (1, 1, False),
    (2, 1, False),
    (4, 1, False),
    (1, 2, True),
    (1, 4, True),
    (2, 2, True),
    (4, 2, True),
    (2, 4, False),
]


def _required(cp: int, tp: int, sp: bool) -> list[int]:
    req = [2 * cp] if cp > 1 else []
    if sp and tp > 1:
        req += [tp, cp * tp]
    return req


@pytest.mark.parametrize("cp,tp,sp", TOPOLOGIES)
def test_in_batch_multiple(golden, cp, tp, sp):
    out = cp_ops.collate_padding_multiple(cp, tp, sp, in_batch=True)
    require(out["accepted"], Impact.REFUSES_VALID_CONFIG, out["message"])
    m = cp_ops.packing_multiple(out)
    for r in _required(cp, tp, sp):  # TE's THD CP split and SP's scatter refuse unaligned sequences
        require(m % r == 0, Impact.CRASH, f"CP{cp} TP{tp} SP{sp}: multiple {m} is not divisible by {r}")
    lcm = math.lcm(1, *_required(cp, tp, sp))
    require(
        m == lcm,
        Impact.PERF_CONTRACT,
        f"CP{cp} TP{tp} SP{sp}: the documented alignment is the lcm {lcm} (no over-padding), got {m}",
    )
    # the packed batch built with that multiple keeps every boundary on the CP/SP grid
    batch, _lengths = _inputs.right_padded_batch(cp * 10 + tp, 4, 19)
    packed = thd.pack_in_batch(
        batch["tokens"],
        batch["labels"],
        batch["loss_mask"],
        batch["position_ids"],
        pad_token_id=_inputs.PAD_ID,
        pad_to_multiple_of=m,
    )
    bounds = packed["cu_seqlens_padded"]
    require(
        all(b % m == 0 for b in bounds),
        Impact.CRASH,
        f"every padded boundary must be a multiple of {m}: "
        + first_offender(bounds, lambda b: b % m == 0, "boundary")
        + f" in cu_seqlens_padded {bounds}",
    )
    golden.check({"multiple": m, "cu_seqlens_padded": packed["cu_seqlens_padded"]})


@pytest.mark.parametrize("cp,tp,sp,base", [(2, 1, False, 6), (4, 1, False, 128), (2, 2, True, 3), (1, 1, False, 5)])
def test_collate_multiple_without_in_batch(golden, cp, tp, sp, base):
    out = cp_ops.collate_padding_multiple(cp, tp, sp, in_batch=False, pad_to_multiple_of=base)
    require(out["accepted"], Impact.REFUSES_VALID_CONFIG, out["message"])
    m = cp_ops.packing_multiple(out)
    require(
        m % base == 0, Impact.CRASH, f"the user's pad_to_multiple_of {base} is kept (raised, never lowered), got {m}"
    )
    for r in _required(cp, tp, sp):
        require(m % r == 0, Impact.CRASH, f"collate multiple {m} not divisible by {r}")
    lcm = math.lcm(base, *_required(cp, tp, sp))
    require(
        m == lcm,
        Impact.PERF_CONTRACT,
        f"CP{cp} TP{tp} SP{sp} pad_to_multiple_of {base}: expected the lcm {lcm}, got {m}",
    )
    golden.check({"multiple": m})


@pytest.mark.parametrize("cp,eval_cp", [(2, 4), (4, 2), (1, 2)])
def test_eval_cp_multiple(golden, cp, eval_cp):
    out = cp_ops.collate_padding_multiple(cp, 1, False, in_batch=True, eval_cp=eval_cp)
    require(out["accepted"], Impact.REFUSES_VALID_CONFIG, out["message"])
    for size in (cp, eval_cp):
        if size > 1:
            require(
                out["multiple"] % (2 * size) == 0,
                Impact.CRASH,
                f"eval/training CP {size} both constrain the multiple: "
                f"{out['multiple']} is not divisible by {2 * size}",
            )
    golden.check({"multiple": out["multiple"]})


@pytest.mark.parametrize(
    "cp,tp,sp,seq",
    [(2, 1, False, 1002), (4, 1, False, 1004), (2, 2, True, 1002), (4, 1, False, 1008), (2, 4, True, 1004)],
)
def test_seq_length_divisibility(golden, cp, tp, sp, seq):
    """``seq_length`` must be divisible by the CP/SP collate multiple (documented in
    ``ConfigContainer.validate``). (2, 4, SP, 1004) is divisible by 2*CP but not by lcm(2*CP,
    CP*TP) = 8, so only the collate-multiple rule can reject it, not MCore's 2*CP assertion."""
    out = cp_ops.collate_padding_multiple(cp, tp, sp, in_batch=True, seq_length=seq)
    req = math.lcm(1, *_required(cp, tp, sp))
    if seq % (2 * cp) == 0 and seq % req != 0 and not out.get("seq_length_rule", True):
        raise features.missing(
            "collate-cp-multiple", "this era does not validate seq_length against the CP/SP collate multiple"
        )
    valid = seq % req == 0
    require(
        out["accepted"] == valid,
        Impact.REFUSES_VALID_CONFIG if valid else Impact.ACCEPTS_INVALID_CONFIG,
        f"seq_length {seq} with multiple {req}: {out}",
    )
    golden.check({"accepted": out["accepted"], "error_class": out["error_class"]})
