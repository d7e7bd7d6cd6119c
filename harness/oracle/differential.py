"""Packed vs unpacked, per real token: segment discovery and the invariants it checks.

Pure Python on canonical rows (plain int lists): nothing here imports torch or Megatron-Bridge,
so the oracle can never share a bug with the code under test and is unit-tested in milliseconds.

How a packed row is read. The unpacked reference gives, per example, the exact token ids MB's
unpacked collate feeds the model. Scanning the packed row left to right, a *segment* starts where
an unused example's tokens appear in full; its real part is that example's length. Everything
that is not the real part of a segment is padding (alignment padding, tail padding, a padding
row). Segments are found from content alone, never from MB's boundaries, so wrong boundaries
show up as a disagreement instead of being trusted. Examples carry a unique marker token early
on (see :mod:`harness.oracle.corpus`), so two examples never match at the same place.

The invariants (each a :class:`Invariant`; a broken one is a FAIL, a regression):

* every packed segment is an unpacked example, and every example is packed exactly once;
* per real token: tokens, labels, loss mask and position ids equal the unpacked ones;
* padding never trains (loss mask 0 outside real tokens; every position of a padding row);
* MB's physical boundaries (``cu_seqlens_q_padded``, or ``cu_seqlens_q`` without it) start a
  segment at each example and cover only padding elsewhere; logical boundaries
  (``cu_seqlens_q``) hold each example's real length; alignment: a physical segment is a
  multiple of ``pad_seq_to_mult`` (documented; extra padding costs compute, not correctness);
* boundary tensors are int32 (Transformer Engine's THD kernels require it); ``max_seqlen`` is the
  longest physical segment (or, with ``pad_cu_seqlens``, at least that: a static upper bound).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class Invariant(str, enum.Enum):
    """What a violation broke; the value is what reports and tests name."""

    SEGMENT_IS_EXAMPLE = "segment-is-example"
    PACKED_ONCE = "example-packed-once"
    TOKENS = "tokens-equal-unpacked"
    LABELS = "labels-equal-unpacked"
    LOSS_MASK = "loss-mask-equals-unpacked"
    POSITION_IDS = "position-ids-equal-unpacked"
    PADDING_NEVER_TRAINS = "padding-never-trains"
    PHYSICAL_BOUNDARIES = "physical-boundaries"
    LOGICAL_BOUNDARIES = "logical-boundaries"
    ALIGNMENT = "alignment"
    BOUNDARY_DTYPE = "boundary-dtype-int32"
    MAX_SEQLEN = "max-seqlen"
    SHAPES = "row-shapes"

    # --- forward suites (harness/oracle/stepcheck.py): what MB's step function handed the model
    LOGITS = "logits-equal-unpacked"  # per real token, fp32 CPU, within the suite's tolerance
    TOKEN_LOSS = "token-loss-equals-unpacked"  # the model's per-token loss, per real token
    LOSS_TOTALS = "loss-totals-equal-unpacked"  # MB's loss function: (loss sum, token count) per micro-batch
    PARAMS = "packed-seq-params-contract"  # qkv_format thd, 1-D non-empty boundaries, no extra fields


BOUNDARY_INVARIANTS = frozenset(
    {
        Invariant.PHYSICAL_BOUNDARIES,
        Invariant.LOGICAL_BOUNDARIES,
        Invariant.ALIGNMENT,
        Invariant.BOUNDARY_DTYPE,
        Invariant.MAX_SEQLEN,
    }
)
"""What ``PackedSeqParams`` carry: the invariants a params check is about."""


@dataclass(frozen=True)
class Example:
    """One example as MB's unpacked collate gives it: real positions only (length ``n``)."""

    key: str
    tokens: tuple[int, ...]
    labels: tuple[int, ...]
    loss_mask: tuple[int, ...]
    position_ids: tuple[int, ...]
    length: int = -1  # runtime length before any truncation by the unpacked collate (-1: len(tokens))

    def __post_init__(self) -> None:
        if self.length < 0:
            object.__setattr__(self, "length", len(self.tokens))
        n = len(self.tokens)
        if not (len(self.labels) == len(self.loss_mask) == len(self.position_ids) == n):
            raise ValueError(f"example {self.key}: unpacked fields have different lengths")


@dataclass(frozen=True)
class PackedRow:
    """One row of a packed batch as MB's packed collate gives it (canonical lists)."""

    tokens: tuple[int, ...]
    labels: tuple[int, ...]
    loss_mask: tuple[int, ...]
    position_ids: tuple[int, ...]
    cu_seqlens_q: tuple[int, ...] | None = None
    cu_seqlens_q_padded: tuple[int, ...] | None = None
    cu_seqlens_kv: tuple[int, ...] | None = None
    cu_seqlens_kv_padded: tuple[int, ...] | None = None
    max_seqlen_q: int | None = None
    max_seqlen_kv: int | None = None
    dtypes: Mapping[str, str] = field(default_factory=dict)
    padding_row: bool = False  # the sampler's filler for an incomplete global batch


@dataclass(frozen=True)
class Segment:
    """One example inside a packed row: real tokens ``[start, start + real)``."""

    key: str
    start: int
    real: int

    @property
    def stop(self) -> int:
        return self.start + self.real


@dataclass(frozen=True)
class Violation:
    """One broken invariant, with where and both values (what a person needs to act)."""

    invariant: Invariant
    row: int
    position: int | None
    expected: Any
    got: Any
    detail: str = ""
    tags: tuple[str, ...] = ()  # e.g. "input:eos": what known-failure entries match on

    def text(self) -> str:
        where = f"row {self.row}" + (f", position {self.position}" if self.position is not None else "")
        tail = f" ({self.detail})" if self.detail else ""
        return f"{self.invariant.value}: {where}: expected {self.expected!r}, got {self.got!r}{tail}"


@dataclass
class RowReport:
    """What the oracle found in one packed row."""

    row: int
    segments: list[Segment]
    violations: list[Violation]
    width: int

    @property
    def real_positions(self) -> set[int]:
        return {p for s in self.segments for p in range(s.start, s.stop)}


@dataclass
class Report:
    """The oracle's verdict on a packed dataset: rows, unused examples, all violations."""

    rows: list[RowReport]
    violations: list[Violation]
    unpacked_trained: int  # loss-mask sum of the unpacked examples that were packed
    packed_trained: int  # loss-mask sum of the packed rows

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self, limit: int = 8) -> str:
        """One paragraph for an assertion message: counts per invariant, then the first few."""
        if self.ok:
            return "all invariants hold"
        by_kind: dict[str, int] = {}
        for v in self.violations:
            by_kind[v.invariant.value] = by_kind.get(v.invariant.value, 0) + 1
        head = ", ".join(f"{k} x{n}" for k, n in sorted(by_kind.items()))
        trains = {Invariant.LOSS_MASK.value, Invariant.PADDING_NEVER_TRAINS.value} & by_kind.keys()
        counts = (
            f"; trained positions packed {self.packed_trained} vs unpacked {self.unpacked_trained}" if trains else ""
        )
        lines = [f"packed != MB's own unpacked path: {head}{counts}"]
        lines += ["  " + v.text() for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more")
        return "\n".join(lines)

    def only(self, invariants: Iterable[Invariant]) -> Report:
        """The same report restricted to ``invariants`` (a suite that checks one layer)."""
        keep = set(invariants)
        rows = [
            RowReport(r.row, r.segments, [v for v in r.violations if v.invariant in keep], r.width) for r in self.rows
        ]
        return Report(
            rows, [v for v in self.violations if v.invariant in keep], self.unpacked_trained, self.packed_trained
        )

    def assert_ok(self) -> None:
        """Raise :class:`InvariantFailure` (a FAIL: a regression) when any invariant is broken."""
        if not self.ok:
            raise InvariantFailure(self.summary(), self.violations)

    def boundaries(self) -> list[dict[str, list[int]]]:
        """Per row, the boundaries derived from the unpacked reference (for params checks)."""
        out = []
        for r in self.rows:
            starts = [s.start for s in r.segments]
            out.append({"starts": starts, "real": [s.real for s in r.segments], "width": [r.width]})
        return out


class InvariantFailure(AssertionError):
    """Broken invariants, with the structured violations (known-failure entries match on them)."""

    def __init__(self, text: str, violations: Sequence[Violation]) -> None:
        super().__init__(text)
        self.violations = list(violations)


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


def _role_tags(prefix: str, token: int | None, roles: Mapping[int, tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(f"{prefix}:{r}" for r in roles.get(token, ())) if token is not None else ()


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
            if got != unpacked[j]:
                tags = _role_tags("input", ex.tokens[j], roles) + _role_tags("label", ex.labels[j], roles)
                out.append(
                    Violation(
                        inv, row_i, seg.start + j, unpacked[j], got, f"example {ex.key}, token {j} of {seg.real}", tags
                    )
                )


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
            tags = _role_tags("padding", token, roles) + (("padding-row",) if row.padding_row else ())
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


def strip_row_padding(values: Sequence[int]) -> list[int]:
    """Boundaries without trailing repeats (rows of a batch are padded to one width)."""
    out = list(values)
    while len(out) > 1 and out[-1] == out[-2]:
        out.pop()
    return out


def _check_boundaries(
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
            tags = _role_tags("last-input", by_key[seg.key].tokens[seg.real - 1], roles)
            if logical_len < seg.real:
                tags += ("drops-real-tokens",)
            elif logical_len == seg.real + 1 and seg.stop < len(row.tokens):
                tags += ("counts-shifted-out-token",) + _role_tags("shifted-out", row.tokens[seg.stop], roles)
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


def _check_metadata(row_i: int, row: PackedRow, segs: list[Segment], static_max: bool, out: list[Violation]) -> None:
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
            _check_boundaries(r, row, segs, pad_seq_to_mult, by_key, roles, out)
            _check_metadata(r, row, segs, static_max_seqlen, out)
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
]
