"""Megatron-Bridge's training step functions on CPU; only the model, state and groups are doubles.

What a training loop does with a micro-batch: ``forward_step(state, data_iterator, model)``
fetches it (MB's ``get_batch``: keys kept or dropped, moved to the device), builds
``PackedSeqParams`` (MB's ``get_packed_seq_params``), calls the model, and returns the output
with MB's loss function. Here MB's step functions run unchanged; the doubles are:

* :class:`RecordingModel` - a ``torch.nn.Module`` around MCore's real tiny ``GPTModel``
  (:func:`harness.suite.adapters.forward.tiny_gpt`, whose THD attention consumes exactly the
  ``PackedSeqParams`` object MB passed). It records every keyword argument the step passes and
  the logits the model's output layer computed (a forward hook), and returns the real model's
  per-token loss. :class:`VLMRecordingModel` takes the VLM step's extra arguments too
  (``loss_mask``, visual inputs): it records them and hands the language model the rest.
* :func:`minimal_state` - the parts of ``GlobalState`` the steps read.
* process groups: MCore's world-of-1 gloo groups; for the v0.4-v0.5 VLM step, which derives
  its in-batch padding multiple from the CP and TP sizes, :class:`SizedGroup` answers a chosen
  ``size()`` (nothing else reads those groups on that path).
* CPU stand-ins, scoped to the call, for a model on the CPU whatever the machine has
  (:func:`harness.suite.standins.cuda.pinned_to_cpu`: ``Tensor.cuda()`` no-op and MCore's default causal
  mask built on the CPU); a model on a GPU (the ``forward_gpu`` suite) runs MB's step unchanged.

Eras: ``training/gpt_step.forward_step(state, data_iterator, model)`` (v0.1 on). VLM in-batch
packing: collate time from v0.6 (the collate packs, :data:`harness.suite.adapters.thd.in_batch_collate`;
``vlm_step`` builds params from ``cu_seqlens_q``...) or step time in v0.4-v0.5
(``vlm_step.get_batch`` packs when ``cfg.dataset.pack_sequences_in_batch``); before: untestable.

One module because the doubles and the per-era probes only make sense together: each probe
runs MB's step function through :func:`run_step` with exactly these doubles
(:class:`RecordingModel`, :func:`minimal_state`, the groups).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from types import SimpleNamespace
from typing import Any, cast

import torch

from harness.suite.adapters import Candidate, Operation, Untestable, hostsync, load_module, source_text, symbol
from harness.suite.adapters.forward import MAX_POS
from harness.suite.adapters.mbtypes import ForwardStep, PackedSeqParams
from harness.suite.standins.cuda import pinned_to_cpu

# PackedSeqParams fields MB's builder sets for a non-hybrid model (cp_partition_mode: dev MCore)
CONTRACT_FIELDS = frozenset(
    {
        "qkv_format",
        "cu_seqlens_q",
        "cu_seqlens_kv",
        "cu_seqlens_q_padded",
        "cu_seqlens_kv_padded",
        "max_seqlen_q",
        "max_seqlen_kv",
        "cp_partition_mode",
    }
)


@dataclass
class StepRun:
    """One ``forward_step`` call: what the model received and what came out."""

    kwargs: dict[str, Any]  # the model's keyword arguments (tensors cloned; PackedSeqParams as passed)
    logits: torch.Tensor  # [b, s, vocab] float32, from the model's output layer
    token_loss: torch.Tensor  # [b, s], the model's output (per-token loss)
    loss_mask: torch.Tensor | None  # the mask MB's loss function multiplies by
    loss_sum: float
    num_tokens: float
    # host reads of device tensors by MB's code in the step and its loss function (CPU model only:
    # harness.suite.adapters.hostsync.count_step_reads), each "what at file:line in function"
    host_reads: tuple[str, ...] = ()


def snapshot(value: object) -> object:
    """A model argument as it was at the call: tensors cloned (plain, off the device), nested dicts too."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().as_subclass(torch.Tensor)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return value


def plain(value: object) -> Any:
    """``value`` with its device-resident tensors as plain ones (nested dicts and dataclasses such as
    ``PackedSeqParams`` too): the step's host reads are counted up to the model call, not in it."""
    if isinstance(value, hostsync.DeviceResident):
        return value.as_subclass(torch.Tensor)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        out = copy.copy(value)
        for f in fields(value):
            if isinstance(getattr(value, f.name, None), torch.Tensor):
                setattr(out, f.name, plain(getattr(value, f.name)))
        return out
    return value


class RecordingModel(torch.nn.Module):
    """The model the step calls: records its arguments, then runs the real ``GPTModel`` unchanged."""

    def __init__(self, gpt: torch.nn.Module) -> None:
        super().__init__()
        self.gpt = gpt
        self.config = gpt.config  # MB reads the model config (get_model_config)
        self.calls: list[dict[str, object]] = []
        self.logits: list[torch.Tensor] = []

    pg_collection: object  # MB's process groups, set while a case with several ranks runs the step

    def __getattr__(self, name: str) -> Any:
        """Transparent for what MB reads off the model (``pre_process``, ``config``...): the wrapped
        ``GPTModel``'s attribute, so MB sees the real model apart from the recording."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("gpt"), name)

    def _record_logits(self, _module: object, _inputs: object, output: Any) -> None:
        logits = output[0] if isinstance(output, tuple) else output
        self.logits.append(logits.detach().transpose(0, 1).float().clone())  # [s, b, v] -> [b, s, v]

    def model_kwargs(self, kwargs: dict[str, object]) -> dict[str, object]:
        return kwargs

    @property
    def device(self) -> torch.device:
        """Where the real model's weights are: the step's batch must go there too."""
        return next(self.gpt.parameters()).device

    def forward(self, **kwargs: object) -> object:
        self.calls.append({k: snapshot(v) for k, v in kwargs.items()})
        inner = getattr(self.gpt, "module", self.gpt)  # a bf16 model is wrapped in MCore's Float16Module
        output_layer = cast(torch.nn.Module, inner.output_layer)  # MCore's output layer, a Module
        hook = output_layer.register_forward_hook(self._record_logits)
        try:
            return self.gpt(**plain(self.model_kwargs(kwargs)))
        finally:
            hook.remove()


class VLMRecordingModel(RecordingModel):
    """VLM-shaped: takes ``loss_mask`` and visual inputs (recorded), runs the language model on the rest.

    A VLM returns ``(output, loss_mask)`` only when it slices the loss mask for CP; with CP 1 it
    returns the output, as here.
    """

    TEXT_KWARGS = ("input_ids", "position_ids", "attention_mask", "labels", "packed_seq_params")

    def model_kwargs(self, kwargs: dict[str, object]) -> dict[str, object]:
        return {k: v for k, v in kwargs.items() if k in self.TEXT_KWARGS}


class SizedGroup:
    """A process group of which only ``size()`` and ``rank()`` are read.

    MB's v0.4-v0.5 VLM step computes its in-batch padding multiple from the CP and TP group
    sizes (``lcm(2*CP, CP*TP with SP)``); this lets one process exercise a CP-like multiple.
    """

    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


def sized_groups(cp: int, tp: int) -> object:
    """MCore's world-of-1 process groups with CP and TP answering ``cp`` and ``tp`` as sizes."""
    pgc = symbol("megatron.core.process_groups_config", "ProcessGroupCollection")
    groups = copy.copy(pgc.use_mpu_process_groups())
    groups.cp, groups.tp = SizedGroup(cp), SizedGroup(tp)
    return groups


class _Timers:
    """``state.timers``: callable returning an object with start/stop (no-ops)."""

    def __call__(self, *args: object, **kwargs: object) -> _Timers:
        return self

    def start(self, *args: object, **kwargs: object) -> None:
        pass

    def stop(self, *args: object, **kwargs: object) -> None:
        pass


class _Straggler:
    """``state.straggler_timer``: usable as ``with t:`` and ``with t(bdata=True):``."""

    def __call__(self, *args: object, **kwargs: object) -> _Straggler:
        return self

    def __enter__(self) -> _Straggler:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def minimal_state(*, sequence_parallel: bool = False, **dataset: object) -> Any:
    """The parts of MB's ``GlobalState`` the step functions read (dataset flags as given)."""
    ds = SimpleNamespace(skip_getting_attention_mask_from_dataset=True, **dataset)
    model = SimpleNamespace(
        seq_length=MAX_POS,
        pipeline_model_parallel_size=1,
        expert_model_parallel_size=1,
        virtual_pipeline_model_parallel_size=None,
        sequence_parallel=sequence_parallel,
        pipeline_model_parallel_layout=None,
    )
    cfg = SimpleNamespace(
        dataset=ds,
        model=model,
        rerun_state_machine=SimpleNamespace(check_for_nan_in_loss=False, check_for_spiky_loss=False),
    )
    return SimpleNamespace(cfg=cfg, timers=_Timers(), straggler_timer=_Straggler())


def closed_over_mask(loss_fn: object) -> torch.Tensor | None:
    """The mask MB's loss function closes over (``partial(masked_next_token_loss, loss_mask, ...)``)."""
    args = getattr(loss_fn, "args", ())
    return args[0].detach().clone() if args and isinstance(args[0], torch.Tensor) else None


def on_model_device(model: RecordingModel) -> contextlib.AbstractContextManager[None]:
    """Pinned to the CPU for a model on the CPU (whatever the machine has), nothing for a GPU model."""
    return pinned_to_cpu() if model.device.type == "cpu" else contextlib.nullcontext()


@torch.no_grad()
def call_model(model: RecordingModel, kwargs: dict[str, object]) -> tuple[torch.Tensor, torch.Tensor]:
    """The model called directly with ``kwargs`` (a step's recorded arguments, some changed):
    (logits [b, s, vocab], per-token loss [b, s]), both float32."""
    model.calls.clear()
    model.logits.clear()
    with on_model_device(model):
        output = model(**kwargs)
    output = output[0] if isinstance(output, tuple) else output
    return model.logits[0], output.detach().float()


@torch.no_grad()
def run_step(
    step: ForwardStep, state: object, batch: Mapping[str, object], model: RecordingModel, groups: object = None
) -> StepRun:
    """``step(state, iter([batch]), model)`` as the training loop calls it, then MB's loss function.

    A model on the CPU runs pinned to the CPU (MB's ``.cuda()`` keeps the batch next to the
    weights even on a CUDA machine); a model on a GPU runs MB's step exactly as training does.
    """
    model.calls.clear()
    model.logits.clear()
    if groups is not None:
        model.pg_collection = groups
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster, and sums never depend on the core count
    try:
        with on_model_device(model), hostsync.count_step_reads() as reads:
            output, loss_fn = step(state, iter([dict(batch)]), model)
            totals = plain(loss_fn(output))
    finally:
        torch.set_num_threads(threads)
        model.__dict__.pop("pg_collection", None)
    if len(model.calls) != 1 or len(model.logits) != 1:
        raise AssertionError(f"the step called the model {len(model.calls)} times (expected once)")
    output = output[0] if isinstance(output, tuple) else output
    return StepRun(
        model.calls[0],
        model.logits[0],
        plain(output.detach().float()),
        plain(closed_over_mask(loss_fn)),
        float(totals[0]),
        float(totals[1]),
        tuple(reads),
    )


def params_fields(params: PackedSeqParams) -> dict[str, object]:
    """Every field of a ``PackedSeqParams`` (a dataclass in every MCore era) by name."""
    return {f.name: getattr(params, f.name) for f in fields(params)}


def extra_fields(params: PackedSeqParams) -> dict[str, str]:
    """Fields set (not None) beyond what MB's builder sets for a non-hybrid model."""
    return {k: repr(v)[:80] for k, v in params_fields(params).items() if k not in CONTRACT_FIELDS and v is not None}


# --------------------------------------------------------------------------- gpt_step


def mcore_call_matches(module: str, callee: str, core_module: str) -> None:
    """Untestable when ``module`` calls MCore's ``callee`` without an argument the installed MCore requires.

    MB pins the megatron-core it was written against; paired with a newer one (e.g. MB 0.4.0
    with megatron-core 0.19, whose ``get_batch_on_this_cp_rank`` requires ``is_hybrid_cp``) the
    step raises a TypeError that says nothing about packing (``harness run --megatron-lm``
    runs each commit with its pinned core).
    """
    fn = symbol(core_module, callee)
    required = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ][1:]
    source = source_text(load_module(module))
    missing = [name for name in required if f"{callee}(" in source and name not in source]
    if missing:
        raise Untestable(
            f"{module} calls {core_module}.{callee} without {', '.join(missing)}, which the "
            "installed megatron-core requires (MB older than its megatron-core; try --megatron-lm)"
        )


def _gpt_probe() -> Callable[[RecordingModel, Mapping[str, object]], StepRun]:
    fn = symbol("megatron.bridge.training.gpt_step", "forward_step")
    mcore_call_matches("megatron.bridge.training.gpt_step", "get_batch_on_this_cp_rank", "megatron.core.utils")

    def call(model: RecordingModel, batch: Mapping[str, object]) -> StepRun:
        return run_step(fn, minimal_state(), batch, model)

    return call


gpt_step = Operation("gpt_step_forward", [Candidate("training/gpt_step.forward_step", _gpt_probe)])
"""``gpt_step(model, batch)``: one micro-batch through MB's GPT ``forward_step`` and loss function."""


__all__ = [
    "CONTRACT_FIELDS",
    "RecordingModel",
    "SizedGroup",
    "StepRun",
    "VLMRecordingModel",
    "call_model",
    "extra_fields",
    "gpt_step",
    "mcore_call_matches",
    "minimal_state",
    "on_model_device",
    "params_fields",
    "run_step",
    "sized_groups",
]
