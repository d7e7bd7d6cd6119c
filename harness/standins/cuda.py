"""Scoped CPU stand-ins for CUDA calls that MB and megatron-core make unconditionally.

``Tensor.cuda()``: MB's step functions move batches to the GPU; without CUDA we return the
tensor itself, but only inside :func:`cpu_cuda_calls`, so nothing outside a suite's call is
affected. ``torch.cuda.current_device``: MCore's global memory buffer and RoPE ask for it.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from harness import standins


@contextlib.contextmanager
def cpu_cuda_calls() -> Iterator[None]:
    """Make ``.cuda()`` and ``torch.cuda.current_device()`` CPU no-ops when CUDA is absent."""
    import torch

    if torch.cuda.is_available():
        yield
        return
    orig_cuda = torch.Tensor.cuda
    orig_current = torch.cuda.current_device

    def _cuda(self, *args, **kwargs):  # noqa: ANN001 - torch's signature
        standins.record("Tensor.cuda() no-op on CPU")
        return self

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
