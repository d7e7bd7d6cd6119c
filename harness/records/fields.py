"""Typed reads of one field of a JSON document (a record's ``from_json``).

A document read from disk is whatever ``json`` parsed; these say what a field must be and give
it that type, leniently where records have always been lenient (an absent or null field takes
its default), strictly where a wrong shape would otherwise be misread (a string where a list
belongs is a ``TypeError``, which the loaders turn into a one-line ``CorruptFile``).
"""

from __future__ import annotations

from collections.abc import Mapping


def text(doc: Mapping[str, object], key: str, default: str = "") -> str:
    """A string field; absent, null or empty: ``default``."""
    return str(doc.get(key) or default)


def optional_text(doc: Mapping[str, object], key: str) -> str | None:
    value = doc.get(key)
    return None if value is None else str(value)


def texts(doc: Mapping[str, object], key: str) -> list[str]:
    """A list of strings; absent or null: empty."""
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise TypeError(f"field {key!r}: expected a list, got {type(value).__name__}")
    return [str(v) for v in value]


def text_map(doc: Mapping[str, object], key: str) -> dict[str, str]:
    """A mapping of strings; absent or null: empty."""
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise TypeError(f"field {key!r}: expected an object, got {type(value).__name__}")
    return {str(k): str(v) for k, v in value.items()}


def whole(doc: Mapping[str, object], key: str, default: int = 0) -> int:
    """An integer field; absent or null: ``default``."""
    value = _scalar(doc, key)
    return default if value is None else int(value)


def number(doc: Mapping[str, object], key: str, default: float = 0.0) -> float:
    """A float field; absent or null: ``default``."""
    value = _scalar(doc, key)
    return default if value is None else float(value)


def _scalar(doc: Mapping[str, object], key: str) -> int | float | str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, (int, float, str)):
        raise TypeError(f"field {key!r}: expected a number, got {type(value).__name__}")
    return value


def flag(doc: Mapping[str, object], key: str, default: bool = False) -> bool:
    return bool(doc.get(key, default))
