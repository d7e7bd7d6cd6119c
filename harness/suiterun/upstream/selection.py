"""Which of MB's own packing tests the ``upstream`` suite runs, per era of the target's tree.

``selection.json`` (next to this module) lists entries (MB's packing verification commands); each
entry has variants, newest era first, each naming a test file, an optional ``-k`` and the pass
count MB's guidance states. :func:`resolve` picks, per entry, the variant whose probes (files
present, keywords in their text) hold in the tree at hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.errors import CorruptFile

SELECTION_FILE = Path(__file__).with_name("selection.json")
SELECTION_KIND = "harness-upstream-selection"
NO_MATCH = "selection matches no test here"


@dataclass(frozen=True)
class Probe:
    file: str | None  # None: the variant's own file
    contains: tuple[str, ...]  # any of these substrings (empty: the file existing is enough)


@dataclass(frozen=True)
class Variant:
    era: str
    file: str
    k: str | None = None
    expected_passed: int | None = None
    probes: tuple[Probe, ...] = ()

    @property
    def command(self) -> str:
        """The file and its ``-k``, as MB's guidance writes the command."""
        return f'{self.file} -k "{self.k}"' if self.k else self.file


@dataclass(frozen=True)
class Entry:
    name: str
    variants: tuple[Variant, ...]


@dataclass(frozen=True)
class Selection:
    entries: tuple[Entry, ...]
    count_rule: str = "at_least"  # or "exact"


def load_selection(path: Path | None = None) -> Selection:
    """The selection (default ``selection.json`` beside this module); :class:`CorruptFile`, one
    line naming the file, when it is not one."""
    path = path or SELECTION_FILE
    try:
        return _parse(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFile(f"{path}: not a valid {SELECTION_KIND} file ({type(exc).__name__}: {exc})") from None


def _parse(doc: dict) -> Selection:
    if doc.get("kind") != SELECTION_KIND or doc.get("schema") != 1:
        raise ValueError(f"kind {doc.get('kind')!r} schema {doc.get('schema')!r}, not {SELECTION_KIND} schema 1")
    entries = []
    for entry_doc in doc["entries"]:
        variants = []
        for variant_doc in entry_doc["variants"]:
            probes = tuple(Probe(p.get("file"), tuple(p.get("contains", ()))) for p in variant_doc.get("probes", ()))
            variants.append(
                Variant(
                    variant_doc["era"],
                    variant_doc["file"],
                    variant_doc.get("k"),
                    variant_doc.get("expected_passed"),
                    probes,
                )
            )
        entries.append(Entry(entry_doc["name"], tuple(variants)))
    rule = doc.get("count_rule", "at_least")
    if rule not in ("at_least", "exact"):
        raise ValueError(f"count_rule must be 'at_least' or 'exact', not {rule!r}")
    return Selection(tuple(entries), rule)


@dataclass(frozen=True)
class Resolved:
    """What one entry means at this commit: a variant to run, or why there is none."""

    entry: Entry
    variant: Variant | None
    probed: bool  # the variant's probes held (False: fallback run, no count check)
    reason: str = ""

    @property
    def expected_passed(self) -> int | None:
        return self.variant.expected_passed if self.variant and self.probed else None


def _probe_holds(tree: Path, variant: Variant, probe: Probe, cache: dict[Path, str | None]) -> bool:
    path = tree / (probe.file or variant.file)
    if path not in cache:
        try:
            cache[path] = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
        except OSError:
            cache[path] = None
    text = cache[path]
    return text is not None and (not probe.contains or any(s in text for s in probe.contains))


def resolve(tree: Path, selection: Selection) -> list[Resolved]:
    """Choose each entry's era by probing the tree (files present, keywords in their text)."""
    cache: dict[Path, str | None] = {}
    out = []
    for entry in selection.entries:
        chosen = next(
            (
                v
                for v in entry.variants
                if (tree / v.file).is_file() and all(_probe_holds(tree, v, p, cache) for p in v.probes)
            ),
            None,
        )
        if chosen is not None:
            out.append(Resolved(entry, chosen, True))
            continue
        present = next((v for v in entry.variants if (tree / v.file).is_file()), None)
        if present is not None:
            out.append(Resolved(entry, present, False, "no era's probes hold; newest present form run, no count"))
        else:
            files = sorted({v.file for v in entry.variants})
            out.append(Resolved(entry, None, False, f"{NO_MATCH}: none of {', '.join(files)} exists at this commit"))
    return out


def describe(resolution: Resolved) -> str:
    """One note line: which form of an entry runs at this commit, and why."""
    variant = resolution.variant
    if variant is None:
        return f"upstream {resolution.entry.name}: {resolution.reason}"
    count = f", MB guidance: {variant.expected_passed} passed" if resolution.expected_passed is not None else ""
    how = f"era {variant.era}{count}" if resolution.probed else f"era {variant.era} ({resolution.reason})"
    return f"upstream {resolution.entry.name}: {variant.command} ({how})"
