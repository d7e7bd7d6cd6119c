"""Counting device-to-host synchronisations on a CPU machine.

MB documents a fast path for packed batches: the dataloader precomputes on the host what the
step needs on the host (``max_seqlen``, ``cu_seqlens_argmin``: "if argmin is not pre-computed in
the dataloader, torch.argmin here will incur a device-to-host synchronization"; "Trim padded THD
cu_seqlens without introducing a CUDA sync"), and the step moves only the boundaries to the
device. A change that reads a device tensor back on the host stalls every micro-batch on a GPU
and shows nowhere in the numbers.

On CPU there is no device, so the tensors MB would have moved to the device are wrapped in
:class:`DeviceResident`, a tensor subclass that records every operation that needs its values on
the host: ``.item()``, ``.tolist()``, ``.numpy()``, ``.cpu()``, ``bool()`` / ``int()`` /
``float()`` of it, slicing with one of its values as a bound, boolean-mask indexing and the ops
whose output size depends on the data (``nonzero``, ``masked_select``, ``unique``). Tensors
derived from it are device-resident too (``torch.argmin`` of the boundaries is still on the
device), plain tensors are host tensors. On a GPU the same contract is what
``torch.cuda.set_sync_debug_mode("error")`` enforces.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from types import CodeType
from typing import Any

import torch

from harness.suite.standins.cuda import cuda_results

_HOST_READS = frozenset({"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__"})
_DATA_DEPENDENT = frozenset({"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"})

_local = threading.local()


_TORCH = os.path.dirname(torch.__file__)
_HERE = os.path.abspath(__file__)
_BRIDGE = os.sep + os.path.join("megatron", "bridge") + os.sep
_DEVICE_AWARE = ('device.type == "cuda"', "device.type == 'cuda'", ".is_cuda")
_aware: dict[CodeType, bool] = {}


def _device_aware(code: CodeType) -> bool:
    """Whether a function tests for CUDA itself: its read is then its CPU branch, which a GPU never
    takes (``flop_utils._scalar_sum_for_accumulator`` keeps the sum on the device under CUDA and
    reads it back only for a host tensor)."""
    if code not in _aware:
        try:
            text = inspect.getsource(code)
        except (OSError, TypeError):
            text = ""
        _aware[code] = any(token in text for token in _DEVICE_AWARE)
    return _aware[code]


def _reader() -> str | None:
    """Where a host read happens: ``file:line in function`` of MB's frame that made it, or None
    when the frame is the harness's or megatron-core's (a reference model, the harness's own
    bookkeeping: not MB's step), or the CPU branch of a function that tests for CUDA itself."""
    frame = sys._getframe(2)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if name != _HERE and not name.startswith(_TORCH):
            break
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None or _BRIDGE not in name or _device_aware(frame.f_code):
        return None
    return f"{name.split(_BRIDGE)[-1]}:{frame.f_lineno} in {frame.f_code.co_name}"


def _record(what: str) -> None:
    reads = getattr(_local, "reads", None)
    if reads is None:
        return
    if getattr(_local, "attributed", False):
        where = _reader()
        if where is not None:
            reads.append(f"{what} at {where}")
    else:
        reads.append(what)


def _device_index(index: object) -> str | None:
    """Why indexing with ``index`` needs device values on the host (None: it does not)."""
    parts = index if isinstance(index, tuple) else (index,)
    for part in parts:
        if isinstance(part, slice):
            if any(isinstance(b, DeviceResident) for b in (part.start, part.stop, part.step)):
                return "slice bound read from a device tensor"
        elif isinstance(part, DeviceResident) and part.dtype == torch.bool:
            return "boolean-mask indexing of a device tensor"
    return None


class DeviceResident(torch.Tensor):
    """A CPU tensor standing for one on the GPU: host reads of it are recorded (see module doc)."""

    @classmethod
    def __torch_function__(
        cls, func: object, types: object, args: tuple[object, ...] = (), kwargs: Any = None
    ) -> object:
        name = getattr(func, "__name__", "")
        if name in _HOST_READS:
            _record(f"{name}()")
        elif name in _DATA_DEPENDENT:
            _record(f"{name} (data-dependent size)")
        elif name == "__getitem__" and len(args) > 1:
            why = _device_index(args[1])
            if why:
                _record(why)
        elif name == "to" and any(str(a) == "cpu" for a in (*args[1:], *(kwargs or {}).values())):
            _record("to('cpu')")
            name = "cpu"
        out = super().__torch_function__(func, types, args, kwargs or {})
        if name == "cpu" and isinstance(out, DeviceResident):  # back on the host: a plain tensor
            return out.as_subclass(torch.Tensor)
        return out


def on_device(value: object) -> object:
    """``value`` as a device-resident tensor (non-tensors unchanged)."""
    return value.as_subclass(DeviceResident) if isinstance(value, torch.Tensor) else value


def place(batch: Mapping[str, object], device_keys: tuple[str, ...]) -> dict[str, object]:
    """``batch`` with ``device_keys`` device-resident, as MB's ``get_batch`` leaves it."""
    return {k: on_device(v) if k in device_keys else v for k, v in batch.items()}


@contextlib.contextmanager
def count_host_reads() -> Iterator[list[str]]:
    """The host reads of device-resident tensors made inside the block (this thread)."""
    previous = getattr(_local, "reads", None)
    reads: list[str] = []
    _local.reads = reads
    try:
        yield reads
    finally:
        _local.reads = previous


# What MB's step moves to the device and keeps on the host for packed batches (gpt_step's
# _CURRENT/_LEGACY_PACKED_SEQ_DEVICE_KEYS and *_HOST_KEYS, 0.6; earlier eras move the same
# boundaries and keep max_seqlen and the argmin on the host).
DEVICE_KEYS = (
    "cu_seqlens",
    "cu_seqlens_unpadded",
    "cu_seqlens_q",
    "cu_seqlens_kv",
    "cu_seqlens_q_padded",
    "cu_seqlens_kv_padded",
)


def describe(reads: list[str] | tuple[str, ...], limit: int = 300) -> str:
    """The distinct host reads of a step, one line (what a violation or a failure message shows)."""
    return "; ".join(sorted(set(reads)))[:limit]


@contextlib.contextmanager
def count_step_reads() -> Iterator[list[str]]:
    """The host reads MB's own code makes inside the block, each with MB's frame: what MB moves to
    the device with ``.cuda()`` is device-resident from then on, as on a GPU (the batch a data
    iterator yields is on the host until then); reads by the harness (a reference model) or
    megatron-core are not counted, nor the CPU branch of a function that tests for CUDA."""
    with cuda_results(on_device), count_host_reads() as reads:
        _local.attributed = True
        try:
            yield reads
        finally:
            _local.attributed = False


__all__ = ["DEVICE_KEYS", "DeviceResident", "count_host_reads", "count_step_reads", "describe", "on_device", "place"]
