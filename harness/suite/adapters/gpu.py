"""The GPU forward's environment and model: MCore's tiny ``GPTModel`` with the Transformer Engine
layer spec, bf16, on CUDA, seen through the same recording doubles as the CPU forward.

Three states, decided before any GPU work (:func:`preflight`):

* ready: a CUDA device and a Transformer Engine that imports;
* untestable (the returned reason): no CUDA device, or Transformer Engine not installed. The
  case is UNTESTABLE, never passed; ``harness run --require-gpu`` turns that into an environment
  error on a GPU runner (harness/gpu.py);
* broken environment (:class:`~harness.errors.EnvironmentProblem`): a CUDA device and a
  Transformer Engine that is installed but does not import, typically a build for another
  torch or CUDA (``ImportError``/``OSError``: ``undefined symbol``). The plugin makes the case
  ERROR with an ``environment:`` reason: never a verdict on Megatron-Bridge (an ERROR is never
  blamed on a commit), never a silent skip, and ``--require-gpu`` exits 2 on it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any

import torch

from harness.errors import EnvironmentProblem
from harness.suite.adapters import symbol
from harness.suite.adapters.forward import MAX_POS, tiny_config
from harness.suite.adapters.step import RecordingModel, VLMRecordingModel

TE = "transformer_engine"
SETUP_HINT = "scripts/setup_gpu.sh installs the Transformer Engine build that matches this torch"


def preflight() -> str | None:
    """Why the GPU forward cannot run here (an untestable reason), or None when it can.

    Raises :class:`EnvironmentProblem` when it should run and cannot: CUDA is there and the
    installed Transformer Engine does not import.
    """
    if not torch.cuda.is_available():
        build = "a CPU build of torch" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
        return f"needs a CUDA GPU and Transformer Engine: no CUDA device visible ({build})"
    if importlib.util.find_spec(TE) is None:
        return f"needs Transformer Engine: {TE} is not installed ({SETUP_HINT})"
    try:
        importlib.import_module(f"{TE}.pytorch")
    except Exception as exc:  # ImportError, OSError (undefined symbol), RuntimeError from its loader
        first = (str(exc).strip().splitlines() or [""])[0][:400]
        raise EnvironmentProblem(
            f"{TE} is installed but does not import with torch {torch.__version__} (CUDA {torch.version.cuda}): "
            f"{type(exc).__name__}: {first}; it was likely built for another torch or CUDA ({SETUP_HINT})"
        ) from exc
    return None


def init_gpu_parallel(seed: int) -> None:
    """World-size-1 process groups (as the CPU forward sets them up) and MCore's CUDA RNG
    tracker, reset to the default tracker TE's weight initialisation forks from."""
    from harness.suite.adapters.forward import init_cpu_parallel

    init_cpu_parallel(seed)  # idempotent: the gloo group and model-parallel state the CPU forward shares
    mp_random = importlib.import_module("megatron.core.tensor_parallel.random")
    try:
        mp_random.model_parallel_cuda_manual_seed(seed, force_reset_rng=True)
    except TypeError:  # an MCore without force_reset_rng
        mp_random.model_parallel_cuda_manual_seed(seed)


def te_gpt(seed: int, vocab_size: int) -> Any:
    """The CPU forward's tiny GPTModel, with the Transformer Engine layer spec, bf16, on CUDA.

    Wrapped in MCore's ``Float16Module`` as MB's training wraps a bf16 model (outputs upcast to
    fp32). Learned absolute positions, as on the CPU, so ``position_ids`` matter.
    """
    init_gpu_parallel(seed)
    spec_fn = symbol("megatron.core.models.gpt.gpt_layer_specs", "get_gpt_layer_with_transformer_engine_spec")
    gpt_cls = symbol("megatron.core.models.gpt", "GPTModel")
    wrapper = symbol("megatron.core.transformer.module", "Float16Module")
    cfg = tiny_config(
        use_cpu_initialization=False, params_dtype=torch.bfloat16, bf16=True, pipeline_dtype=torch.bfloat16
    )
    torch.manual_seed(seed)
    model = gpt_cls(
        config=cfg,
        transformer_layer_spec=spec_fn(),
        vocab_size=vocab_size,
        max_sequence_length=MAX_POS,
        position_embedding_type="learned_absolute",
    )
    return wrapper(cfg, model.cuda()).eval()


@functools.cache
def te_models(seed: int, vocab_size: int) -> tuple[RecordingModel, VLMRecordingModel]:
    """One TE model per process, seen through the GPT-shaped and the VLM-shaped recording double."""
    model = te_gpt(seed, vocab_size)
    return RecordingModel(model), VLMRecordingModel(model)


__all__ = ["SETUP_HINT", "init_gpu_parallel", "preflight", "te_gpt", "te_models"]
