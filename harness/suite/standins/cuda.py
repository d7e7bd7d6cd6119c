"""Scoped CPU stand-ins for CUDA calls that MB and megatron-core make unconditionally.

``Tensor.cuda()``: MB's step functions move batches to the GPU; without CUDA we return the
tensor itself, but only inside :func:`cpu_cuda_calls`, so nothing outside a suite's call is
affected. ``torch.cuda.current_device``: MCore's global memory buffer and RoPE ask for it.
``torch.tensor(..., device="cuda")`` (:func:`cpu_cuda_tensors`): MB's loader builder makes its
do-train flags on the GPU to broadcast them.

``pin=True`` (:func:`pinned_to_cpu`) applies them whatever the machine has. The CPU forward suite
needs that: its tiny model's weights live on the CPU, so on a CUDA machine MB's ``.cuda()`` and
MCore's ``device="cuda"`` mask would put the batch on the GPU next to CPU weights. Pinned, the
suite runs the same code path on a GPU runner as on a CPU machine (tests/test_gpu_readiness.py
proves it with CUDA simulated as available and every CUDA entry point refusing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from harness.suite import standins

if TYPE_CHECKING:
    import torch

#: What ``Tensor.cuda()`` hands back on the CPU: the tensor itself, or, while a step's host reads
#: are counted (:func:`harness.suite.adapters.hostsync.count_step_reads`), a device-resident view of it.
_ON_CUDA: list[Callable[[object], object]] = []


@contextlib.contextmanager
def cuda_results(mark: Callable[[object], object]) -> Iterator[None]:
    """Inside the block, what MB moves to the device with ``.cuda()`` comes back as ``mark(tensor)``."""
    _ON_CUDA.append(mark)
    try:
        yield
    finally:
        _ON_CUDA.pop()


@contextlib.contextmanager
def cpu_cuda_calls(*, pin: bool = False) -> Iterator[None]:
    """Make ``.cuda()`` and ``torch.cuda.current_device()`` CPU no-ops when CUDA is absent
    (``pin``: whatever the machine has)."""
    import torch

    if torch.cuda.is_available() and not pin:
        yield
        return
    orig_cuda = torch.Tensor.cuda
    orig_current = torch.cuda.current_device

    def _cuda(self: object, *args: object, **kwargs: object) -> Any:  # torch's signature
        standins.record("Tensor.cuda() no-op on CPU")
        return _ON_CUDA[-1](self) if _ON_CUDA else self

    def _current_device() -> str:
        standins.record("torch.cuda.current_device() -> 'cpu'")
        return "cpu"

    torch.Tensor.cuda = _cuda  # type: ignore[method-assign]
    torch.cuda.current_device = _current_device  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.Tensor.cuda = orig_cuda  # type: ignore[method-assign]
        torch.cuda.current_device = orig_current


STANDIN_TO_CUDA = "Tensor.to('cuda') kept on the CPU"


def _is_cuda(device: object) -> bool:
    import torch

    return isinstance(device, (str, torch.device)) and str(device).startswith("cuda")


@contextlib.contextmanager
def cpu_to_cuda(*, pin: bool = False) -> Iterator[None]:
    """``tensor.to("cuda", ...)`` kept on the CPU, for this block only (a dtype or other argument still
    applies). Step3.7's per-step preprocess moves its packed batch and images with ``.to("cuda")``
    rather than ``.cuda()``; what it moves is marked as ``.cuda()``'s results are (:func:`cuda_results`),
    so its host reads are counted the same way. Applied when CUDA is absent, or always with ``pin``."""
    import torch

    if torch.cuda.is_available() and not pin:
        yield
        return
    original = torch.Tensor.to

    def _to(self: Any, *args: Any, **kwargs: Any) -> Any:  # torch's signature
        moved = bool(args) and _is_cuda(args[0])
        if moved:
            args = ("cpu", *args[1:])
        if _is_cuda(kwargs.get("device")):
            moved = True
            kwargs["device"] = "cpu"
        if not moved:
            return original(self, *args, **kwargs)
        standins.record(STANDIN_TO_CUDA)
        out = original(self.as_subclass(torch.Tensor), *args, **kwargs)  # device to device: no host read
        return _ON_CUDA[-1](out) if _ON_CUDA else out

    torch.Tensor.to = _to  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.to = original  # type: ignore[method-assign]


STANDIN_CUDA_FACTORY = "torch.zeros/ones/rand...(device='cuda') made on CPU"
_FACTORIES = ("zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint")


@contextlib.contextmanager
def cpu_cuda_factories(*, pin: bool = False) -> Iterator[None]:
    """torch's tensor factories (``zeros``, ``ones``, ``rand``, ...) asked for ``device="cuda"`` make
    the same tensor on the CPU, for this block only (Wan's data step and its flow-matching pipeline
    create their boundaries' zero and the timesteps on the device). Applied when CUDA is absent, or
    always with ``pin``."""
    with _made_on_cpu(_FACTORIES, STANDIN_CUDA_FACTORY, pin):
        yield


STANDIN_CAUSAL_MASK = "MCore get_default_causal_mask built on CPU (it hard-codes device='cuda')"
STANDIN_CUDA_TENSOR = "torch.tensor(device='cuda') made on CPU"


@contextlib.contextmanager
def cpu_cuda_tensors(*, pin: bool = False) -> Iterator[None]:
    """``torch.tensor(data, device="cuda")`` made on the CPU, for this block only (the values are the
    same; a gloo collective then takes them). Applied when CUDA is absent, or always with ``pin``."""
    with _made_on_cpu(("tensor",), STANDIN_CUDA_TENSOR, pin):
        yield


@contextlib.contextmanager
def _made_on_cpu(names: tuple[str, ...], label: str, pin: bool) -> Iterator[None]:
    """torch's functions ``names`` asked for ``device="cuda"`` make their tensor on the CPU instead."""
    import torch

    if torch.cuda.is_available() and not pin:
        yield
        return
    originals = {name: getattr(torch, name) for name in names}

    def on_cpu(original: Callable[..., Any]) -> object:
        def factory(*args: object, **kwargs: object) -> object:
            if _is_cuda(kwargs.get("device")):
                standins.record(label)
                kwargs["device"] = "cpu"
            return original(*args, **kwargs)

        return factory

    for name, original in originals.items():
        setattr(torch, name, on_cpu(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch, name, original)


@contextlib.contextmanager
def cpu_causal_mask(*, pin: bool = False) -> Iterator[None]:
    """MCore's default causal mask (``get_default_causal_mask``) built on the CPU, for this block only.

    An unpacked batch reaches MCore's local attention with ``attention_mask=None`` (MB's
    ``get_batch`` drops the dataset's mask by default), and MCore then builds the causal mask
    with ``device="cuda"``. The stand-in returns the same upper-triangular boolean mask on the
    CPU; nothing else changes. Patched where MCore's fused softmax looks the name up. Applied
    when CUDA is absent, or always with ``pin``.
    """
    import torch

    if torch.cuda.is_available() and not pin:
        yield
        return
    from megatron.core.fusions import fused_softmax

    original = fused_softmax.get_default_causal_mask

    def _cpu_mask(sq: int) -> torch.Tensor:
        standins.record(STANDIN_CAUSAL_MASK)
        return torch.triu(torch.ones(sq, sq), diagonal=1).bool()

    fused_softmax.get_default_causal_mask = _cpu_mask
    try:
        yield
    finally:
        fused_softmax.get_default_causal_mask = original


@contextlib.contextmanager
def pinned_to_cpu() -> Iterator[None]:
    """Both stand-ins, whatever the machine has: code inside runs on the CPU (see module docstring)."""
    with cpu_cuda_calls(pin=True), cpu_causal_mask(pin=True):
        yield
