"""Mutation self-test: inject known packing faults (and fixes) into a copy of MB and see what the suites say.

The catalogue (``catalogue.json`` next to this file) is data. Each entry names one or more
exact edits of the ``megatron.bridge`` package (``file``, ``search`` text that must occur there
exactly once, ``replace`` text), the suites to run against the mutant, the ``layer`` of MB's
packing path it touches, and its ``kind``:

* ``fault``: a realistic regression; the oracle should catch it (it counts in the score);
* ``fix``: an edit that makes MB *more* correct; the oracle must not report any invariant
  violation that unmutated MB does not have (a fix that did would mean the oracle pins a bug).

A fault the suites cannot observe on this machine (e.g. context parallelism > 1 needs several
GPUs) says so with ``"catchable": false`` and a ``reason``; it is still run and reported, but
not scored. An entry whose search text is not found (MB changed that code) is *not applicable*.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import features
from harness.errors import CorruptFile, EnvironmentProblem

CATALOGUE = Path(__file__).with_name("catalogue.json")

LAYERS = ("preparation", "collate", "in_batch", "params", "gpt_step", "vlm_step", "sampler", "config", "algorithms")
"""Where in MB's packing path an entry edits: dataset preparation (tokenised examples to packed
artifacts), the packed dataset and its collate, in-batch (VLM collate) packing, building
``PackedSeqParams``, the GPT / VLM step functions, the batch sampler and samples mapping, config
validation, and the bin-packing algorithms."""

KINDS = ("fault", "fix")


CORE = "core:"
"""Prefix of an edit's file in megatron-core (``core:datasets/gpt_dataset.py``): a bug MB ships
through its megatron-core dependency is known by a fix there; the mutant then carries a copy of
megatron-core beside its copy of MB (``megatron`` is a namespace package, the copy comes first)."""


@dataclass(frozen=True)
class Edit:
    """One exact search/replace in one file of the ``megatron/bridge`` package (or, prefixed
    :data:`CORE`, of the ``megatron/core`` package beside it)."""

    file: str
    search: str
    replace: str

    @property
    def in_core(self) -> bool:
        return self.file.startswith(CORE)

    def path(self, package_dir: Path) -> Path:
        """The edited file for the MB package at ``package_dir`` (megatron-core: its sibling)."""
        if self.in_core:
            return Path(package_dir).parent / "core" / self.file.removeprefix(CORE)
        return Path(package_dir) / self.file

    def occurrences(self, package_dir: Path) -> int:
        path = self.path(package_dir)
        if not path.is_file():
            return 0
        return path.read_text(encoding="utf-8").count(self.search)


@dataclass(frozen=True)
class Fault:
    """A catalogue entry: a fault to catch or a fix the oracle must accept."""

    id: str
    edits: tuple[Edit, ...]
    suites: tuple[str, ...]
    description: str
    layer: str = "collate"
    kind: str = "fault"
    catchable: bool = True
    reason: str = ""  # why it is not catchable here (required when catchable is False)
    # the ledger feature (harness.features) whose code the fault edits when the installed MB predates it:
    # then it applies to MB main from a mirror (tests/test_faults_at_main.py), not to the installed MB
    since: str = ""

    @property
    def file(self) -> str:
        return self.edits[0].file

    @property
    def search(self) -> str:
        return self.edits[0].search

    @property
    def replace(self) -> str:
        return self.edits[0].replace

    @property
    def is_fix(self) -> bool:
        return self.kind == "fix"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Fault:
        where = f"catalogue entry {d.get('id', '?')!r}"
        try:
            raw = d["edits"] if "edits" in d else [{k: d[k] for k in ("file", "search", "replace")}]
            edits = tuple(Edit(e["file"], e["search"], e["replace"]) for e in raw)
            if not all(isinstance(v, str) for e in edits for v in (e.file, e.search, e.replace)):
                raise TypeError("file, search and replace must be strings")
            fault = cls(
                d["id"],
                edits,
                tuple(d.get("suites", ())),
                d.get("description", ""),
                d.get("layer", "collate"),
                d.get("kind", "fault"),
                bool(d.get("catchable", True)),
                d.get("reason", ""),
                d.get("since", ""),
            )
        except (KeyError, TypeError) as exc:
            raise CorruptFile(f"{where}: missing or malformed field {exc}") from None
        problems = fault.problems()
        if problems:
            raise CorruptFile(f"{where}: {'; '.join(problems)}")
        return fault

    def problems(self) -> list[str]:
        """What makes this entry unusable (empty when well-formed)."""
        out = []
        if self.layer not in LAYERS:
            out.append(f"layer {self.layer!r} is not one of {', '.join(LAYERS)}")
        if self.kind not in KINDS:
            out.append(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not self.edits:
            out.append("no edits")
        for e in self.edits:
            if not e.search or e.search == e.replace:
                out.append(f"edit of {e.file}: empty search or replace equal to search")
            rel = Path(e.file.removeprefix(CORE))
            if rel.is_absolute() or ".." in rel.parts:
                out.append(f"edit of {e.file}: path must stay inside the package")
        if not self.catchable and not self.reason:
            out.append("catchable is false but no reason says why")
        if self.is_fix and not self.catchable:
            out.append("a fix is checked for new violations, catchable does not apply")
        if self.since and self.since not in features.FEATURES:
            out.append(f"since {self.since!r} is not a ledger feature")
        return out

    def occurrences(self, package_dir: Path) -> int:
        """How often the search texts occur (each must occur exactly once: then this is 1)."""
        counts = [e.occurrences(package_dir) for e in self.edits]
        return 1 if all(c == 1 for c in counts) else (0 if 0 in counts else max(counts))

    def apply(self, package_dir: Path) -> bool:
        """Edit the files under ``package_dir``; False (nothing written) unless every search text occurs once.

        Edits of one file apply in order, each to the result of the previous one.
        """
        if self.occurrences(package_dir) != 1:
            return False
        texts: dict[Path, str] = {}
        for e in self.edits:
            path = e.path(package_dir)
            text = texts.get(path, path.read_text(encoding="utf-8"))
            if text.count(e.search) != 1:
                return False  # an earlier edit of the same file consumed or duplicated this one's text
            texts[path] = text.replace(e.search, e.replace)
        for path, text in texts.items():
            path.write_text(text, encoding="utf-8")
        return True


def load_catalogue(path: Path = CATALOGUE) -> list[Fault]:
    """Every entry of the catalogue; a malformed file or entry is a :class:`CorruptFile`."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = doc["faults"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFile(f"{path}: not a fault catalogue ({exc})") from None
    try:
        faults = [Fault.from_json(d) for d in entries]
    except (CorruptFile, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFile(f"{path}: not a fault catalogue ({type(exc).__name__}: {exc})") from None
    ids = [f.id for f in faults]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise CorruptFile(f"{path}: duplicate ids {', '.join(dupes)}")
    return faults


def installed_package_dir() -> Path:
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentProblem("megatron.bridge is not importable here (harness mutate copies the installed MB)")
    return Path(next(iter(spec.submodule_search_locations)))


def make_mutant(fault: Fault | None, src_pkg: Path | None = None, parent: Path | None = None) -> Path | None:
    """Copy MB into ``<tmp>/megatron/bridge`` and apply ``fault``; return the ``src`` root.

    ``fault=None`` gives the unmutated copy: the baseline, imported from the same kind of path
    as every mutant so that the only difference between their runs is the fault. None is
    returned when the fault is not applicable (its search text is not there exactly once).
    """
    src_pkg = src_pkg or installed_package_dir()
    if fault is not None and fault.occurrences(src_pkg) != 1:
        return None
    name = fault.id if fault is not None else "baseline"
    root = Path(tempfile.mkdtemp(prefix=f"mutant-{name}-", dir=parent))
    dest = root / "megatron" / "bridge"
    # __pycache__ is copied too: the edited file's new mtime invalidates its stale .pyc, the rest import fast
    shutil.copytree(src_pkg, dest)
    # megatron is a namespace package: megatron.core still resolves from site-packages, unless the
    # fault edits megatron-core too (then its copy sits beside MB's and is found first)
    if fault is not None and any(e.in_core for e in fault.edits):
        shutil.copytree(src_pkg.parent / "core", root / "megatron" / "core")
    if fault is not None and not fault.apply(dest):
        shutil.rmtree(root, ignore_errors=True)
        return None
    return root
