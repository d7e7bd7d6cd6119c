"""Atomic, schema-versioned files.

Every file the harness writes carries ``schema_version`` and a ``kind`` and is written to a
temporary file in the same directory, fsynced, then renamed over the target, so a killed
process leaves either the old file or the new one, never half of one. The file gets the mode
a plain ``open(path, "w")`` would give it (``0o666`` less the umask): ``mkstemp`` creates
``0o600`` files, and reports, histories and JUnit files are meant to be read by teammates,
CI artifact uploaders and web servers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from harness.errors import CorruptFile

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask. Reading it means setting it and setting it straight back: the lock
    keeps two threads (bisect evaluations write in parallel) from restoring each other's value."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


R = TypeVar("R", bound="DataclassInstance")


def record_from(cls: type[R], doc: Mapping[str, object] | None, **decoded: object) -> R:
    """The dataclass record ``cls`` from its JSON document: the fields the class has (a newer
    writer's extra keys are dropped, absent ones take their defaults), with ``decoded`` in place of
    the fields that need decoding (enums, nested records). Lenient by design: records gain fields
    across schema versions without a migration each."""
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in (doc or {}).items() if k in names}
    kwargs.update(decoded)
    return cls(**kwargs)


def dump_json(obj: object) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_versioned_json(path: Path, kind: str, version: int, payload: Mapping[str, object]) -> None:
    """Write ``payload`` with ``kind`` and ``schema_version`` headers, atomically."""
    doc = {"kind": kind, "schema_version": version, **payload}
    atomic_write_text(path, dump_json(doc))


Migration = Callable[[dict[str, object]], dict[str, object]]


def read_versioned_json(
    path: Path,
    kind: str,
    version: int,
    migrations: dict[int, Migration] | None = None,
) -> dict[str, Any]:
    """Read a file written by :func:`write_versioned_json`.

    Older versions are migrated step by step through ``migrations[v]`` (v -> v+1); a newer
    version, a missing header, another kind or invalid JSON raise :class:`CorruptFile` with the
    path, so the user knows which file to fix or delete.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFile(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise CorruptFile(f"{path}: not a {kind} file (kind={doc.get('kind') if isinstance(doc, dict) else None!r})")
    found = doc.get("schema_version")
    if not isinstance(found, int):
        raise CorruptFile(f"{path}: missing schema_version")
    if found > version:
        raise CorruptFile(
            f"{path}: schema_version {found} is newer than this harness understands ({version}); upgrade the harness"
        )
    migrations = migrations or {}
    while found < version:
        step = migrations.get(found)
        if step is None:
            raise CorruptFile(f"{path}: schema_version {found} is too old and cannot be migrated to {version}")
        doc = step(doc)
        found += 1
        doc["schema_version"] = found
    return doc
