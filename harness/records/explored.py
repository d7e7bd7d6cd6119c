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
from dataclasses import dataclass
from pathlib import Path

from harness.errors import CorruptFile

KIND = "harness-explored-case"
DIRNAME = "explored"  # under the fixtures root, beside the suites' golden folders
SCHEMA = 1


def parse(text: str) -> dict[str, object]:
    """The spec a printed line names (ValueError: not a JSON object)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not an explored case spec ({exc}): {text[:200]}") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"not an explored case spec (not a JSON object): {text[:200]}")
    return doc


# the fields that put a case in the layouts space (suites/_explore.ExploredCase), at their defaults
LAYOUT_DEFAULTS: dict[str, object] = {
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


@dataclass(frozen=True)
class Space:
    """One exploration space: what ``harness explore --space`` names, how a drawn case says it is one of
    its cases, and the exploration suite's tests that draw it and replay its saved cases.

    Why a registry: the space's name, its spec field, its drawing test and its saved-case test were
    spelled in four files; here they are declared once, and ``harness explore``, the saved cases and
    the suite (``suites/_explore.ExploredCase.axis``) read them."""

    name: str
    field: str | None  # the spec field set on its cases (None: data and layouts, told apart by LAYOUT_DEFAULTS)
    test: str  # suites/test_explore.py's test that draws the space (and replays one of its specs)
    saved_test: str  # the test that runs its saved cases
    what: str  # for --space's help


SPACES: tuple[Space, ...] = (
    Space("data", None, "test_explore_offline_packing", "test_saved_explored_case", "data shapes and offline knobs"),
    Space(
        "layouts",
        None,
        "test_explore_layouts",
        "test_saved_explored_layout_case",
        "those under a parallel layout or packing path",
    ),
    Space(
        "direct",
        "direct",
        "test_explore_direct_sft",
        "test_saved_explored_layout_case",
        "those through MB's direct HF SFT path",
    ),
    Space(
        "pretrain",
        "pretrain",
        "test_explore_pretraining",
        "test_saved_explored_layout_case",
        "documents packed into pretraining samples",
    ),
    Space(
        "energon",
        "energon",
        "test_explore_energon",
        "test_saved_explored_layout_case",
        "image/chat samples through MB's Energon data path",
    ),
    Space(
        "mimo",
        "mimo",
        "test_explore_mimo",
        "test_saved_explored_layout_case",
        "a user's image folder through MB's MIMO path",
    ),
    Space(
        "config",
        "config",
        "test_explore_config",
        "test_saved_explored_layout_case",
        "whole packing configurations against MB's rules",
    ),
)
BY_NAME = {s.name: s for s in SPACES}
# the spaces a spec field names, in the order a spec is told apart (a spec sets at most one of them)
MARKED: tuple[Space, ...] = tuple(BY_NAME[n] for n in ("config", "direct", "energon", "mimo", "pretrain"))


def marked(spec: dict[str, object]) -> Space | None:
    """The space whose field ``spec`` sets (another data path or a configuration), None for the data itself."""
    return next((s for s in MARKED if s.field is not None and spec.get(s.field)), None)


def space(spec: dict[str, object]) -> str:
    """The exploration space a spec belongs to (:data:`SPACES`): the one its field names, else
    ``layouts`` when it names a layout or packing path, else ``data``."""
    named = marked(spec)
    if named is not None:
        return named.name
    return "layouts" if any(spec.get(k, v) != v for k, v in LAYOUT_DEFAULTS.items()) else "data"


def dumps(spec: dict[str, object]) -> str:
    """One line of JSON, the form ``--replay`` takes."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def case_id(spec: dict[str, object]) -> str:
    return "explored-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


def save(directory: Path, spec: dict[str, object]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{case_id(spec)}.json"
    doc = {"kind": KIND, "schema": SCHEMA, "id": case_id(spec), "spec": spec}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def load_all(directory: Path) -> list[dict[str, object]]:
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
