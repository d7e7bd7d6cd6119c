"""Compare an obtained value tree with a golden tree.

Integers, booleans, strings, shapes and dtypes compare exactly. Floats compare with
``|obtained - golden| <= atol + rtol * |golden|``; the tolerance of a field is looked up by
its path (fnmatch patterns, most specific pattern = longest), default exact for integers and
``atol=rtol=0`` for floats unless the suite says otherwise. Every mismatch is reported with
its path, the first differing index, max abs/rel error, and (for 1-D sequences) both rows,
so the terminal and the HTML report can show them aligned.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.golden.serializer import is_tensor, tensor_array
from harness.golden.storage import Tolerance

ROW_LIMIT = 512  # longest 1-D row copied into the structured diff for aligned display


@dataclass
class Mismatch:
    path: str
    kind: str  # tensor | value | shape | dtype | missing | extra | type
    expected: object = None
    obtained: object = None
    first_index: list[int] | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    n_mismatch: int | None = None
    expected_row: list[object] | None = None
    obtained_row: list[object] | None = None

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)

    def text(self) -> str:
        """One readable paragraph for the terminal."""
        if self.kind == "tensor":
            lines = [
                f"{self.path}: {self.n_mismatch} element(s) differ; first at index {self.first_index}: "
                f"golden {self.expected!r} vs obtained {self.obtained!r}"
            ]
            if self.max_abs is not None:
                lines.append(f"    max abs err {self.max_abs:.3g}, max rel err {self.max_rel:.3g}")
            if self.expected_row is not None and self.obtained_row is not None:
                lines.append(f"    golden:   {_short(self.expected_row)}")
                lines.append(f"    obtained: {_short(self.obtained_row)}")
            return "\n".join(lines)
        if self.kind == "missing":
            return f"{self.path}: in golden, missing from obtained (golden {_short(self.expected)})"
        if self.kind == "extra":
            return f"{self.path}: obtained has it, golden does not (obtained {_short(self.obtained)})"
        return f"{self.path}: golden {_short(self.expected)} vs obtained {_short(self.obtained)} ({self.kind})"


def _short(value: object, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Comparison:
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def text(self) -> str:
        return "\n".join(m.text() for m in self.mismatches)

    def to_json(self) -> dict[str, object]:
        return {"mismatches": [m.to_json() for m in self.mismatches]}


def tolerance_for(path: str, tolerances: dict[str, Tolerance]) -> Tolerance:
    """Most specific (longest) matching pattern wins; no match means exact."""
    best: tuple[int, Tolerance] | None = None
    for pattern, tol in tolerances.items():
        if fnmatch.fnmatchcase(path, pattern) and (best is None or len(pattern) > best[0]):
            best = (len(pattern), tol)
    return best[1] if best else Tolerance()


class Comparator:
    """Walks two encoded trees (see :mod:`serializer`) and collects mismatches."""

    def __init__(self, tolerances: dict[str, Tolerance] | None = None) -> None:
        self.tolerances = tolerances or {}

    def compare(
        self,
        expected: object,
        obtained: object,
        exp_side: dict[str, np.ndarray] | None = None,
        obt_side: dict[str, np.ndarray] | None = None,
    ) -> Comparison:
        result = Comparison()
        self._walk("$", expected, obtained, exp_side or {}, obt_side or {}, result)
        return result

    def _walk(self, path: str, exp: Any, obt: Any, es: dict, os_: dict, out: Comparison) -> None:
        if is_tensor(exp) or is_tensor(obt):
            if not (is_tensor(exp) and is_tensor(obt)):
                out.mismatches.append(Mismatch(path, "type", _kind(exp), _kind(obt)))
                return
            self._tensor(path, tensor_array(exp, es), tensor_array(obt, os_), out)
            return
        if isinstance(exp, dict) and isinstance(obt, dict):
            for key in exp:
                if key not in obt:
                    out.mismatches.append(Mismatch(f"{path}.{key}", "missing", expected=exp[key]))
                else:
                    self._walk(f"{path}.{key}", exp[key], obt[key], es, os_, out)
            for key in obt:
                if key not in exp:
                    out.mismatches.append(Mismatch(f"{path}.{key}", "extra", obtained=obt[key]))
            return
        if isinstance(exp, list) and isinstance(obt, list):
            if _is_flat_numeric(exp) and _is_flat_numeric(obt) and len(exp) == len(obt):
                self._tensor(path, np.array(exp), np.array(obt), out, compare_dtype=False)
                return
            if len(exp) != len(obt):
                out.mismatches.append(
                    Mismatch(
                        f"{path}",
                        "shape",
                        f"len {len(exp)}",
                        f"len {len(obt)}",
                        expected_row=_row(exp),
                        obtained_row=_row(obt),
                    )
                )
                return
            for i, (e, o) in enumerate(zip(exp, obt)):
                self._walk(f"{path}[{i}]", e, o, es, os_, out)
            return
        self._scalar(path, exp, obt, out)

    def _scalar(self, path: str, exp: object, obt: object, out: Comparison) -> None:
        numeric = (int, float)
        if (isinstance(exp, float) or isinstance(obt, float)) and (
            isinstance(exp, numeric)
            and isinstance(obt, numeric)
            and not isinstance(exp, bool)
            and not isinstance(obt, bool)
        ):
            tol = tolerance_for(path, self.tolerances)
            if _close(float(exp), float(obt), tol):
                return
            err = abs(float(obt) - float(exp))
            out.mismatches.append(
                Mismatch(path, "value", exp, obt, max_abs=err, max_rel=err / abs(exp) if exp else float("inf"))
            )
            return
        if type(exp) is not type(obt) and not (_is_num(exp) and _is_num(obt)):
            out.mismatches.append(Mismatch(path, "type", exp, obt))
        elif exp != obt:
            out.mismatches.append(Mismatch(path, "value", exp, obt))

    def _tensor(self, path: str, exp: np.ndarray, obt: np.ndarray, out: Comparison, compare_dtype: bool = True) -> None:
        if exp.shape != obt.shape:
            out.mismatches.append(
                Mismatch(
                    path, "shape", list(exp.shape), list(obt.shape), expected_row=_row(exp), obtained_row=_row(obt)
                )
            )
            return
        if compare_dtype and exp.dtype != obt.dtype:
            out.mismatches.append(Mismatch(path, "dtype", str(exp.dtype), str(obt.dtype)))
            return
        if exp.size == 0:
            return
        floating = exp.dtype.kind == "f" or obt.dtype.kind == "f"
        if floating:
            tol = tolerance_for(path, self.tolerances)
            e = exp.astype(np.float64)
            o = obt.astype(np.float64)
            both_nan = np.isnan(e) & np.isnan(o)
            bad = ~(np.abs(o - e) <= tol.atol + tol.rtol * np.abs(e)) & ~both_nan
        else:
            bad = exp != obt
        if not bad.any():
            return
        idx = [int(i) for i in np.argwhere(bad)[0]]
        diff = np.abs(obt.astype(np.float64) - exp.astype(np.float64))
        finite = np.where(np.isfinite(diff), diff, 0.0)
        rel = finite / np.maximum(np.abs(exp.astype(np.float64)), 1e-300)
        out.mismatches.append(
            Mismatch(
                path,
                "tensor",
                exp[tuple(idx)].item(),
                obt[tuple(idx)].item(),
                first_index=idx,
                max_abs=float(np.max(finite)),
                max_rel=float(np.max(rel)),
                n_mismatch=int(bad.sum()),
                expected_row=_row(exp),
                obtained_row=_row(obt),
            )
        )


def _close(e: float, o: float, tol: Tolerance) -> bool:
    if np.isnan(e) and np.isnan(o):
        return True
    return abs(o - e) <= tol.atol + tol.rtol * abs(e)


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_flat_numeric(x: list[object]) -> bool:
    return bool(x) and all(_is_num(v) for v in x)


def _kind(node: object) -> str:
    return "tensor" if is_tensor(node) else type(node).__name__


def _row(x: object) -> list[object] | None:
    """A 1-D sequence as a list for aligned display; None for anything else (a ragged list of
    lists, such as packing bins, included: a display helper must never turn a mismatch into a
    harness error)."""
    try:
        arr = np.asarray(x) if not isinstance(x, np.ndarray) else x
    except ValueError:
        return None
    if arr.ndim == 1 and arr.size <= ROW_LIMIT and arr.dtype.kind in "iufb":
        return arr.tolist()
    return None
