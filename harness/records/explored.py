"""An explored case kept as a regression case: its spec (the drawn fields) and the file it lives in.

A spec is the JSON object ``harness explore`` prints after ``--replay`` (the fields of
``suites._explore.ExploredCase`` but its id). The id is derived from the spec, so the same drawn
case always has the same id and saving it twice writes one file. ``harness explore --save``
writes ``<fixtures>/explored/<id>.json`` (:data:`KIND`, schema 1); the exploration suite reads
every file there as a regression case.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.errors import CorruptFile

KIND = "harness-explored-case"
DIRNAME = "explored"  # under the fixtures root, beside the suites' golden folders
SCHEMA = 1


def parse(text: str) -> dict[str, Any]:
    """The spec a printed line names (ValueError: not a JSON object)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not an explored case spec ({exc}): {text[:200]}") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"not an explored case spec (not a JSON object): {text[:200]}")
    return doc


# the fields that put a case in the layouts space (suites/_explore.ExploredCase), at their defaults
LAYOUT_DEFAULTS: dict[str, Any] = {
    "forward": False,
    "dp": 1,
    "in_batch": False,
    "cp": 1,
    "pp": 1,
    "direct": False,
    "pretrain": False,
    "energon": False,
    "mimo": False,
}


def space(spec: dict[str, Any]) -> str:
    """The exploration space a spec belongs to: ``direct`` (MB's direct HF SFT path), ``pretrain``
    (documents packed into pretraining samples), ``energon`` (MB's Energon VLM data path), ``mimo``
    (MB's MegatronMIMO data and step path), ``config`` (a whole packing configuration for MB's ``validate()``),
    ``layouts`` when it names a layout or packing path, else ``data``."""
    if spec.get("config"):
        return "config"
    if spec.get("direct"):
        return "direct"
    if spec.get("energon"):
        return "energon"
    if spec.get("mimo"):
        return "mimo"
    if spec.get("pretrain"):
        return "pretrain"
    return "layouts" if any(spec.get(k, v) != v for k, v in LAYOUT_DEFAULTS.items()) else "data"


def dumps(spec: dict[str, Any]) -> str:
    """One line of JSON, the form ``--replay`` takes."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def case_id(spec: dict[str, Any]) -> str:
    return "explored-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


def save(directory: Path, spec: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{case_id(spec)}.json"
    doc = {"kind": KIND, "schema": SCHEMA, "id": case_id(spec), "spec": spec}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def load_all(directory: Path) -> list[dict[str, Any]]:
    """Every saved spec under ``directory`` (sorted by file name; a bad file is a one-line error)."""
    out = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
            if doc.get("kind") != KIND or not isinstance(doc.get("spec"), dict):
                raise ValueError(f"not a {KIND} record")
        except (ValueError, AttributeError) as exc:
            raise CorruptFile(f"{path}: {exc}") from exc
        out.append(doc["spec"])
    return out
