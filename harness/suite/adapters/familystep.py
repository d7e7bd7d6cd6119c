"""A model family's own training step: DeepSeek-V4's over offline packed batches (``models/deepseek/
deepseek_v4_step``, ledger feature ``dsv4-step``), and Step-3.7's over its own packed Flickr8k pipeline
(``models/stepfun/step37_flickr8k_step``, ledger feature ``step37-packing``); and the diffusion step
(``diffusion/models/common/dgpt_step.DGPTStep``, ledger feature ``dgpt-step``), which documents packed
sequences as not supported; Qwen3-Omni's (``models/qwen_omni/qwen3_omni_step``, ledger feature
``qwen3-omni-packing-refusal``), which refuses in-batch packing.

Why: MB ships step functions beside a model family's code, and a user training that family calls them
instead of ``gpt_step`` (``--step_func dsv4_step``). DeepSeek-V4's runs ``gpt_step``'s common forward
with its own ``get_batch``: its own extraction of the packed metadata (current and legacy keys), and
under CP > 1 a contiguous partition where the model config asks for it. What it hands the model and
what its loss function counts are held, like ``gpt_step``'s, to the same step unpacked.

Operation ``dsv4_step(model, batch)`` -> :class:`~.step.StepRun`: one micro-batch through MB's
DeepSeek-V4 ``forward_step`` and its loss function, as :func:`~.step.gpt_step` runs ``gpt_step``.

Step-3.7 packs with its own model-owned pipeline: MB's ``Step37Flickr8kSFTDataProvider`` tokenises
image-caption dialogs with its template, packs them greedily without truncation
(``MixedPackedDataloader``), shifts each sample by one and pads the pack to ``seqlen_divisible_by`` as a
sub-sequence of its own (``pack_samples``); its step pads again to ``lcm(TP, 16)`` and builds
``PackedSeqParams`` from the pack's ``cu_seqlens``. Operations ``step37_data(...)`` ->
:class:`Step37Data` (MB's packs, and each sample alone through MB's pack transform) and
``step37_step(model, batch, provider)`` -> :class:`~.step.StepRun`. The doubles, each named:

* the Flickr8k download (``prepare_flickr8k_samples``) answers the caller's local image-caption pairs;
* ``tensor.to("cuda")`` stays on the CPU (:func:`harness.suite.standins.cuda.cpu_to_cuda`);
* the model is :class:`Step37RecordingModel`: Step-3.7's text model takes ``position_ids=None`` and
  computes its RoPE positions per sub-sequence from the THD boundaries; the double hands the tiny
  ``GPTModel`` exactly those positions. Images reach it recorded, not encoded: the vision tower is
  outside the packing contract this checks (which tokens, labels, boundaries and loss reach the model).

The diffusion step refuses packed batches ("Packed sequence support is not currently implemented for
DGPTStep"). Operation ``dgpt_step(model, batch, mask_token_id)`` -> the keyword arguments MB's step
handed the model, or MB's exception when it refused first. Its model (a diffusion GPT over the doubled
``[noisy | clean]`` sequence) is not run here: :class:`ReachingModel` records the call and stops the step
there, so what is judged is what reaches the model (a packed row without its boundaries). Qwen3-Omni's
step raises "Qwen3-Omni packed sequence support is not implemented yet" when the dataset config enables
in-batch packing; ``qwen3_omni_step(gpt, batch, packing=)`` runs it with that flag as given, the same
way (its thinker computes multimodal RoPE from the full ``input_ids``; not run here either).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness.suite import standins
from harness.suite.adapters import Candidate, NotHere, Operation, load_module, source_text, symbol
from harness.suite.adapters.mbtypes import PackedSeqParams
from harness.suite.adapters.step import (
    RecordingModel,
    StepRun,
    mcore_call_matches,
    minimal_state,
    on_model_device,
    run_step,
    snapshot,
)
from harness.suite.standins.cuda import cpu_to_cuda

DSV4 = "megatron.bridge.models.deepseek.deepseek_v4_step"


def _dsv4_probe() -> Callable[[RecordingModel, dict[str, object]], StepRun]:
    fn = symbol(DSV4, "forward_step")
    mcore_call_matches(DSV4, "get_batch_on_this_cp_rank", "megatron.core.utils")

    def call(model: RecordingModel, batch: Mapping[str, object]) -> StepRun:
        return run_step(fn, minimal_state(), batch, model)

    return call


dsv4_step = Operation(
    "dsv4_step_forward",
    [Candidate("models/deepseek/deepseek_v4_step.forward_step", _dsv4_probe)],
    feature="dsv4-step",
)
"""``dsv4_step(model, batch)``: one micro-batch through MB's DeepSeek-V4 ``forward_step`` and loss function."""


# --------------------------------------------------------------------------- Step-3.7 (Flickr8k packing)

STEP37 = "megatron.bridge.models.stepfun.step37_flickr8k_step"
_FLICKR8K = "megatron.bridge.models.stepfun.data.flickr8k"
_FLICKR8K_BEFORE = "megatron.bridge.data.vlm_datasets.step37_flickr8k"
STANDIN_FLICKR8K = "Flickr8k download answered by local image-caption pairs"
STANDIN_STEP37_POSITIONS = "Step-3.7 RoPE positions: per sub-sequence from the THD boundaries (position_ids=None)"


class Step37RecordingModel(RecordingModel):
    """Step-3.7-shaped: takes the step's ``images``, ``cu_seqlens``, ``loss_mask`` and all-ones
    ``attention_mask`` (recorded), and runs the language model as Step-3.7's does under THD: positions
    restart at every boundary of ``PackedSeqParams`` (its RoPE, given ``position_ids=None``)."""

    def model_kwargs(self, kwargs: dict[str, Any]) -> dict[str, object]:
        params = kwargs["packed_seq_params"]
        standins.record(STANDIN_STEP37_POSITIONS)
        tokens = kwargs["input_ids"]
        return {
            "input_ids": tokens,
            "position_ids": positions_from_boundaries(params, tokens.shape[-1]).to(tokens.device)[None],
            "attention_mask": None,
            "labels": kwargs.get("labels"),
            "packed_seq_params": params,
        }


def positions_from_boundaries(params: PackedSeqParams, total: int) -> torch.Tensor:
    """0..len-1 per sub-sequence of ``params`` (padded boundaries where set), over ``total`` tokens.

    Boundaries past the tokens are cut at ``total`` (the oracle judges boundaries that do not match the
    tokens; the positions only have to exist for it to get there)."""
    cu = params.cu_seqlens_q_padded if params.cu_seqlens_q_padded is not None else params.cu_seqlens_q
    bounds = [min(int(x), total) for x in cu.reshape(-1).tolist()]
    pos = torch.zeros(total, dtype=torch.long)
    for start, stop in itertools.pairwise(bounds):
        if stop > start:
            pos[start:stop] = torch.arange(stop - start)
    return pos


@dataclass
class Step37Data:
    """MB's Step-3.7 packs and what they were made of.

    ``packs``: what MB's loader hands the step, in order (the provider's collate over each pack).
    ``samples``: each image-caption pair as MB's dataset tokenises it (``tokens``, ``loss_mask``).
    ``provider``: the dataset config the step reads (``cfg.dataset``). ``single(i)``: sample ``i``
    alone through MB's pack transform and collate: the same pipeline, unpacked.
    """

    packs: list[dict[str, object]]
    samples: list[Any]
    provider: object
    single: Callable[[int], dict[str, object]]


@contextlib.contextmanager
def _local_samples(provider_module: ModuleType, samples: list[object]) -> Iterator[None]:
    original = provider_module.prepare_flickr8k_samples

    def prepare(**_kwargs: object) -> list[object]:
        standins.record(STANDIN_FLICKR8K)
        return list(samples)

    provider_module.__dict__["prepare_flickr8k_samples"] = prepare  # the module global the provider calls
    try:
        yield
    finally:
        provider_module.__dict__["prepare_flickr8k_samples"] = original


def _step37_data_probe(package: str) -> Callable[[], Callable[..., Step37Data]]:
    def probe() -> Callable[..., Step37Data]:
        module = load_module(f"{package}.provider")
        provider_cls = symbol(f"{package}.provider", "Step37Flickr8kSFTDataProvider")
        sample_cls = symbol(f"{package}.flickr8k_loader", "Flickr8kSample")
        pack_samples = symbol(f"{package}.pack_transform", "pack_samples")
        context_cls = module.DatasetBuildContext

        def call(pairs: list[tuple[Path, str]], tokenizer_dir: Path, **fields: object) -> Step37Data:
            """``pairs``: (image file, caption); ``fields``: the provider's own (packing, image tokens)."""
            local = [sample_cls(image_path=str(path), caption=caption) for path, caption in pairs]
            provider = provider_cls(tokenizer_path=str(tokenizer_dir), sample_count=len(local), **fields)
            with _local_samples(module, local):
                context = context_cls(train_samples=len(local), valid_samples=0, test_samples=0)
                train, _, _ = provider.build_datasets(context)
            packs = [train.collate_fn([train[i]]) for i in range(len(train))]
            dataset = train.datasets[0]
            samples = [dataset[i] for i in range(len(dataset))]

            def single(i: int) -> dict[str, object]:
                return train.collate_fn([pack_samples([dataset[i]], seqlen_divisible_by=provider.seqlen_divisible_by)])

            return Step37Data(packs, samples, provider, single)

        return call

    return probe


step37_data = Operation(
    "step37_packed_data",
    [
        Candidate("models/stepfun/data/flickr8k.provider", _step37_data_probe(_FLICKR8K)),
        # the same pipeline before MB moved it beside the model (8896e9027, unify multimodal dataset builders)
        Candidate("data/vlm_datasets/step37_flickr8k.provider", _step37_data_probe(_FLICKR8K_BEFORE)),
    ],
    feature="step37-packing",
)
"""``step37_data(pairs, tokenizer_dir, **provider_fields)``: MB's Step-3.7 packs of local image-caption pairs."""


def _step37_step_probe() -> Callable[[Step37RecordingModel, Mapping[str, object], object], StepRun]:
    fn = symbol(STEP37, "forward_step")

    def call(model: Step37RecordingModel, batch: Mapping[str, object], provider: object) -> StepRun:
        state = minimal_state()
        state.cfg.dataset = provider
        with cpu_to_cuda(pin=model.device.type == "cpu"):
            return run_step(fn, state, batch, model)

    return call


step37_step = Operation(
    "step37_step_forward",
    [Candidate("models/stepfun/step37_flickr8k_step.forward_step", _step37_step_probe)],
    feature="step37-packing",
)
"""``step37_step(model, batch, provider)``: one pack through MB's Step-3.7 ``forward_step`` and loss function."""


# --------------------------------------------------------------------------- the diffusion step (refuses packing)

DGPT = "megatron.bridge.diffusion.models.common.dgpt_step"


class ModelReached(Exception):
    """Raised by :class:`ReachingModel` at the model call: the step got that far (not an MB error)."""

    def __init__(self, kwargs: dict[str, object]) -> None:
        super().__init__("the step called the model")
        self.kwargs = kwargs


class ReachingModel(RecordingModel):
    """Stops the step at its model call, with what it passed. The diffusion step reads its model config's
    ``different_seed_per_dp`` and ``mask_token_id`` (set here: one noise generator, the given mask id)."""

    def __init__(self, gpt: torch.nn.Module, mask_token_id: int) -> None:
        super().__init__(gpt)
        config: Any = copy.copy(gpt.config)
        config.different_seed_per_dp = False
        config.mask_token_id = mask_token_id
        self.config = config

    def forward(self, **kwargs: object) -> object:
        raise ModelReached({k: snapshot(v) for k, v in kwargs.items()})


def _dgpt_probe() -> Callable[[torch.nn.Module, Mapping[str, object], int], dict[str, object]]:
    cls = symbol(DGPT, "DGPTStep")
    mcore_call_matches(DGPT, "get_batch_on_this_cp_rank", "megatron.core.utils")

    def call(gpt: torch.nn.Module, batch: Mapping[str, object], mask_token_id: int) -> dict[str, object]:
        """What MB's diffusion step hands the model for ``batch`` (MB's exception when it refuses first)."""
        model = ReachingModel(gpt, mask_token_id)
        with on_model_device(model):
            try:
                cls(seed=1234)(minimal_state(), iter([dict(batch)]), model)
            except ModelReached as reached:
                return reached.kwargs
        raise AssertionError("MB's diffusion step returned without calling the model")

    return call


dgpt_step = Operation(
    "dgpt_step_model_call",
    [Candidate("diffusion/models/common/dgpt_step.DGPTStep", _dgpt_probe)],
    feature="dgpt-step",
)
"""``dgpt_step(gpt, batch, mask_token_id)``: what MB's diffusion step passes the model (or MB's refusal)."""


QWEN3_OMNI = "megatron.bridge.models.qwen_omni.qwen3_omni_step"


def _qwen3_omni_probe() -> Callable[[torch.nn.Module, Mapping[str, object], bool], dict[str, object]]:
    fn = symbol(QWEN3_OMNI, "forward_step")
    if "enable_in_batch_packing" not in source_text(fn):
        raise NotHere("qwen3_omni_step.forward_step does not read enable_in_batch_packing (collate-time packing)")

    def call(gpt: torch.nn.Module, batch: Mapping[str, object], packing: bool) -> dict[str, object]:
        """What MB's Qwen3-Omni step hands the model for ``batch`` with in-batch packing ``packing``
        (MB's exception when it refuses first)."""
        model = ReachingModel(gpt, mask_token_id=0)
        state = minimal_state(enable_in_batch_packing=packing, defer_in_batch_packing_to_step=False)
        with on_model_device(model):
            try:
                fn(state, iter([dict(batch)]), model)
            except ModelReached as reached:
                return reached.kwargs
        raise AssertionError("MB's Qwen3-Omni step returned without calling the model")

    return call


qwen3_omni_step = Operation(
    "qwen3_omni_step_model_call",
    [Candidate("models/qwen_omni/qwen3_omni_step.forward_step (enable_in_batch_packing)", _qwen3_omni_probe)],
    feature="qwen3-omni-packing-refusal",
)
"""``qwen3_omni_step(gpt, batch, packing)``: what MB's Qwen3-Omni step passes the model (or MB's refusal)."""
