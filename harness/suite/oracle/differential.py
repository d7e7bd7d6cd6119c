"""Packed vs unpacked, per real token: segment discovery and the invariants it checks.

Pure Python on canonical rows (plain int lists): nothing here imports torch or Megatron-Bridge,
so the oracle can never share a bug with the code under test and is unit-tested in milliseconds.

How a packed row is read. The unpacked reference gives, per example, the exact token ids MB's
unpacked collate feeds the model. Scanning the packed row left to right, a *segment* starts where
an unused example's tokens appear in full; its real part is that example's length. Everything
that is not the real part of a segment is padding (alignment padding, tail padding, a padding
row). Segments are found from content alone, never from MB's boundaries, so wrong boundaries
show up as a disagreement instead of being trusted. Examples carry a unique marker token early
on (see :mod:`harness.suite.oracle.corpus`), so two examples never match at the same place.

The invariants (each a :class:`Invariant`; a broken one is a FAIL, a regression, and every
violation names its training impact, :class:`~harness.records.impact.Impact`: a difference that
costs nothing is not reported at all):

* every packed segment is an unpacked example, and every example is packed exactly once;
* per real token: tokens, labels, loss mask and position ids equal the unpacked ones (a label
  neither path trains on is never read: no violation);
* padding never trains (loss mask 0 outside real tokens; every position of a padding row);
* MB's physical boundaries (``cu_seqlens_q_padded``, or ``cu_seqlens_q`` without it) start a
  segment at each example and cover only padding elsewhere; logical boundaries
  (``cu_seqlens_q``) cover every trained token of their example and stay inside its physical
  segment (a causal tail they also cover trains nothing and is attended by no real token);
  alignment: a physical segment is a multiple of ``pad_seq_to_mult`` (CP's THD split and SP's
  scatter need it); padded variants only where something can be padded (MB's fast path);
* boundary tensors are int32 (Transformer Engine's THD kernels require it); ``max_seqlen`` is the
  longest physical segment (or, with ``pad_cu_seqlens``, at least that: a static upper bound).

This module finds segments and checks per real token and padding; the boundary and metadata
checks live in :mod:`harness.suite.oracle.boundaries`, the records in :mod:`harness.records.oracle`
(re-exported here, so callers import them from this module as before).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from harness.records.impact import Impact
from harness.records.oracle import (
    BOUNDARY_INVARIANTS,
    Example,
    Invariant,
    InvariantFailure,
    PackedRow,
    Report,
    RowReport,
    Segment,
    Violation,
    role_tags,
)
from harness.suite.oracle.boundaries import check_boundaries, check_metadata, strip_row_padding


def _find_segments(
    row: PackedRow, examples: Sequence[Example], used: set[int], pack_size: int | None
) -> list[tuple[int, Segment]]:
    """Examples found in ``row`` from content alone (greedy left to right, each used once).

    An example longer than ``pack_size`` may appear cut to exactly ``pack_size`` tokens: MB
    documents that it truncates (or skips) sequences that exceed the pack.
    """
    by_first: dict[int, list[int]] = {}
    for i, ex in enumerate(examples):
        if ex.tokens:
            by_first.setdefault(ex.tokens[0], []).append(i)
    tokens = row.tokens
    found: list[tuple[int, Segment]] = []
    p = 0
    while p < len(tokens):
        match, length = None, 0
        for i in by_first.get(tokens[p], ()):
            ex = examples[i]
            n = len(ex.tokens)
            if pack_size is not None and ex.length > pack_size:
                n = min(n, pack_size)
            if i not in used and n > length and tuple(tokens[p : p + n]) == ex.tokens[:n]:
                match, length = i, n
        if match is None:
            p += 1
            continue
        used.add(match)
        seg = Segment(examples[match].key, p, length)
        found.append((match, seg))
        p = seg.stop
    return found


def _check_tokens(
    row_i: int, row: PackedRow, ex: Example, seg: Segment, roles: Mapping[int, tuple[str, ...]], out: list[Violation]
) -> None:
    fields = (
        (Invariant.LABELS, row.labels, ex.labels),
        (Invariant.LOSS_MASK, row.loss_mask, ex.loss_mask),
        (Invariant.POSITION_IDS, row.position_ids, ex.position_ids),
    )
    for inv, packed, unpacked in fields:
        for j in range(seg.real):
            got = packed[seg.start + j] if seg.start + j < len(packed) else None
            if got == unpacked[j]:
                continue
            harmful, impact = _impact(inv, j, seg, row, ex)
            if not harmful:
                continue
            tags = role_tags("input", ex.tokens[j], roles) + role_tags("label", ex.labels[j], roles)
            out.append(
                Violation(
                    inv,
                    row_i,
                    seg.start + j,
                    unpacked[j],
                    got,
                    f"example {ex.key}, token {j} of {seg.real}",
                    tags,
                    impact,
                )
            )


def _impact(inv: Invariant, j: int, seg: Segment, row: PackedRow, ex: Example) -> tuple[bool, Impact | None]:
    """Whether a differing field at real token ``j`` costs training, and what (None: the default).

    A label differs harmlessly where neither path trains the position (the label is never read);
    a loss mask that differs either trains what unpacked masks or drops what unpacked trains.
    """
    p = seg.start + j
    packed_trains = bool(row.loss_mask[p]) if p < len(row.loss_mask) else False
    if inv is Invariant.LABELS:
        return bool(packed_trains or ex.loss_mask[j]), Impact.WRONG_TARGETS
    if inv is Invariant.LOSS_MASK:
        trains_masked = packed_trains and not ex.loss_mask[j]
        return True, Impact.TRAINS_MASKED_TOKEN if trains_masked else Impact.DROPS_TRAINED_TOKEN
    return True, None


def _check_padding(
    row_i: int,
    row: PackedRow,
    real: set[int],
    shifted_out: dict[int, int],
    padding_ids: set[int],
    roles: Mapping[int, tuple[str, ...]],
    out: list[Violation],
) -> None:
    for p, m in enumerate(row.loss_mask):
        if m and (row.padding_row or p not in real):
            what = "padding row" if row.padding_row else "not a real token of any example"
            token = row.tokens[p] if p < len(row.tokens) else None
            tags = role_tags("padding", token, roles) + (("padding-row",) if row.padding_row else ())
            out.append(Violation(Invariant.PADDING_NEVER_TRAINS, row_i, p, 0, m, what, tags))
    if padding_ids:
        for p, t in enumerate(row.tokens):
            if shifted_out.get(p) == t:
                continue  # an example's last token, stored before its padding: only ever a label unpacked
            if p not in real and t not in padding_ids and not row.padding_row:
                out.append(
                    Violation(
                        Invariant.SEGMENT_IS_EXAMPLE,
                        row_i,
                        p,
                        f"a padding id {sorted(padding_ids)}",
                        t,
                        "content that matches no unpacked example",
                    )
                )
                break  # one per row: the rest of a broken segment says nothing new


def compare(
    rows: Sequence[PackedRow],
    examples: Sequence[Example],
    *,
    pad_seq_to_mult: int = 1,
    padding_ids: Iterable[int] = (),
    static_max_seqlen: bool = False,
    expect_all_packed: bool = True,
    pack_size: int | None = None,
    special_ids: Mapping[str, int | None] | None = None,
    repeats: bool = False,
) -> Report:
    """Check packed ``rows`` (every row of a packed dataset, in order) against ``examples``.

    ``padding_ids``: the tokenizer's ids MB may use as filler (eos, pad, eod); a position outside
    every example holding another id is content the oracle cannot explain. ``expect_all_packed``:
    every example must appear exactly once (False when ``rows`` are a subset, e.g. one micro-batch),
    except examples longer than ``pack_size``, which MB documents it skips when packing.
    ``special_ids`` (name -> id, e.g. ``{"eos": 2}``) only label violations with tags.
    ``repeats``: rows may repeat examples (a samples mapping over several epochs); every example
    must then appear at least once.
    """
    roles: dict[int, tuple[str, ...]] = {}
    for name, tid in (special_ids or {}).items():
        if tid is not None:
            roles[tid] = roles.get(tid, ()) + (name.removesuffix("_id"),)
    by_key = {ex.key: ex for ex in examples}
    used: set[int] = set()
    pads = set(padding_ids)
    reports: list[RowReport] = []
    violations: list[Violation] = []
    packed_trained = 0
    for r, row in enumerate(rows):
        out: list[Violation] = []
        widths = {len(row.tokens), len(row.labels), len(row.loss_mask), len(row.position_ids)}
        if len(widths) != 1:
            out.append(
                Violation(
                    Invariant.SHAPES, r, None, "tokens/labels/loss_mask/position_ids of one width", sorted(widths)
                )
            )
        row_used = set() if repeats else used
        found = [] if row.padding_row else _find_segments(row, examples, row_used, pack_size)
        used |= row_used
        segs = [s for _, s in found]
        for i, seg in found:
            _check_tokens(r, row, examples[i], seg, roles, out)
        real = {p for s in segs for p in range(s.start, s.stop)}
        shifted_out = {s.stop: examples[i].labels[s.real - 1] for i, s in found if s.real}
        _check_padding(r, row, real, shifted_out, pads, roles, out)
        if not row.padding_row:
            check_boundaries(r, row, segs, pad_seq_to_mult, by_key, roles, out)
            check_metadata(r, row, segs, static_max_seqlen, out, pad_seq_to_mult)
        packed_trained += sum(1 for m in row.loss_mask if m)
        reports.append(RowReport(r, segs, out, len(row.tokens)))
        violations += out
    if expect_all_packed:
        for i, ex in enumerate(examples):
            if i not in used and (pack_size is None or ex.length <= pack_size):
                violations.append(
                    Violation(
                        Invariant.PACKED_ONCE,
                        -1,
                        None,
                        "packed once",
                        "not found",
                        f"example {ex.key} ({len(ex.tokens)} tokens) is in no packed row",
                    )
                )
    unpacked_trained = sum(sum(1 for m in ex.loss_mask if m) for i, ex in enumerate(examples) if i in used)
    return Report(reports, violations, unpacked_trained, packed_trained)


__all__ = [
    "BOUNDARY_INVARIANTS",
    "Example",
    "Invariant",
    "InvariantFailure",
    "PackedRow",
    "Report",
    "RowReport",
    "Segment",
    "Violation",
    "compare",
    "strip_row_padding",
]
