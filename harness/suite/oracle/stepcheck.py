"""What MB's step function handed the model, checked against MB's own unpacked path (pure Python).

The forward suites run MB's real ``forward_step`` (``gpt_step`` for offline packed SFT,
``vlm_step`` for in-batch packing) around MCore's real tiny ``GPTModel`` and record what the
model receives: the tensors, the ``PackedSeqParams`` MB built, the logits its output layer
computed, the per-token loss it returned, and the totals of MB's loss function. The adapters
turn that into the plain records below; nothing here imports torch or Megatron-Bridge.

Checks (each broken one is a :class:`~harness.suite.oracle.differential.Violation`):

* the model's inputs, read as a packed row (:func:`model_row`), pass every invariant of
  :func:`harness.suite.oracle.differential.compare` (tokens, labels, loss mask, position ids per real
  token; padding never trains; physical/logical boundaries; alignment; int32; ``max_seqlen``);
* :func:`check_params`: the ``PackedSeqParams`` contract MCore and MB document: ``qkv_format``
  ``"thd"``, 1-D boundaries with at least one sequence (nothing stripped to empty), a
  ``max_seqlen_q`` (MB precomputes it in every era, so TE never reads it back), and no
  field set beyond the ones MB's builder sets for a non-hybrid model (``total_tokens`` only for
  hybrid SSM models, never ``seq_idx``, CP groups...);
* :func:`check_outputs`: per real token, logits and per-token loss equal the unpacked run's;
* :func:`check_totals`: the loss function's (loss sum, token count) of a packed micro-batch
  equal the sums of the unpacked runs of the examples packed in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from harness.records.impact import Impact
from harness.records.oracle import Invariant, PackedRow, Segment, Violation, role_tags

BOUNDARY_FIELDS = ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded")
MODEL_TAG = "at:model"  # violations found in what the model received (not in the collate output)


@dataclass(frozen=True)
class ParamsView:
    """``PackedSeqParams`` as the model received it, in plain Python."""

    qkv_format: str | None
    boundaries: Mapping[str, list[int] | None]  # BOUNDARY_FIELDS -> values (None: not set)
    dtypes: Mapping[str, str]  # per set boundary field
    ndims: Mapping[str, int]  # per set boundary field
    max_seqlen_q: int | None
    max_seqlen_kv: int | None
    extra: Mapping[str, str] = field(default_factory=dict)  # other fields set (not None): name -> repr


@dataclass(frozen=True)
class ModelInputs:
    """One row of the tensors the model received (and the loss mask MB's loss function used)."""

    tokens: Sequence[int]
    labels: Sequence[int]
    loss_mask: Sequence[int]
    position_ids: Sequence[int]


@dataclass(frozen=True)
class TokenOutputs:
    """Per position of one row: the logits (one list per position) and the model's per-token loss."""

    logits: Sequence[Sequence[float]]
    token_loss: Sequence[float]


@dataclass
class OutputErrors:
    """Largest differences seen on real tokens (what the tolerance is judged against)."""

    logits: float = 0.0
    token_loss: float = 0.0

    def update(self, other: OutputErrors) -> None:
        self.logits = max(self.logits, other.logits)
        self.token_loss = max(self.token_loss, other.token_loss)


def model_row(inputs: ModelInputs, params: ParamsView | None, *, padding_row: bool = False) -> PackedRow:
    """The model's view of one packed row as a :class:`PackedRow` (the differential oracle's input)."""
    b = params.boundaries if params is not None else {}

    def tup(name: str) -> tuple[int, ...] | None:
        v = b.get(name)
        return None if v is None else tuple(v)

    return PackedRow(
        tokens=tuple(inputs.tokens),
        labels=tuple(inputs.labels),
        loss_mask=tuple(int(bool(m)) for m in inputs.loss_mask),
        position_ids=tuple(inputs.position_ids),
        cu_seqlens_q=tup("cu_seqlens_q"),
        cu_seqlens_q_padded=tup("cu_seqlens_q_padded"),
        cu_seqlens_kv=tup("cu_seqlens_kv"),
        cu_seqlens_kv_padded=tup("cu_seqlens_kv_padded"),
        max_seqlen_q=params.max_seqlen_q if params else None,
        max_seqlen_kv=params.max_seqlen_kv if params else None,
        dtypes=dict(params.dtypes) if params else {},
        padding_row=padding_row,
    )


def at_model(violations: Sequence[Violation]) -> list[Violation]:
    """Tag violations found in the model's inputs, so reports tell them from collate-level ones."""
    return [replace(v, tags=v.tags + (MODEL_TAG,)) for v in violations]


HYBRID_FIELDS = ("total_tokens", "seq_idx")
"""What MB's builder adds for a hybrid (Mamba) model: a step that serves only hybrid models sets them rightly."""


def check_params(row: int, params: ParamsView | None, *, hybrid: bool = False) -> list[Violation]:
    """The ``PackedSeqParams`` contract (format, shape, no extra fields; with ``hybrid``, the fields a
    hybrid model needs are not extra); values: see :func:`model_row`."""
    out: list[Violation] = []
    if params is None:
        return [
            Violation(
                Invariant.PARAMS,
                row,
                None,
                "PackedSeqParams",
                None,
                "a packed batch reached the model without packed_seq_params",
                ("no-params", MODEL_TAG),
            )
        ]
    if params.qkv_format != "thd":
        out.append(
            Violation(Invariant.PARAMS, row, None, "thd", params.qkv_format, "qkv_format", ("qkv-format", MODEL_TAG))
        )
    q = params.boundaries.get("cu_seqlens_q")
    if q is None or len(q) < 2:
        out.append(
            Violation(
                Invariant.PARAMS,
                row,
                None,
                "at least [0, end]",
                q,
                "cu_seqlens_q empty or missing (sentinel stripping must keep the boundaries)",
                ("empty-cu-seqlens", MODEL_TAG),
            )
        )
    if params.max_seqlen_q is None:  # every era's collate / in-batch packer precomputes it for THD
        out.append(
            Violation(
                Invariant.MAX_SEQLEN,
                row,
                None,
                "an int",
                None,
                "max_seqlen_q missing: MB precomputes it (on the host) for every packed batch",
                ("max-seqlen-missing", MODEL_TAG),
            )
        )
    for name in BOUNDARY_FIELDS:
        ndim = params.ndims.get(name)
        if ndim is not None and ndim != 1:
            out.append(Violation(Invariant.PARAMS, row, None, "1-D", f"{ndim}-D", name, ("not-1d", MODEL_TAG)))
        dtype = params.dtypes.get(name)
        if dtype is not None and dtype != "int32":
            out.append(Violation(Invariant.BOUNDARY_DTYPE, row, None, "int32", dtype, name, (MODEL_TAG,)))
    for name, value in sorted(params.extra.items()):
        if hybrid and name in HYBRID_FIELDS:
            continue
        out.append(
            Violation(
                Invariant.PARAMS,
                row,
                None,
                None,
                value,
                f"PackedSeqParams.{name} set for a non-hybrid model (MB's builder leaves it unset)",
                (f"extra-field:{name}", MODEL_TAG),
                Impact.PERF_CONTRACT,  # the model takes a slower path for a field it does not need
            )
        )
    return out


def _max_abs(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def check_outputs(
    row: int,
    tokens: Sequence[int],
    segments: Sequence[Segment],
    packed: TokenOutputs,
    reference: Mapping[str, TokenOutputs],
    *,
    logit_atol: float,
    loss_atol: float,
    roles: Mapping[int, tuple[str, ...]] | None = None,
    trained: Mapping[str, Sequence[int]] | None = None,
) -> tuple[list[Violation], OutputErrors]:
    """Per real token of each segment: logits and per-token loss equal the example's unpacked run.

    One violation per segment and quantity (the worst token), so a broken boundary reads as one
    line per example instead of one per token. ``trained`` (example key -> MB's unpacked loss
    mask) limits the comparison to positions that train: a masked position's logits are never
    read by training (its hidden states still are, through the trained tokens that attend to it,
    so a wrong context shows there).
    """
    out: list[Violation] = []
    errs = OutputErrors()
    for seg in segments:
        ref = reference[seg.key]
        worst: dict[Invariant, tuple[float, int]] = {}
        mask = trained.get(seg.key) if trained is not None else None
        for j in range(min(seg.real, len(ref.token_loss))):
            if mask is not None and j < len(mask) and not mask[j]:
                continue
            p = seg.start + j
            if p >= len(packed.token_loss):
                worst[Invariant.LOGITS] = (float("inf"), p)
                break
            for inv, err in (
                (Invariant.LOGITS, _max_abs(packed.logits[p], ref.logits[j])),
                (Invariant.TOKEN_LOSS, abs(packed.token_loss[p] - ref.token_loss[j])),
            ):
                if err > worst.get(inv, (-1.0, 0))[0]:
                    worst[inv] = (err, p)
        errs.update(
            OutputErrors(worst.get(Invariant.LOGITS, (0.0, 0))[0], worst.get(Invariant.TOKEN_LOSS, (0.0, 0))[0])
        )
        for inv, atol in ((Invariant.LOGITS, logit_atol), (Invariant.TOKEN_LOSS, loss_atol)):
            err, p = worst.get(inv, (0.0, 0))
            if err > atol:
                token = tokens[p] if p < len(tokens) else None
                tags = role_tags("input", token, roles or {}) + (MODEL_TAG,)
                out.append(
                    Violation(
                        inv,
                        row,
                        p,
                        f"|packed - unpacked| <= {atol:g}",
                        f"{err:.3g}",
                        f"example {seg.key}, worst of its {seg.real} real tokens (token {p - seg.start})",
                        tags,
                    )
                )
    return out, errs


@dataclass(frozen=True)
class LossTotals:
    """What MB's loss function returned for a micro-batch: (masked loss sum, number of tokens)."""

    loss_sum: float
    num_tokens: float

    def plus(self, other: LossTotals) -> LossTotals:
        return LossTotals(self.loss_sum + other.loss_sum, self.num_tokens + other.num_tokens)


def check_host_reads(row: int, reads: Sequence[str]) -> list[Violation]:
    """MB's step and loss function read no device tensor back on the host for a micro-batch (what
    the host needs is precomputed by the data path): each read stalls every micro-batch on a GPU."""
    if not reads:
        return []
    return [
        Violation(
            Invariant.FAST_PATH,
            row,
            None,
            "no host read of a device tensor in the step",
            "; ".join(sorted(set(reads)))[:400],
            "the step synchronises the device every micro-batch",
            ("host-sync",),
        )
    ]


def check_totals(row: int, packed: LossTotals, unpacked: LossTotals, *, rtol: float, atol: float) -> list[Violation]:
    """The packed micro-batch trains the same tokens with the same summed loss as the unpacked runs."""
    out = []
    if packed.num_tokens != unpacked.num_tokens:
        out.append(
            Violation(
                Invariant.LOSS_TOTALS,
                row,
                None,
                unpacked.num_tokens,
                packed.num_tokens,
                "number of tokens MB's loss function counts",
                ("num-tokens", MODEL_TAG),
            )
        )
    if abs(packed.loss_sum - unpacked.loss_sum) > atol + rtol * abs(unpacked.loss_sum):
        out.append(
            Violation(
                Invariant.LOSS_TOTALS,
                row,
                None,
                round(unpacked.loss_sum, 6),
                round(packed.loss_sum, 6),
                "masked loss sum of MB's loss function",
                ("loss-sum", MODEL_TAG),
            )
        )
    return out


def role_map(special_ids: Mapping[str, int | None]) -> dict[int, tuple[str, ...]]:
    """Token id -> role names (eos, pad...) for violation tags."""
    roles: dict[int, tuple[str, ...]] = {}
    for name, tid in special_ids.items():
        if tid is not None:
            roles[tid] = roles.get(tid, ()) + (name.removesuffix("_id"),)
    return roles


__all__ = [
    "BOUNDARY_FIELDS",
    "LossTotals",
    "ModelInputs",
    "OutputErrors",
    "ParamsView",
    "TokenOutputs",
    "at_model",
    "check_outputs",
    "check_params",
    "check_totals",
    "model_row",
    "role_map",
]
