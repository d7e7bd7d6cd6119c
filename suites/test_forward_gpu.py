"""GPU forward through MB's own step functions: MCore's Transformer Engine layer spec, bf16, CUDA.

The same end-to-end path as suites/test_forward_cpu.py (MB's collated micro-batches through MB's
``gpt_step.forward_step`` / ``vlm_step.forward_step``, the recording doubles of
harness/suite/adapters/step.py, the checks of harness/suite/oracle/stepcheck.py), with the production model
instead of the CPU reference: the tiny ``GPTModel`` built with the TE layer spec, in bf16
(``Float16Module``, as MB wraps a bf16 model), on CUDA, so TE's fused THD attention consumes
exactly the ``PackedSeqParams`` MB built on the device (harness/suite/adapters/gpu.py).

Each case, in this order:

1. On a CUDA machine, Transformer Engine must import: an installed TE that does not (built for
   another torch: ``undefined symbol``) makes the case ERROR with an ``environment:`` reason,
   never a verdict on MB.
2. Device-independent half, on the CPU: the case through the CPU forward (fp32, every invariant),
   and the golden of what MB handed the model: boundaries, ``max_seqlen``, which positions train
   (suites/_forward_control.py ``inputs_golden``). Recorded on any machine (``harness fixtures record
   --suite forward_gpu --yes``), so a first GPU run has its goldens.
3. Without CUDA and TE: UNTESTABLE with the reason, before anything else runs: a GPU verdict
   without a GPU is no verdict, in any era and with any stand-in (``harness run --require-gpu``
   makes that an environment error on a GPU runner). Only ``harness fixtures record`` still runs
   the device-independent half there, to write its goldens, and the case stays untestable.
4. On CUDA: the same micro-batches through the same step with the TE model. The model must
   receive the same inputs as on the CPU (so the golden applies), and every real token's logits
   and per-token loss must match the example's unpacked run through the same step on the GPU,
   within the bf16 tolerance of suites/_forward.py (``BF16``). Negative control, per case: one
   boundary moved by a token must move some real token's logits by more than twice the
   tolerance, or the case errs (the check could not see a wrong boundary). Both numbers are
   printed and kept as the case's message.
"""

from __future__ import annotations

import dataclasses

import pytest

from harness.errors import Untestable
from harness.suite.adapters import gpu
from suites import _forward, _forward_control, _sftcases

pytestmark = [pytest.mark.import_group("full"), pytest.mark.gpu]

_BY_ID = {c.id: c for c in _sftcases.CASES + _sftcases.FIXED_SHAPE_CASES}
# clean corpora (no literal EOS in answers; MB 0.6.2's EOS handling is the CPU suite's to show):
# no alignment, alignment padding (cu_seqlens_q_padded), completion-only data, and the
# fixed-shape pad_cu_seqlens boundaries that CUDA graphs rely on
_OFFLINE_IDS = ("prompt-mult1", "prompt-mult4", "completion-mult2", "prompt-mult1-pad-cu-seqlens")
OFFLINE = [_forward.CleanCase(**{**dataclasses.asdict(_BY_ID[i]), "id": "clean-" + i}) for i in _OFFLINE_IDS]
VLM_SOURCE = _sftcases.SFTCase("vlm-chat", seed=71, kind="chat", n=14)
VLM = [_forward.VLMCase("chat-mult1", VLM_SOURCE), _forward.VLMCase("chat-cp2-mult4", VLM_SOURCE, cp=2)]


def _require_gpu(golden) -> str | None:
    """Steps 1 and 3: the reason this machine cannot run the case (None: it can); untestable at
    once unless goldens are being recorded (the CPU half then runs for them, and only for them)."""
    why_not = gpu.preflight()
    if why_not is not None and not golden.record:
        raise Untestable(why_not)
    return why_not


def _on_gpu(cpu: _forward.ForwardResult, run_on_gpu, golden, why_not: str | None) -> _forward.ForwardResult:
    """Steps 2 to 4 of the module docstring, once the CPU half has run."""
    cpu.assert_ok()
    golden.check(_forward_control.inputs_golden(cpu))
    if why_not is not None:
        raise Untestable(why_not)
    models = gpu.te_models(_forward.SEED, _forward.MODEL_VOCAB)
    result = run_on_gpu(models)
    _forward_control.same_inputs(cpu, result, "CUDA (TE, bf16)")
    result.assert_ok()
    return result


def _note(result: _forward.ForwardResult, model, record_property) -> None:
    note = _forward_control.check_control(result, _forward_control.wrong_boundary_error(result, model), _forward.BF16)
    print(note)
    record_property("harness_note", note)


@pytest.mark.parametrize("case", [_sftcases.case_param(c) for c in OFFLINE])
def test_offline_gpt_step_te(golden, record_property, case):
    """Offline packed micro-batches through ``gpt_step`` on the TE model == each example alone."""
    why_not = _require_gpu(golden)
    result = _on_gpu(
        _forward.cpu_offline(case),
        lambda models: _forward.run_offline(case, models, _forward.BF16),
        golden,
        why_not,
    )
    _note(result, gpu.te_models(_forward.SEED, _forward.MODEL_VOCAB)[0], record_property)


@pytest.mark.parametrize("case", VLM, ids=[c.id for c in VLM])
def test_in_batch_vlm_step_te(golden, record_property, case):
    """In-batch packed VLM micro-batches through ``vlm_step`` on the TE model == unpacked."""
    why_not = _require_gpu(golden)
    result = _on_gpu(
        _forward.cpu_vlm(case),
        lambda models: _forward.run_vlm(case, models, _forward.BF16),
        golden,
        why_not,
    )
    _note(result, gpu.te_models(_forward.SEED, _forward.MODEL_VOCAB)[1], record_property)
