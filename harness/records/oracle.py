"""The differential oracle's records: invariants, canonical rows and examples, violations, reports.

Kept apart from the checks (:mod:`harness.suite.oracle.differential`, :mod:`harness.suite.oracle.boundaries`,
:mod:`harness.suite.oracle.stepcheck`) because every check and every caller (adapters, suites, the
plugin's known-failure matching) needs these types, while the checks need each other not at all.
Pure Python: nothing here imports torch or Megatron-Bridge.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.records.impact import Impact


class Invariant(enum.StrEnum):
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

    # --- forward suites (harness/suite/oracle/stepcheck.py): what MB's step function handed the model
    LOGITS = "logits-equal-unpacked"  # per real token, fp32 CPU, within the suite's tolerance
    TOKEN_LOSS = "token-loss-equals-unpacked"  # the model's per-token loss, per real token
    LOSS_TOTALS = "loss-totals-equal-unpacked"  # MB's loss function: (loss sum, token count) per micro-batch
    PARAMS = "packed-seq-params-contract"  # qkv_format thd, 1-D non-empty boundaries, no extra fields
    FAST_PATH = "fast-path-contract"  # what MB documents as its fast path: no padded kernels, no host syncs

    # --- parallel layouts (suites/_layouts.py): every rank holds its part, and the parts make the whole
    CP_PARTITION = "cp-rank-holds-its-slice"  # TE's load-balanced THD layout over the physical boundaries
    PP_STAGE_INPUTS = "pp-stage-gets-what-it-needs"  # boundaries on every stage, inputs first, targets last


#: What breaking an invariant does to training when the violation does not say otherwise (the
#: loss mask and logical boundaries decide per violation: see the checks that build them).
DEFAULT_IMPACT: dict[Invariant, Impact] = {
    Invariant.SEGMENT_IS_EXAMPLE: Impact.WRONG_TARGETS,
    Invariant.PACKED_ONCE: Impact.DROPS_TRAINED_TOKEN,
    Invariant.TOKENS: Impact.WRONG_TARGETS,
    Invariant.LABELS: Impact.WRONG_TARGETS,
    Invariant.LOSS_MASK: Impact.DROPS_TRAINED_TOKEN,
    Invariant.POSITION_IDS: Impact.WRONG_LOGITS,
    Invariant.PADDING_NEVER_TRAINS: Impact.TRAINS_PADDING,
    Invariant.PHYSICAL_BOUNDARIES: Impact.CROSS_DOCUMENT_ATTENTION,
    Invariant.LOGICAL_BOUNDARIES: Impact.DROPS_TRAINED_TOKEN,
    Invariant.ALIGNMENT: Impact.CRASH,  # TE's THD CP split and SP's scatter refuse unaligned segments
    Invariant.BOUNDARY_DTYPE: Impact.CRASH,  # TE's THD kernels take int32 boundaries only
    Invariant.MAX_SEQLEN: Impact.WRONG_LOGITS,
    Invariant.SHAPES: Impact.CRASH,
    Invariant.LOGITS: Impact.WRONG_LOGITS,
    Invariant.TOKEN_LOSS: Impact.WRONG_LOGITS,
    Invariant.LOSS_TOTALS: Impact.WRONG_LOSS_NORMALISATION,
    Invariant.PARAMS: Impact.CRASH,
    Invariant.FAST_PATH: Impact.PERF_CONTRACT,
    Invariant.CP_PARTITION: Impact.CROSS_DOCUMENT_ATTENTION,  # attention reads the rank's rows where the layout says
    Invariant.PP_STAGE_INPUTS: Impact.CROSS_DOCUMENT_ATTENTION,  # a stage without boundaries attends across them
}


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
    expected: object
    got: object
    detail: str = ""
    tags: tuple[str, ...] = ()  # e.g. "input:eos": what known-failure entries match on
    impact: Impact | None = None  # None: the invariant's default (DEFAULT_IMPACT)

    @property
    def training_impact(self) -> Impact:
        """What this violation does to training (never None: every red names its cost)."""
        return self.impact if self.impact is not None else DEFAULT_IMPACT[self.invariant]

    def text(self) -> str:
        return violation_line(
            self.invariant.value,
            self.training_impact.value,
            self.row,
            self.position,
            repr(self.expected),
            repr(self.got),
            self.detail,
        )


def violation_line(
    invariant: str, impact: str, row: object, position: object, expected: str, got: str, detail: str = ""
) -> str:
    """One violation as a person reads it, from the record or from its JSON form (results.json):
    ``invariant [impact]: row r, position p: expected X, got Y (detail)``."""
    where = f"row {row}" + (f", position {position}" if position is not None else "")
    tail = f" ({detail})" if detail else ""
    return f"{invariant} [{impact}]: {where}: expected {expected}, got {got}{tail}"


def counts_line(counts: Mapping[str, int]) -> str:
    """``logical-boundaries x4, padding-never-trains x1``: most frequent first."""
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


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
            key = f"{v.invariant.value} [{v.training_impact.value}]"
            by_kind[key] = by_kind.get(key, 0) + 1
        head = ", ".join(f"{k} x{n}" for k, n in sorted(by_kind.items()))
        trains = any(v.invariant in (Invariant.LOSS_MASK, Invariant.PADDING_NEVER_TRAINS) for v in self.violations)
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


def role_tags(prefix: str, token: int | None, roles: Mapping[int, tuple[str, ...]]) -> tuple[str, ...]:
    """Tags naming the special-token roles of ``token`` (e.g. ``input:eos``) for known-failure matching."""
    return tuple(f"{prefix}:{r}" for r in roles.get(token, ())) if token is not None else ()
