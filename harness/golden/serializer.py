"""Canonical encoding of values for goldens.

Tensors and arrays keep dtype and shape. Small ones stay inline (human-readable JSON, so a
reviewer can read a golden diff in a pull request); large ones go to a binary ``.npz``
sidecar. Floats are stored at full precision; tolerance is the comparator's job.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

TENSOR_TAG = "__tensor__"
INLINE_MAX_ELEMENTS = 4096


def _to_numpy(value: object) -> np.ndarray | None:
    """Return an ndarray for numpy arrays and torch tensors, None for anything else."""
    if isinstance(value, np.ndarray):
        return value
    mod = type(value).__module__
    if mod.startswith("torch") and hasattr(value, "detach"):
        t = value.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    return None


def _plain_float(x: float) -> object:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def encode(value: object, sidecar: dict[str, np.ndarray], path: str = "$") -> object:
    """Encode ``value`` into JSON-compatible data; large arrays are put into ``sidecar``.

    Supported: None, bool, int, float, str, list/tuple, dict (str keys), numpy scalars,
    numpy arrays, torch tensors and dataclass-like objects exposing ``__dict__`` are NOT
    accepted: suites must choose explicitly what to pin.
    """
    arr = _to_numpy(value)
    if arr is not None:
        return _encode_array(arr, sidecar, path)
    if isinstance(value, (bool, type(None), str)):
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _plain_float(float(value))
    if isinstance(value, (list, tuple)):
        return [encode(v, sidecar, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"golden keys must be str, got {type(k).__name__} at {path}")
            out[k] = encode(v, sidecar, f"{path}.{k}")
        return out
    raise TypeError(f"cannot store {type(value).__name__} in a golden (at {path})")


def _encode_array(arr: np.ndarray, sidecar: dict[str, np.ndarray], path: str) -> dict[str, object]:
    meta: dict[str, object] = {"dtype": str(arr.dtype), "shape": list(arr.shape)}
    if arr.size <= INLINE_MAX_ELEMENTS:
        data = arr.tolist()
        if arr.dtype.kind == "f":
            data = _map_floats(data)
        meta["data"] = data
    else:
        key = f"a{len(sidecar)}"
        sidecar[key] = arr
        meta["sidecar"] = key
    return {TENSOR_TAG: meta}


def _map_floats(data: Any) -> object:
    if isinstance(data, list):
        return [_map_floats(x) for x in data]
    return _plain_float(data)


def is_tensor(node: object) -> bool:
    return isinstance(node, dict) and set(node) == {TENSOR_TAG}


def tensor_array(node: dict[str, Any], sidecar: dict[str, np.ndarray]) -> np.ndarray:
    """Materialise an encoded tensor node as an ndarray (inline or from the sidecar)."""
    meta = node[TENSOR_TAG]
    if "sidecar" in meta:
        arr = sidecar[meta["sidecar"]]
    else:
        arr = np.array(_unmap_floats(meta["data"]), dtype=meta["dtype"]).reshape(meta["shape"])
    return arr


def _unmap_floats(data: object) -> object:
    if isinstance(data, list):
        return [_unmap_floats(x) for x in data]
    if isinstance(data, str) and data in ("nan", "inf", "-inf"):
        return float(data)
    return data
