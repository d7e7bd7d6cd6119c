"""In-batch packing of one right-padded micro-batch of MB's unpacked examples, held to the oracle.

Shared by the hand-written ``in_batch_packing`` cases and the exploration (suites/_explore.py):
the micro-batch is packed into one MCore THD row with the multiple MB itself chooses for the
parallel layout (:func:`harness.suite.adapters.vlmstep.mb_in_batch_multiple`, never one a suite picks),
and the row must hold every example, per real token, as MB's unpacked path does, with its
segments on the documented grid ``lcm(2*CP, CP*TP with SP)`` and its padding untrained.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import needs, thd, vlmstep
from harness.suite.oracle import differential
from suites import _sftcases
from suites._explain import first_difference, first_offender
from suites._inputs import IGNORE_INDEX

Layout = tuple[int, int, bool]  # (CP, TP, SP)


@dataclass(frozen=True)
class Packed:
    multiple: int  # the multiple MB chose for the layout
    row: differential.PackedRow
    report: differential.Report


def pack_micro_batch(case: _sftcases.SFTCase, examples: list[differential.Example], layout: Layout) -> Packed:
    """``examples`` right-padded as a VLM collate hands them over, packed in batch by MB with the
    multiple MB chooses for ``layout``, and held to the differential oracle (raises on a violation)."""
    needs(thd.pack_in_batch)  # an era without in-batch packing is untestable before anything is built
    ids = _sftcases.special_ids(case)
    pad_id = ids["pad_id"]
    assert pad_id is not None, "the offline tokenizer has a pad token"
    batch = _sftcases.right_padded(examples, pad_id, IGNORE_INDEX)
    multiple = vlmstep.mb_in_batch_multiple(*layout)
    packed = thd.pack_in_batch(
        batch["tokens"],
        batch["labels"],
        batch["loss_mask"],
        batch["position_ids"],
        batch["attention_mask"],
        pad_token_id=pad_id,
        pad_to_multiple_of=multiple,
    )
    (row,) = batch_ops.packed_rows(packed["raw"])
    report = differential.compare([row], examples, pad_seq_to_mult=vlmstep.in_batch_multiple(*layout), special_ids=ids)
    report.assert_ok()
    real = report.rows[0].real_positions
    padding = [(p, label) for p, label in enumerate(row.labels) if p not in real]
    assert all(label == IGNORE_INDEX for _, label in padding), (
        f"alignment padding must carry the ignore index {IGNORE_INDEX} as label: packed row 0, "
        + first_offender(padding, lambda pl: pl[1] == IGNORE_INDEX, "padding slot (position, label)")
    )
    order = [s.key for s in report.rows[0].segments]
    expected_order = [ex.key for ex in examples]
    assert order == expected_order, "rows packed in batch order: " + first_difference(expected_order, order, "segment")
    return Packed(multiple, row, report)
