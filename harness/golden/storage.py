"""One golden file per case: ``fixtures/<suite>/<case>.json`` plus an optional ``.npz``.

The JSON carries ``kind``, ``schema_version``, the case identity, provenance (MB version or
commit, torch version, date, harness version), per-field tolerances and the encoded value.
Goldens are only written by :func:`write_golden`, which only the explicit
``harness fixtures record`` command calls; suites write *obtained* values elsewhere.
"""

from __future__ import annotations

import enum
import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import CorruptFile
from harness.records.atomicio import atomic_write_bytes, read_versioned_json, write_versioned_json

GOLDEN_KIND = "harness-golden"
GOLDEN_SCHEMA = 1


def safe_name(case: str) -> str:
    """File-system-safe, stable name for a case id (parametrize ids included)."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", case).strip("-") or "case"


@dataclass(frozen=True)
class Tolerance:
    """How far a float field may move: ``|obtained - golden| <= atol + rtol * |golden|``."""

    atol: float = 0.0
    rtol: float = 0.0


@dataclass
class Golden:
    suite: str
    case: str
    value: object
    sidecar: dict[str, np.ndarray] = field(default_factory=dict)
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    provenance: dict[str, object] = field(default_factory=dict)


def golden_path(root: Path, suite: str, case: str) -> Path:
    return Path(root) / suite / f"{safe_name(case)}.json"


def _npz_path(json_path: Path) -> Path:
    return json_path.with_suffix(".npz")


def write_golden(path: Path, golden: Golden) -> None:
    """Write the JSON (and the sidecar when there are large arrays) atomically."""
    payload = {
        "suite": golden.suite,
        "case": golden.case,
        "provenance": golden.provenance,
        "tolerances": {k: {"atol": t.atol, "rtol": t.rtol} for k, t in sorted(golden.tolerances.items())},
        "value": golden.value,
    }
    if golden.sidecar:
        buf = io.BytesIO()
        arrays: dict[str, Any] = dict(golden.sidecar)  # names are array keys, never savez's own options
        np.savez(buf, **arrays)
        atomic_write_bytes(_npz_path(path), buf.getvalue())
    elif _npz_path(path).exists():
        _npz_path(path).unlink()
    write_versioned_json(path, GOLDEN_KIND, GOLDEN_SCHEMA, payload)


def read_golden(path: Path) -> Golden:
    """Read a golden; a damaged JSON or sidecar raises :class:`CorruptFile` naming the file."""
    doc = read_versioned_json(path, GOLDEN_KIND, GOLDEN_SCHEMA)
    try:
        tolerances = {k: Tolerance(float(v["atol"]), float(v["rtol"])) for k, v in doc.get("tolerances", {}).items()}
        golden = Golden(doc["suite"], doc["case"], doc["value"], {}, tolerances, doc.get("provenance", {}))
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptFile(f"{path}: malformed golden ({exc})") from None
    npz = _npz_path(path)
    if npz.exists():
        try:
            with np.load(npz, allow_pickle=False) as data:
                golden.sidecar = {k: data[k] for k in data.files}
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise CorruptFile(f"{npz}: unreadable golden sidecar ({exc})") from None
    return golden


REVIEW_KIND = "harness-golden-review"
REVIEW_SCHEMA = 1


class ReviewStatus(enum.Enum):
    """What a staged value is to the golden it would replace."""

    NEW = "new"  # no golden yet
    REPLACE = "replace"  # the current golden is unreadable
    CHANGED = "changed"  # differs beyond the golden's tolerances
    SAME = "same"  # within them


@dataclass(frozen=True)
class Review:
    """The suite process's comparison of a staged value with the current golden.

    Why a record: comparing is the suite process's (:mod:`harness.suite.compare`); ``harness
    fixtures record``, in the driver, reads what it found beside the staged golden
    (:func:`review_path`) instead of importing the comparator.
    """

    status: ReviewStatus
    diff: str = ""  # the comparator's text, for CHANGED; the read error, for REPLACE
    training: tuple[str, ...] = ()  # what the change does to what trains (harness.golden.training)


def review_path(staged: Path) -> Path:
    return staged.with_suffix(".review")


def write_review(staged: Path, review: Review) -> None:
    payload = {"status": review.status.value, "diff": review.diff, "training": list(review.training)}
    write_versioned_json(review_path(staged), REVIEW_KIND, REVIEW_SCHEMA, payload)


def read_review(staged: Path) -> Review:
    """The review beside a staged golden; a missing or damaged one raises :class:`CorruptFile`."""
    path = review_path(staged)
    if not path.exists():
        raise CorruptFile(f"{path}: no review beside the staged golden (written by an older suite process?)")
    doc = read_versioned_json(path, REVIEW_KIND, REVIEW_SCHEMA)
    try:
        return Review(ReviewStatus(doc["status"]), str(doc["diff"]), tuple(str(t) for t in doc["training"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptFile(f"{path}: malformed golden review ({exc})") from None
