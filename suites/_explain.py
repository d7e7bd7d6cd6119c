"""Assertion messages that say what differs: which row or bin, which position, both values.

A failing suite check is read by someone triaging a nightly, often without a debugger. pytest's
rewriting explains ``a == b`` well but says ``assert False + where False = all(<generator ...>)``
for ``all``/``any`` over a generator and shows a whole ``Counter`` for a multiset mismatch; these
helpers find the first offending element instead, so the message names it. They only describe:
every check keeps its own condition (a helper returns ``""`` when nothing differs, and callers
assert the condition itself, never the helper's text).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

#: Longest rendering of one value in a message (rows are shown whole up to this).
MAX_CHARS = 240


def show(value: Any) -> str:
    """``repr`` of a value, cut to :data:`MAX_CHARS` (a 4,000-token row helps nobody)."""
    text = repr(value)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


def first_difference(expected: Sequence[Any], got: Sequence[Any], unit: str = "position") -> str:
    """Where two sequences first differ: ``position 3: expected 1, got 0 (lengths 12 and 12)``.

    A length difference with an equal prefix names the first missing or extra element.
    """
    for i, (e, g) in enumerate(zip(expected, got)):
        if e != g:
            where = _field_difference(e, g)
            if where:
                return f"{unit} {i}, {where}"
            return f"{unit} {i}: expected {show(e)}, got {show(g)} (lengths {len(expected)} and {len(got)})"
    if len(expected) == len(got):
        return ""
    i = min(len(expected), len(got))
    if len(expected) > len(got):
        return f"{unit} {i}: expected {show(expected[i])}, got nothing (lengths {len(expected)} and {len(got)})"
    return f"{unit} {i}: expected nothing, got {show(got[i])} (lengths {len(expected)} and {len(got)})"


def _field_difference(expected: Any, got: Any) -> str:
    """For two records (dicts) that differ: the first field that differs and where in it, so a
    message about a whole packed row names ``labels`` at position 17 instead of showing the row
    cut at its first 240 characters. ``""`` for values that are not both dicts."""
    if not (isinstance(expected, dict) and isinstance(got, dict)):
        return ""
    for key in sorted(set(expected) | set(got), key=str):
        if key not in got:
            return f"field {key!r}: expected {show(expected[key])}, got no such field"
        if key not in expected:
            return f"field {key!r}: expected no such field, got {show(got[key])}"
        e, g = expected[key], got[key]
        if e == g:
            continue
        if isinstance(e, Sequence) and isinstance(g, Sequence) and not isinstance(e, str):
            return f"field {key!r} " + first_difference(e, g)
        return f"field {key!r}: expected {show(e)}, got {show(g)}"
    return ""


def multiset_difference(expected: Iterable[Any], got: Iterable[Any], what: str = "item") -> str:
    """What a multiset comparison lost or gained: ``missing 2 x 17; extra 1 x 5``."""
    want, have = Counter(expected), Counter(got)
    missing = want - have
    extra = have - want
    parts = []
    if missing:
        parts.append("missing " + ", ".join(f"{n} x {show(k)}" for k, n in sorted(missing.items(), key=_key)))
    if extra:
        parts.append("extra " + ", ".join(f"{n} x {show(k)}" for k, n in sorted(extra.items(), key=_key)))
    return f"{what}s: " + "; ".join(parts) if parts else ""


def _key(item: tuple[Any, int]) -> str:
    return repr(item[0])


def first_offender(items: Iterable[T], ok: Callable[[T], bool], unit: str = "element") -> str:
    """The first element of ``items`` for which ``ok`` is false: ``element 4: 129``."""
    for i, item in enumerate(items):
        if not ok(item):
            return f"{unit} {i}: {show(item)}"
    return ""
