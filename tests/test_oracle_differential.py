"""The differential oracle on hand-made rows: every invariant holds on a correct packing and each
one is reported, with where and both values, when the packing is broken the way MB could break it.

Pure Python, no MB, milliseconds: these pin the oracle itself, so that a suite's FAIL means MB.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.suite.oracle.differential import Example, Invariant, InvariantFailure, PackedRow, compare

EOS, PAD = 2, 0
A = Example("#0", tokens=(5, 6, EOS, 7), labels=(6, EOS, 7, EOS), loss_mask=(0, 1, 1, 1), position_ids=(0, 1, 2, 3))
B = Example("#1", tokens=(8, 9), labels=(9, EOS), loss_mask=(1, 1), position_ids=(0, 1))
C = Example("#2", tokens=(10, 11, 12), labels=(11, 12, EOS), loss_mask=(0, 0, 1), position_ids=(0, 1, 2))
SPECIAL = {"eos_id": EOS, "pad_id": PAD}


def aligned_row() -> PackedRow:
    """A, B, C packed with pad_seq_to_mult=2 (A: 4, B: 2, C: 3+1), tail padding to width 12."""
    return PackedRow(
        tokens=(5, 6, EOS, 7, 8, 9, 10, 11, 12, EOS, EOS, EOS),
        labels=(6, EOS, 7, EOS, 9, EOS, 11, 12, EOS, EOS, EOS, EOS),
        loss_mask=(0, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0),
        position_ids=(0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 0, 0),
        cu_seqlens_q=(0, 4, 6, 9, 9),
        cu_seqlens_q_padded=(0, 4, 6, 10, 12),
        cu_seqlens_kv=(0, 4, 6, 9, 9),
        cu_seqlens_kv_padded=(0, 4, 6, 10, 12),
        max_seqlen_q=4,
        max_seqlen_kv=4,
        dtypes={"cu_seqlens_q": "int32", "cu_seqlens_q_padded": "int32"},
    )


def run(row: PackedRow, examples=(A, B, C), **kw):
    return compare([row], list(examples), pad_seq_to_mult=2, padding_ids={EOS, PAD}, special_ids=SPECIAL, **kw)


def kinds(report) -> set[Invariant]:
    return {v.invariant for v in report.violations}


def test_correct_packing_holds_every_invariant():
    report = run(aligned_row())
    assert report.ok, report.summary()
    assert [(s.key, s.start, s.real) for s in report.rows[0].segments] == [("#0", 0, 4), ("#1", 4, 2), ("#2", 6, 3)]
    assert report.packed_trained == report.unpacked_trained == 6
    report.assert_ok()


def test_genuine_eos_masked_is_a_loss_mask_violation_tagged_eos():
    row = aligned_row()
    row = replace(row, loss_mask=(0, 1, 0, 1) + row.loss_mask[4:])  # packed path masks the EOS input of A
    report = run(row)
    assert kinds(report) == {Invariant.LOSS_MASK}
    (v,) = report.violations
    assert (v.row, v.position, v.expected, v.got) == (0, 2, 1, 0)
    assert "input:eos" in v.tags
    with pytest.raises(InvariantFailure) as info:
        report.assert_ok()
    assert info.value.violations == report.violations and "position 2" in str(info.value)


def test_padding_that_trains_is_reported():
    row = aligned_row()
    row = replace(row, loss_mask=row.loss_mask[:9] + (1, 0, 0))  # C's alignment slot trains
    report = run(row)
    assert kinds(report) == {Invariant.PADDING_NEVER_TRAINS}
    assert report.violations[0].position == 9 and "padding:eos" in report.violations[0].tags


def test_padding_row_must_train_nothing():
    pad_row = replace(aligned_row(), padding_row=True)
    assert kinds(run(pad_row, examples=())) == {Invariant.PADDING_NEVER_TRAINS}
    silent = replace(pad_row, loss_mask=(0,) * 12)
    assert run(silent, examples=()).ok


def test_off_by_one_boundaries_are_reported():
    row = aligned_row()
    shifted = replace(row, cu_seqlens_q_padded=(0, 5, 6, 10, 12), cu_seqlens_kv_padded=(0, 5, 6, 10, 12))
    assert Invariant.PHYSICAL_BOUNDARIES in kinds(run(shifted))
    short = replace(row, cu_seqlens_q=(0, 3, 5, 8, 8), cu_seqlens_kv=(0, 3, 5, 8, 8))
    report = run(short)
    assert kinds(report) == {Invariant.LOGICAL_BOUNDARIES}
    assert "drops-real-tokens" in report.violations[0].tags


def test_kv_boundaries_must_match_q():
    row = replace(aligned_row(), cu_seqlens_kv=(0, 4, 6, 10, 12))
    assert kinds(run(row)) == {Invariant.LOGICAL_BOUNDARIES}


def test_position_ids_not_restarting_are_reported():
    row = aligned_row()
    row = replace(row, position_ids=(0, 1, 2, 3, 4, 5) + row.position_ids[6:])
    report = run(row)
    assert kinds(report) == {Invariant.POSITION_IDS}
    assert [v.position for v in report.violations] == [4, 5]


def test_alignment_is_checked_against_pad_seq_to_mult():
    row = aligned_row()  # C's physical segment is 4 = 3 real + 1 pad: fine for 2, wrong for 4
    assert Invariant.ALIGNMENT in kinds(compare([row], [A, B, C], pad_seq_to_mult=4, padding_ids={EOS, PAD}))


def test_int64_boundaries_and_wrong_max_seqlen_are_reported():
    row = replace(aligned_row(), dtypes={"cu_seqlens_q": "int64"}, max_seqlen_q=3, max_seqlen_kv=3)
    assert kinds(run(row)) == {Invariant.BOUNDARY_DTYPE, Invariant.MAX_SEQLEN}
    static = replace(aligned_row(), max_seqlen_q=12, max_seqlen_kv=12)
    assert not run(static).ok and run(static, static_max_seqlen=True).ok


def test_merged_segments_and_lost_examples_are_reported():
    merged = replace(
        aligned_row(),
        cu_seqlens_q=(0, 6, 9, 9),
        cu_seqlens_q_padded=(0, 6, 10, 12),
        cu_seqlens_kv=(0, 6, 9, 9),
        cu_seqlens_kv_padded=(0, 6, 10, 12),
    )
    assert Invariant.PHYSICAL_BOUNDARIES in kinds(run(merged))
    truncated = aligned_row()  # the last example cut: C's last real token replaced by padding
    truncated = replace(truncated, tokens=truncated.tokens[:8] + (EOS,) + truncated.tokens[9:])
    report = run(truncated)
    assert Invariant.PACKED_ONCE in kinds(report)


def test_an_example_longer_than_the_pack_may_be_cut_to_the_pack():
    long = Example(
        "#9",
        tokens=(20, 21, 22, 23, 24, 25),
        labels=(21, 22, 23, 24, 25, EOS),
        loss_mask=(0, 1, 1, 1, 1, 1),
        position_ids=(0, 1, 2, 3, 4, 5),
    )
    row = PackedRow(
        tokens=(20, 21, 22, 23),
        labels=(21, 22, 23, 24),
        loss_mask=(0, 1, 1, 1),
        position_ids=(0, 1, 2, 3),
        cu_seqlens_q=(0, 4),
        max_seqlen_q=4,
    )
    assert compare([row], [long], pack_size=4).ok
    assert not compare([], [long], pack_size=8).ok  # fits a pack: missing is a violation
    assert compare([], [long], pack_size=4).ok  # documented skip of an over-long example


def test_violation_text_names_row_position_and_both_values():
    row = aligned_row()
    row = replace(row, labels=row.labels[:4] + (99,) + row.labels[5:])
    (v,) = run(row).violations
    assert v.invariant is Invariant.LABELS
    assert (
        v.text()
        == "labels-equal-unpacked [wrong-targets]: row 0, position 4: expected 9, got 99 (example #1, token 0 of 2)"
    )


# --- impact: a red is a training defect, a harmless difference is no violation (issue 22) ---


def test_causal_tail_counted_in_the_logical_segment_is_no_violation():
    """MB counting the slot after C's last real token (its label-only end, or eod padding) inside
    C's logical segment costs nothing: nothing trains there and no real token attends forward."""
    row = aligned_row()
    tail = replace(row, cu_seqlens_q=(0, 4, 6, 10, 10), cu_seqlens_kv=(0, 4, 6, 10, 10))
    assert run(tail).ok, run(tail).summary()
    # the same slot trained is padding that trains, named as such
    trains = replace(tail, loss_mask=row.loss_mask[:9] + (1, 0, 0))
    assert {v.training_impact.value for v in run(trains).violations} == {"trains-padding"}


def test_logical_segment_past_its_physical_segment_is_cross_document_attention():
    row = aligned_row()
    past = replace(row, cu_seqlens_q=(0, 5, 7, 10, 10), cu_seqlens_kv=(0, 5, 7, 10, 10))
    report = run(past)
    assert {(v.invariant, v.training_impact.value) for v in report.violations} == {
        (Invariant.LOGICAL_BOUNDARIES, "cross-document-attention")
    }


def test_logical_cut_of_an_untrained_token_is_no_violation_of_a_trained_one_is():
    untrained_tail = Example("#3", tokens=(13, 14, 15), labels=(14, 15, 3), loss_mask=(1, 1, 0), position_ids=(0, 1, 2))
    row = PackedRow(
        tokens=(13, 14, 15, EOS),
        labels=(14, 15, 3, EOS),
        loss_mask=(1, 1, 0, 0),
        position_ids=(0, 1, 2, 3),
        cu_seqlens_q=(0, 2),
        cu_seqlens_q_padded=(0, 4),
        cu_seqlens_kv=(0, 2),
        cu_seqlens_kv_padded=(0, 4),
        max_seqlen_q=4,
        max_seqlen_kv=4,
    )
    assert run(row, examples=(untrained_tail,)).ok
    cut_trained = replace(row, cu_seqlens_q=(0, 1), cu_seqlens_kv=(0, 1))
    (v,) = run(cut_trained, examples=(untrained_tail,)).violations
    assert v.training_impact.value == "drops-trained-token" and "drops-real-tokens" in v.tags


def test_loss_mask_impact_says_which_way_it_differs():
    row = aligned_row()
    dropped = replace(row, loss_mask=(0, 0) + row.loss_mask[2:])
    assert {v.training_impact.value for v in run(dropped).violations} == {"drops-trained-token"}
    prompt_trains = replace(row, loss_mask=(1,) + row.loss_mask[1:])
    assert {v.training_impact.value for v in run(prompt_trains).violations} == {"trains-masked-token"}


def test_a_label_nobody_trains_on_is_no_violation():
    row = aligned_row()
    masked_label = replace(row, labels=row.labels[:6] + (99,) + row.labels[7:])  # C's token 0: masked both ways
    assert run(masked_label).ok
