"""The oracle's checks of MB's THD metadata: boundaries, alignment, boundary dtypes, ``max_seqlen``.

Split from :mod:`harness.suite.oracle.differential` (which finds segments from content and checks per
real token): these checks take the segments found there as the truth and judge MB's
``cu_seqlens*`` and ``max_seqlen*`` against them. Physical boundaries (``cu_seqlens_q_padded``, or
``cu_seqlens_q`` without it) must start a segment at each example and cover only padding
elsewhere; logical boundaries (``cu_seqlens_q``) hold each example's real length; a physical
segment is a multiple of ``pad_seq_to_mult``; boundary tensors are int32; ``max_seqlen`` is the
longest physical segment (with ``pad_cu_seqlens``, at least that).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from harness.records.impact import Impact
from harness.records.oracle import Example, Invariant, PackedRow, Segment, Violation, role_tags


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
                (),
                Impact.CRASH,
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
                (),
                Impact.CRASH,
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
                        (),
                        Impact.CROSS_DOCUMENT_ATTENTION,
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
                    (),
                    Impact.DROPS_TRAINED_TOKEN,
                )
            )
        _check_coverage(row_i, i, a, b, logical_len, seg, by_key[seg.key], roles, out)
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
                    (),
                    Impact.CROSS_DOCUMENT_ATTENTION,
                )
            )


def _check_coverage(
    row_i: int,
    i: int,
    a: int,
    b: int,
    logical_len: int,
    seg: Segment,
    ex: Example,
    roles: Mapping[int, tuple[str, ...]],
    out: list[Violation],
) -> None:
    """The logical segment of example ``seg`` covers its trained tokens and stays in ``[a, b)``.

    A logical length that differs from the real-token count is a defect only where it costs
    training: shorter, when a token the unpacked path trains falls outside attention (its logits
    are never computed); longer than the physical segment, when attention runs into the next
    document's slots. Longer within its physical segment is the causal tail (a chat's label-only
    last end-of-turn, trailing eod padding): no real token attends forward to it, and the padding
    check already fails it if it trains, so it is no violation here.
    """
    if logical_len == seg.real:
        return
    tags = role_tags("last-input", ex.tokens[seg.real - 1], roles)
    if logical_len < seg.real:
        cut = range(max(logical_len, 0), seg.real)
        trained = [j for j in cut if j < len(ex.loss_mask) and ex.loss_mask[j]]
        if trained:
            out.append(
                Violation(
                    Invariant.LOGICAL_BOUNDARIES,
                    row_i,
                    a + trained[0],
                    f">= {trained[-1] + 1} (covers every trained token)",
                    logical_len,
                    f"cu_seqlens_q length of segment {i} (example {seg.key}, {seg.real} real tokens) leaves "
                    f"{len(trained)} trained token(s) outside attention",
                    tags + ("drops-real-tokens",),
                    Impact.DROPS_TRAINED_TOKEN,
                )
            )
        return
    if logical_len > b - a:
        out.append(
            Violation(
                Invariant.LOGICAL_BOUNDARIES,
                row_i,
                a,
                f"<= {b - a} (inside its physical segment)",
                logical_len,
                f"cu_seqlens_q length of segment {i} (example {seg.key}) runs past its physical segment",
                tags + ("past-physical",),
                Impact.CROSS_DOCUMENT_ATTENTION,
            )
        )


def check_metadata(
    row_i: int, row: PackedRow, segs: list[Segment], static_max: bool, out: list[Violation], mult: int = 1
) -> None:
    _check_padded_variants(row_i, row, static_max, mult, out)
    for name, dtype in row.dtypes.items():
        if name.startswith("cu_seqlens") and dtype != "int32":
            out.append(Violation(Invariant.BOUNDARY_DTYPE, row_i, None, "int32", dtype, name))
    if row.cu_seqlens_q is None or row.max_seqlen_q is None:
        return
    physical = strip_row_padding(row.cu_seqlens_q_padded if row.cu_seqlens_q_padded is not None else row.cu_seqlens_q)
    longest = max((b - a for a, b in itertools.pairwise(physical)), default=0)
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
                (),
                # too small: kernels size their tiles by it and miss the tail; too large: only compute
                Impact.WRONG_LOGITS if row.max_seqlen_q < longest else Impact.PERF_CONTRACT,
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


def _check_padded_variants(row_i: int, row: PackedRow, static_max: bool, mult: int, out: list[Violation]) -> None:
    """Padded boundary variants only where padding can exist (MB's documented fast path).

    ``get_packed_seq_params``: "Otherwise, just use cu_seqlens_padded to avoid slower TE kernel":
    with ``pad_seq_to_mult`` 1 and no static ``pad_cu_seqlens`` shape nothing is padded inside a
    sequence, so MB documents the logical boundaries alone ("When > 1, both logical and physically
    padded cumulative sequence offsets are returned for THD CP"); a ``cu_seqlens_q_padded`` there
    only sends Transformer Engine down its padded THD path.
    """
    if mult > 1 or static_max or row.cu_seqlens_q_padded is None or row.cu_seqlens_q is None:
        return
    if True:
        out.append(
            Violation(
                Invariant.FAST_PATH,
                row_i,
                None,
                "no cu_seqlens_q_padded (pad_seq_to_mult 1: nothing is padded inside a sequence)",
                list(row.cu_seqlens_q_padded),
                "padded boundaries without alignment padding send TE down its slower padded THD kernel",
                ("padded-variant-without-padding",),
                Impact.PERF_CONTRACT,
            )
        )
