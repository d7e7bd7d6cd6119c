"""The oracle's checks of MB's THD metadata: boundaries, alignment, boundary dtypes, ``max_seqlen``.

Split from :mod:`harness.oracle.differential` (which finds segments from content and checks per
real token): these checks take the segments found there as the truth and judge MB's
``cu_seqlens*`` and ``max_seqlen*`` against them. Physical boundaries (``cu_seqlens_q_padded``, or
``cu_seqlens_q`` without it) must start a segment at each example and cover only padding
elsewhere; logical boundaries (``cu_seqlens_q``) hold each example's real length; a physical
segment is a multiple of ``pad_seq_to_mult``; boundary tensors are int32; ``max_seqlen`` is the
longest physical segment (with ``pad_cu_seqlens``, at least that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.oracle.records import Example, Invariant, PackedRow, Segment, Violation, role_tags


def strip_row_padding(values: Sequence[int]) -> list[int]:
    """Boundaries without trailing repeats (rows of a batch are padded to one width)."""
    out = list(values)
    while len(out) > 1 and out[-1] == out[-2]:
        out.pop()
    return out


def check_boundaries(
    row_i: int,
    row: PackedRow,
    segs: list[Segment],
    mult: int,
    by_key: Mapping[str, Example],
    roles: Mapping[int, tuple[str, ...]],
    out: list[Violation],
) -> None:
    width = len(row.tokens)
    if row.cu_seqlens_q is None:
        return  # a row without THD metadata (return_cu_seqlen=False): nothing to check here
    physical_raw = row.cu_seqlens_q_padded if row.cu_seqlens_q_padded is not None else row.cu_seqlens_q
    physical = strip_row_padding(physical_raw)
    logical = list(row.cu_seqlens_q)
    if len(logical) < len(physical):
        out.append(
            Violation(
                Invariant.LOGICAL_BOUNDARIES,
                row_i,
                None,
                f"{len(physical)} entries",
                len(logical),
                "cu_seqlens_q shorter than the physical boundaries",
            )
        )
        return
    if physical[:1] != [0] or any(b > a for a, b in zip(physical[1:], physical)) or physical[-1] > width:
        out.append(
            Violation(
                Invariant.PHYSICAL_BOUNDARIES,
                row_i,
                None,
                f"0 <= ascending <= {width}",
                physical,
                "boundaries must start at 0, ascend and stay inside the row",
            )
        )
        return
    starts = {s.start: s for s in segs}
    claimed = set(physical)
    for s in segs:
        if s.start not in claimed:
            out.append(
                Violation(
                    Invariant.PHYSICAL_BOUNDARIES,
                    row_i,
                    s.start,
                    "a boundary at the example's start",
                    physical,
                    f"example {s.key} starts here",
                )
            )
    for i in range(len(physical) - 1):
        a, b = physical[i], physical[i + 1]
        seg = starts.get(a)
        inside = [s for s in segs if a < s.start < b or (s.start == a and s is not seg)]
        if inside:
            out.append(
                Violation(
                    Invariant.PHYSICAL_BOUNDARIES,
                    row_i,
                    inside[0].start,
                    "one example per segment",
                    (a, b),
                    f"example {inside[0].key} starts inside physical segment {i}",
                )
            )
        logical_len = logical[i + 1] - logical[i]
        if seg is None:  # a padding-only segment (e.g. tail padding made a pseudo-sequence)
            if not 0 <= logical_len <= b - a:
                out.append(
                    Violation(
                        Invariant.LOGICAL_BOUNDARIES,
                        row_i,
                        a,
                        f"0..{b - a} (padding)",
                        logical_len,
                        f"padding-only segment {i}",
                    )
                )
            continue
        if b - a < seg.real:
            out.append(
                Violation(
                    Invariant.PHYSICAL_BOUNDARIES,
                    row_i,
                    a,
                    f">= {seg.real}",
                    b - a,
                    f"physical segment {i} cuts example {seg.key}",
                )
            )
        if logical_len != seg.real:
            tags = role_tags("last-input", by_key[seg.key].tokens[seg.real - 1], roles)
            if logical_len < seg.real:
                tags += ("drops-real-tokens",)
            elif logical_len == seg.real + 1 and seg.stop < len(row.tokens):
                tags += ("counts-shifted-out-token",) + role_tags("shifted-out", row.tokens[seg.stop], roles)
            else:
                tags += ("counts-padding",)
            out.append(
                Violation(
                    Invariant.LOGICAL_BOUNDARIES,
                    row_i,
                    a,
                    seg.real,
                    logical_len,
                    f"cu_seqlens_q length of segment {i} (example {seg.key})",
                    tags,
                )
            )
        if mult > 1 and (b - a) % mult:
            out.append(
                Violation(
                    Invariant.ALIGNMENT,
                    row_i,
                    a,
                    f"a multiple of {mult}",
                    b - a,
                    f"physical length of example {seg.key} ({seg.real} real tokens)",
                )
            )
    for name in ("cu_seqlens_kv", "cu_seqlens_kv_padded"):
        q_name = name.replace("_kv", "_q")
        if getattr(row, name) is not None and getattr(row, name) != getattr(row, q_name):
            out.append(
                Violation(
                    Invariant.LOGICAL_BOUNDARIES,
                    row_i,
                    None,
                    getattr(row, q_name),
                    getattr(row, name),
                    f"{name} must equal {q_name} for self-attention",
                )
            )


def check_metadata(row_i: int, row: PackedRow, segs: list[Segment], static_max: bool, out: list[Violation]) -> None:
    for name, dtype in row.dtypes.items():
        if name.startswith("cu_seqlens") and dtype != "int32":
            out.append(Violation(Invariant.BOUNDARY_DTYPE, row_i, None, "int32", dtype, name))
    if row.cu_seqlens_q is None or row.max_seqlen_q is None:
        return
    physical = strip_row_padding(row.cu_seqlens_q_padded if row.cu_seqlens_q_padded is not None else row.cu_seqlens_q)
    longest = max((b - a for a, b in zip(physical, physical[1:])), default=0)
    ok = row.max_seqlen_q >= longest if static_max else row.max_seqlen_q == longest
    if not ok:
        want = f">= {longest}" if static_max else longest
        out.append(
            Violation(
                Invariant.MAX_SEQLEN,
                row_i,
                None,
                want,
                row.max_seqlen_q,
                "longest physical segment" + (" (pad_cu_seqlens: static bound)" if static_max else ""),
            )
        )
    if row.max_seqlen_kv is not None and row.max_seqlen_kv != row.max_seqlen_q:
        out.append(
            Violation(
                Invariant.MAX_SEQLEN,
                row_i,
                None,
                row.max_seqlen_q,
                row.max_seqlen_kv,
                "max_seqlen_kv must equal max_seqlen_q",
            )
        )
