"""What a golden change means for training: more or fewer trained tokens, moved boundaries, other loss totals.

A CHANGED case holds every invariant, so it was offered as "review the diff and accept it". But
an invariant checks what it can see: at MB main, 13 ``parallel_layouts`` cases changed with
trained-token counts rising (7 -> 16) in the very direction of a live padding regression, and
accepting them would have written the defect into the goldens. So a golden diff is also read in
training terms, from the fields the goldens keep:

* trained tokens: ``trained``, ``trained_positions``, ``loss_mask``, ``num_tokens``,
  ``token_count`` (summed: "trains 9 more tokens");
* boundaries: any ``cu_seqlens*`` field, ``boundaries``, ``seqlens`` ("boundaries move");
* padding rows: ``untrained_rows``, ``padded_validation``;
* loss totals: ``loss_sum``.

A change with any such consequence is not offered for accept: ``harness fixtures record``
refuses it without ``--accept-training-change``, and the reports say why. A change elsewhere
(provenance, a refusal's wording, widths) has no training consequence and is accepted as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

TRAINED = frozenset({"trained", "trained_positions", "loss_mask", "num_tokens", "token_count"})
BOUNDARIES = re.compile(r"^(cu_seqlens\w*|boundaries|seqlens)$")
PADDING_ROWS = frozenset({"untrained_rows", "padded_validation"})
LOSS = frozenset({"loss_sum"})
_KEY = re.compile(r"\.?([A-Za-z_][\w]*)(?:\[\d+\])*$")


def consequences(pairs: Iterable[tuple[str, object, object]]) -> list[str]:
    """The training consequences of leaf changes ``(path, golden, obtained)`` (empty: none)."""
    more = 0.0
    moved, padding, loss = set(), set(), set()
    for path, golden, obtained in pairs:
        key = _leaf(path)
        if key in TRAINED:
            more += _total(obtained) - _total(golden)
        elif BOUNDARIES.match(key):
            moved.add(path)
        elif key in PADDING_ROWS:
            padding.add(path)
        elif key in LOSS:
            loss.add(path)
    out = []
    if more:
        n = abs(more)
        amount = f"{int(n)}" if float(n).is_integer() else f"{n:g}"
        out.append(f"trains {amount} {'more' if more > 0 else 'fewer'} token(s)")
    if moved:
        out.append(f"boundaries move ({len(moved)} field(s))")
    if padding:
        out.append("padding rows change")
    if loss:
        out.append("loss totals change")
    return out


def from_mismatches(diff_data: dict[str, Any] | None) -> list[str]:
    """Consequences of a run's structured golden diff (``CaseResult.diff_data``)."""
    pairs: list[tuple[str, object, object]] = []
    for m in (diff_data or {}).get("mismatches", []):
        golden = m.get("expected_row", m.get("expected"))
        obtained = m.get("obtained_row", m.get("obtained"))
        pairs.append((str(m.get("path", "")), golden, obtained))
    return consequences(pairs)


def between(golden: object, obtained: object) -> list[str]:
    """Consequences of replacing the golden value ``golden`` with ``obtained`` (whole documents)."""
    return consequences(_leaves(golden, obtained, "$"))


def _leaves(a: object, b: object, path: str) -> Iterator[tuple[str, object, object]]:
    a, b = (x.tolist() if hasattr(x, "tolist") else x for x in (a, b))  # numpy values of a golden
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from _leaves(a.get(key), b.get(key), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and _leaf(path) not in TRAINED and not _numeric(a, b):
        for i in range(max(len(a), len(b))):
            yield from _leaves(a[i] if i < len(a) else None, b[i] if i < len(b) else None, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


def _numeric(a: list[object], b: list[object]) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in [*a, *b])


def _leaf(path: str) -> str:
    """The field a path ends in: ``$.micro_batches[0].trained`` -> ``trained``."""
    found = _KEY.search(path)
    return found.group(1) if found else path


def _total(value: object) -> float:
    if value is None or isinstance(value, bool):
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return sum(_total(v) for v in value)
    return 0.0
