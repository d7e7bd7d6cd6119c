"""Forward cases through MB's step functions, held to MB's unpacked path (views: suites/_model_view.py).

Offline (:func:`run_offline`): each collated packed micro-batch of an :class:`~suites._sftcases.SFTCase`
(``Built.batches``, as the training loop feeds them) goes through MB's ``gpt_step.forward_step``
with a recording model double around MCore's real tiny ``GPTModel``; the reference is every
example of MB's own unpacked dataset (the one its packing preparation built), collated alone
by its ``collate_fn`` and run through the same ``gpt_step.forward_step``.

In-batch VLM (:func:`run_vlm`): right-padded micro-batches of MB's unpacked chat examples (tokens,
labels, loss mask, position ids from MB's unpacked collate; padding: the tokenizer's pad id,
labels ignored, loss mask 0, positions continuing, plus a padding mask because content holds
the pad id too) go through MB's ``vlm_step.forward_step`` with in-batch packing as the era does
it; the reference is the same batch through ``vlm_step.forward_step`` without packing.

Both return a :class:`ForwardResult`: violations from :mod:`harness.suite.oracle.differential` (the
model's inputs as a packed row) and :mod:`harness.suite.oracle.stepcheck` (params contract, logits,
per-token loss, loss totals), the largest errors measured, and change-detector values.

Both take the models (default: the CPU tiny model, fp32) and the tolerances, so the GPU suite
runs the same path with MCore's Transformer Engine spec in bf16 (harness/suite/adapters/gpu.py,
:data:`BF16`). What no device can change and the negative control of a tolerance on real
batches are in suites/_forward_control.py.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.suite.adapters import Operation, familystep, mmstep, needs, sft, step, vlmstep
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import forward as fwd
from harness.suite.oracle import corpus, differential, stepcheck, tokenizer
from suites import _sftcases
from suites._model_view import model_rows, params_view, token_outputs

# fp32 on CPU: packed (per-segment SDPA) and unpacked (MCore's local attention) runs differ only
# by summation order: measured <= 2.4e-7 on logits (5e-7 on per-token loss) over MB's batches
# here. The negative control (tests/test_forward_reference.py) measures the smallest real fault
# (a boundary off by one token, two segments merged, position ids off by one) at >= 0.18 on some
# real token's logits, and requires > 100x the tolerance: 1e-4 sits ~400x above the noise and
# ~1800x below the smallest fault.
LOGIT_ATOL = 1e-4
LOSS_ATOL = 1e-4
TOTALS_RTOL, TOTALS_ATOL = 1e-5, 1e-4


@dataclass(frozen=True)
class Tolerances:
    """How close packed must be to unpacked on real tokens, and MB's loss totals (rtol, atol)."""

    name: str
    logits: float
    token_loss: float
    totals_rtol: float
    totals_atol: float


FP32 = Tolerances("fp32", LOGIT_ATOL, LOSS_ATOL, TOTALS_RTOL, TOTALS_ATOL)
# bf16 (the GPU suite, Transformer Engine): logits of this model are below 0.7 in magnitude, bf16
# keeps 8 bits of mantissa (relative rounding 2^-8 = 0.004), and packed (THD, fused attention) and
# unpacked (sbhd, causal mask) runs use different kernels. The same tiny model in bf16 on the CPU
# (per-segment SDPA vs MCore's local attention; seeds 7, 11, 1234) differs by at most 0.0044 on a
# real token's logits, and one boundary moved by a token moves them by 0.17 to 0.34. 0.05 sits
# ~11x above that noise and ~3.4x below the smallest fault; on the GPU every case measures its own
# control (wrong_boundary_error) and errs unless the fault is more than twice the tolerance, so a
# tolerance that cannot see a wrong boundary never passes silently. Per-token loss is a function
# of the logits of the same size (same bound); loss sums over ~10^2 tokens get 1% + 0.1.
BF16 = Tolerances("bf16", 0.05, 0.05, 1e-2, 0.1)
#: The negative control must move some real token's logits by more than this times the tolerance.
CONTROL_MARGIN = 2.0
MODEL_VOCAB = 64 * -(-tokenizer.VOCAB_SIZE // 64)  # the tokenizer's ids, padded like MB pads vocabularies
SEED = 1234
IGNORE_INDEX = -100  # the label MB's VLM collates put on padding


CleanCase = _sftcases.CleanCase  # where the forward suites have always found it


@dataclass(frozen=True)
class VLMCase:
    id: str
    source: _sftcases.SFTCase  # corpus and tokenizer of the chat examples that fill the micro-batches
    cp: int = 1
    tp: int = 1
    sp: bool = False
    micro_batch: int = 4
    # MB's step: "vlm" (vlm_step), "audio" (audio_lm_step packs itself), "llava" (llava_step), "omni"
    # (nemotron_omni_step)
    step: str = "vlm"

    @property
    def multiple(self) -> int:
        return vlmstep.in_batch_multiple(self.cp, self.tp, self.sp)


@dataclass
class ForwardResult:
    violations: list[differential.Violation]
    errors: stepcheck.OutputErrors
    golden: dict[str, Any]
    report: differential.Report
    runs: list[step.StepRun]  # the packed micro-batches' step calls (what the model received)
    refs: dict[str, stepcheck.TokenOutputs]  # each example's unpacked outputs

    def __repr__(self) -> str:  # pytest prints it in tracebacks: the summary says the rest
        return f"ForwardResult({len(self.violations)} violations, errors={self.errors})"

    def assert_ok(self) -> None:
        if self.violations:
            summary = differential.Report(
                self.report.rows, self.violations, self.report.unpacked_trained, self.report.packed_trained
            ).summary()
            raise differential.InvariantFailure(
                summary + f"\n  (largest errors on real tokens: logits {self.errors.logits:.3g}, "
                f"per-token loss {self.errors.token_loss:.3g})",
                self.violations,
            )


Models = tuple[step.RecordingModel, step.VLMRecordingModel]


@functools.cache
def models() -> Models:
    """One tiny GPTModel per process (CPU, fp32), seen through the GPT-shaped and the VLM-shaped double."""
    gpt = fwd.tiny_gpt(seed=SEED, vocab_size=MODEL_VOCAB)
    return step.RecordingModel(gpt), step.VLMRecordingModel(gpt)


def _totals(run: step.StepRun) -> stepcheck.LossTotals:
    return stepcheck.LossTotals(run.loss_sum, run.num_tokens)


def _cut_totals(ex: differential.Example, out: stepcheck.TokenOutputs, real: int) -> stepcheck.LossTotals:
    """An example longer than the pack, which MB documents it truncates: only its first ``real``
    tokens can train, so the unpacked run's loss and mask count up to there (what MB's loss
    function sums: loss times mask)."""
    mask = ex.loss_mask[:real]
    return stepcheck.LossTotals(sum(m * x for m, x in zip(mask, out.token_loss)), float(sum(mask)))


def _golden_row(run: step.StepRun) -> dict[str, Any]:
    view = params_view(run.kwargs.get("packed_seq_params"))
    b = view.boundaries if view else {}
    return {
        "loss_sum": run.loss_sum,
        "num_tokens": run.num_tokens,
        "cu_seqlens_q": b.get("cu_seqlens_q"),
        "cu_seqlens_q_padded": b.get("cu_seqlens_q_padded"),
        "max_seqlen_q": view.max_seqlen_q if view else None,
    }


GOLDEN_TOLERANCES = {"$.micro_batches*loss_sum": (1e-3, 1e-5)}


def physical_as_logical(golden: dict[str, Any]) -> dict[str, Any]:
    """``golden`` with absent padded boundaries written as the logical ones they equal: MB's in-batch
    collate leaves them out when no segment is padded in some eras (main) and writes them in others
    (0.6), which is no change in what trains. For the cases recorded since that difference was seen
    (the older goldens keep MB's form)."""
    rows = [
        {**r, "cu_seqlens_q_padded": r["cu_seqlens_q_padded"] or r["cu_seqlens_q"]} for r in golden["micro_batches"]
    ]
    return {**golden, "micro_batches": rows}


def check_runs(
    rows: list[differential.PackedRow],
    runs: list[step.StepRun],
    examples: list[differential.Example],
    refs: dict[str, stepcheck.TokenOutputs],
    expected_totals: list[stepcheck.LossTotals] | None,
    ref_totals: dict[str, stepcheck.LossTotals],
    special_ids: dict[str, int | None],
    *,
    mult: int,
    static_max: bool,
    pack_size: int | None,
    tol: Tolerances,
    packs_in_step: tuple[str, ...] = (),
    hybrid: bool = False,
) -> ForwardResult:
    """The packed rows and step runs held to the examples' unpacked runs. ``packs_in_step``: the MB
    functions of a step that packs on the device by design (its docstring says why): their host reads
    are the design's, not a fast path left; any other read of the step still is. ``hybrid``: the step
    serves only hybrid (Mamba) language models, so ``PackedSeqParams``' hybrid fields are its right."""
    pads = {v for v in special_ids.values() if v is not None}
    report = differential.compare(
        rows,
        examples,
        pad_seq_to_mult=mult,
        padding_ids=pads,
        static_max_seqlen=static_max,
        pack_size=pack_size,
        special_ids=special_ids,
    )
    violations = stepcheck.at_model(report.violations)
    roles = stepcheck.role_map(special_ids)
    errors = stepcheck.OutputErrors()
    by_key = {ex.key: ex for ex in examples}
    for r, (row_report, run) in enumerate(zip(report.rows, runs)):
        violations += stepcheck.check_params(r, params_view(run.kwargs.get("packed_seq_params")), hybrid=hybrid)
        out, errs = stepcheck.check_outputs(
            r,
            rows[r].tokens,
            row_report.segments,
            token_outputs(run, 0),
            refs,
            logit_atol=tol.logits,
            loss_atol=tol.token_loss,
            roles=roles,
            trained={k: ex.loss_mask for k, ex in by_key.items()},
        )
        violations += out
        errors.update(errs)
        if expected_totals is not None:
            want = expected_totals[r]
        else:
            want = stepcheck.LossTotals(0.0, 0.0)
            for seg in row_report.segments:
                full = seg.real >= len(refs[seg.key].token_loss)
                want = want.plus(ref_totals[seg.key] if full else _cut_totals(by_key[seg.key], refs[seg.key], seg.real))
        violations += stepcheck.check_totals(r, _totals(run), want, rtol=tol.totals_rtol, atol=tol.totals_atol)
        reads = [x for x in run.host_reads if not any(x.endswith(f" in {fn}") for fn in packs_in_step)]
        violations += stepcheck.check_host_reads(r, reads)
    golden = {"micro_batches": [_golden_row(run) for run in runs]}
    return ForwardResult(violations, errors, golden, report, list(runs), refs)


#: the step functions an offline packed micro-batch can go through: MB's GPT step, and a model family's
#: own step over the same batches (harness/suite/adapters/familystep.py)
OFFLINE_STEPS: dict[str, Operation] = {"gpt": step.gpt_step, "dsv4": familystep.dsv4_step}


def run_offline(
    case: _sftcases.SFTCase, on: Models | None = None, tol: Tolerances = FP32, through: str = "gpt"
) -> ForwardResult:
    """Every packed micro-batch of ``case`` through ``gpt_step`` (or the step ``through`` names), against
    each example's unpacked run through the same step, on the given models (default: the CPU tiny model)."""
    op = OFFLINE_STEPS[through]
    needs(op)
    b = _sftcases.built(case)
    gpt, _ = on or models()
    ds = b.build.prep_reference
    if ds is None:
        raise RuntimeError(f"{case.id}: MB's preparation left no unpacked reference dataset")
    refs: dict[str, stepcheck.TokenOutputs] = {}
    ref_totals: dict[str, stepcheck.LossTotals] = {}
    for i, ex in enumerate(b.examples):
        run = op(gpt, ds.collate_fn([ds[i]]))
        refs[ex.key] = token_outputs(run, 0, len(ex.tokens))
        ref_totals[ex.key] = _totals(run)
    runs = [op(gpt, batch) for batch in b.batches]
    rows = [row for run in runs for row in model_rows(run)]
    if len(rows) != len(runs):
        raise AssertionError(f"offline packed micro-batches must hold one row each, got {len(rows)} rows")
    return check_runs(
        rows,
        runs,
        b.examples,
        refs,
        None,
        ref_totals,
        b.special_ids,
        mult=case.mult,
        static_max=case.pad_cu_seqlens,
        pack_size=case.seq,
        tol=tol,
    )


def right_padded(examples: list[differential.Example], pad_id: int) -> dict[str, Any]:
    """MB's unpacked examples as one right-padded micro-batch, the way VLM collates pad.

    ``attention_mask`` marks real positions (1) because content may hold the pad id itself.
    """
    width = max(len(ex.tokens) for ex in examples)
    b = len(examples)
    tokens = torch.full((b, width), pad_id, dtype=torch.long)
    labels = torch.full((b, width), IGNORE_INDEX, dtype=torch.long)
    loss_mask = torch.zeros((b, width), dtype=torch.float32)
    position_ids = torch.arange(width).repeat(b, 1)
    attention_mask = torch.zeros((b, width), dtype=torch.long)
    for r, ex in enumerate(examples):
        n = len(ex.tokens)
        tokens[r, :n] = torch.tensor(ex.tokens)
        labels[r, :n] = torch.tensor(ex.labels)
        loss_mask[r, :n] = torch.tensor(ex.loss_mask, dtype=torch.float32)
        position_ids[r, :n] = torch.tensor(ex.position_ids)
        attention_mask[r, :n] = 1
    return {
        "tokens": tokens,
        "labels": labels,
        "loss_mask": loss_mask,
        "position_ids": position_ids,
        "attention_mask": attention_mask,
        "visual_inputs": None,
    }


@dataclass(frozen=True)
class Unpacked:
    examples: list[differential.Example]
    special_ids: dict[str, int | None]


@functools.cache
def unpacked(case: _sftcases.SFTCase) -> Unpacked:
    """MB's unpacked SFT split of ``case``'s corpus (what a user without packing trains on), per example.

    Built without offline packing: in-batch packing never runs MB's packing preparation.
    """
    tok = _sftcases.load_tokenizer(case.distinct_eod)
    root = corpus.write_dataset_root(Path(tempfile.mkdtemp(prefix=f"harness-vlm-{case.id}-")), case.corpus)
    build = sft.build_sft(
        sft.SFTRequest(root, tok, _sftcases.SEQ, kind=case.kind, full_loss=case.full_loss, seed=case.seed)
    )
    return Unpacked(batch_ops.unpacked_examples(build.train), tokenizer.special_ids(tok))


def run_vlm(case: VLMCase, on: Models | None = None, tol: Tolerances = FP32) -> ForwardResult:
    """Right-padded micro-batches of MB's unpacked chat examples through ``vlm_step`` (or the case's
    ``audio_lm_step``, ``llava_step`` or ``nemotron_omni_step``), packed vs not, on the given models
    (default: the CPU tiny model)."""
    b = unpacked(case.source)
    _, vlm = on or models()
    pad_id = b.special_ids.get("pad_id")
    if pad_id is None:
        raise AssertionError("the tokenizer reports no pad id")
    runs, rows, refs, expected = [], [], {}, []
    for start in range(0, len(b.examples), case.micro_batch):
        group = b.examples[start : start + case.micro_batch]
        if case.step == "audio":
            out = mmstep.audio_in_batch(vlm, right_padded(group, pad_id), cp=case.cp, tp=case.tp, sp=case.sp)
        elif case.step in ("llava", "omni"):
            op = mmstep.llava_in_batch if case.step == "llava" else mmstep.omni_in_batch
            out = op(vlm, right_padded(group, pad_id), pad_token_id=pad_id, tp=case.tp, sp=case.sp)
        else:
            out = vlmstep.vlm_in_batch(
                vlm, right_padded(group, pad_id), pad_token_id=pad_id, cp=case.cp, tp=case.tp, sp=case.sp
            )
        packed_rows = model_rows(out.packed)
        if len(packed_rows) != 1:
            raise AssertionError(f"in-batch packing must give one THD row, the model got {len(packed_rows)}")
        for r, ex in enumerate(group):
            refs[ex.key] = token_outputs(out.unpacked, r, len(ex.tokens))
        runs.append(out.packed)
        rows += packed_rows
        expected.append(_totals(out.unpacked))
    return check_runs(
        rows,
        runs,
        b.examples,
        refs,
        expected,
        {},
        b.special_ids,
        mult=case.multiple,
        static_max=False,
        pack_size=None,
        tol=tol,
        packs_in_step={"audio": mmstep.PACKS_IN_STEP, "llava": mmstep.LLAVA_IN_STEP}.get(case.step, ()),
        hybrid=case.step == "omni",  # Nemotron Omni's language model is Nemotron-H, a hybrid (Mamba) model
    )


# --------------------------------------------------------------------------- across devices


@functools.cache
def cpu_offline(case: _sftcases.SFTCase, through: str = "gpt") -> ForwardResult:
    """:func:`run_offline` on the CPU model, once per process (the CPU suite and the GPU suite's
    device-independent half share it)."""
    return run_offline(case, through=through)


@functools.cache
def cpu_vlm(case: VLMCase) -> ForwardResult:
    """:func:`run_vlm` on the CPU model, once per process."""
    return run_vlm(case)
