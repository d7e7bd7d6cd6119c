"""The knobs log: one JSON object per line, appended by every suite process of a run.

Two kinds of line: ``knob`` (the inventory entry of a knob the process saw in MB's code) and
``value`` (a value a case called MB with, and the suite of that case); and for the training paths
(:mod:`harness.suite.knobs.steps`) ``step`` (a step or loss function MB defines) and ``called`` (one a
case called, and the suite of that case). Lines, not one document:
the light and full import groups, xdist workers and fork-server children all append to the
same file, none of them knowing about the others; :func:`read` merges them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import CorruptFile

SCHEMA = 1
FACTORY = "<factory>"  # the default of a dataclass field made by its default_factory (a fresh one per call)


@dataclass(frozen=True)
class Knob:
    """One knob: where it lives, its name, its declared type and its default (source text)."""

    module: str  # megatron.bridge.data.packing.config
    owner: str  # PackedSequenceSpecs, GPTSFTDataset.__init__, collate_fn
    name: str
    annotation: str = ""
    default: str | None = None  # None: required
    read: bool = True  # False: a parameter MB stores and never reads (see the module docstring)
    why: str = ""  # with read=False, when the reason is not the parameter's own: which code alone reads it

    @property
    def key(self) -> str:
        return f"{self.module}:{self.owner}.{self.name}"

    def to_json(self) -> dict[str, str | bool | None]:
        return {
            "module": self.module,
            "owner": self.owner,
            "name": self.name,
            "annotation": self.annotation,
            "default": self.default,
            **({"read": False} if not self.read else {}),
            **({"why": self.why} if self.why else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, str | bool | None]) -> Knob:
        return cls(
            str(d["module"]),
            str(d["owner"]),
            str(d["name"]),
            str(d.get("annotation") or ""),
            None if d.get("default") is None else str(d.get("default")),
            d.get("read", True) is not False,
            str(d.get("why") or ""),
        )


@dataclass(frozen=True)
class KnobLine:
    kind: str  # "knob", "value", "step" or "called"
    knob: Knob | None = None
    key: str = ""
    value: str = ""
    suite: str = ""
    passed: bool = True  # the caller passed the value (False: the signature's default applied)

    @classmethod
    def of_knob(cls, knob: Knob) -> KnobLine:
        return cls("knob", knob=knob, key=knob.key)

    @classmethod
    def of_value(cls, key: str, value: str, suite: str, passed: bool) -> KnobLine:
        return cls("value", key=key, value=value, suite=suite, passed=passed)

    def dumps(self) -> str:
        doc: dict[str, object] = {"schema": SCHEMA, "kind": self.kind, "key": self.key}
        if self.knob is not None:
            doc["knob"] = self.knob.to_json()
        if self.kind == "value":
            doc.update(value=self.value, suite=self.suite, passed=self.passed)
        elif self.kind == "called":
            doc.update(suite=self.suite)
        elif self.kind == "step" and self.value:
            doc.update(value=self.value)  # why no packed batch reaches it (harness.suite.knobs.steps.off_packed_path)
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> KnobLine:
        doc = json.loads(text)
        knob = Knob.from_json(doc["knob"]) if doc.get("knob") else None
        return cls(
            str(doc["kind"]),
            knob,
            str(doc.get("key", "")),
            str(doc.get("value", "")),
            str(doc.get("suite", "")),
            bool(doc.get("passed", True)),
        )


@dataclass
class Exercised:
    """The merged log: every knob seen, and per knob the values exercised with their suites."""

    knobs: dict[str, Knob]
    values: dict[str, dict[str, set[str]]]  # knob key -> value -> suites
    passed: dict[str, set[str]] = field(default_factory=dict)  # knob key -> values a caller passed
    defaulted: dict[str, set[str]] = field(default_factory=dict)  # knob key -> values MB's default gave
    steps: dict[str, set[str]] = field(default_factory=dict)  # step or loss function -> suites that called it
    off_path: dict[str, str] = field(default_factory=dict)  # step or loss function -> why no packed batch reaches it


def read(path: Path) -> Exercised:
    """Merge a knobs log (a missing file is an empty log; a corrupt line is a one-line error)."""
    knobs: dict[str, Knob] = {}
    values: dict[str, dict[str, set[str]]] = {}
    passed: dict[str, set[str]] = {}
    defaulted: dict[str, set[str]] = {}
    step_calls: dict[str, set[str]] = {}
    off_path: dict[str, str] = {}
    if not path.is_file():
        return Exercised(knobs, values, passed, defaulted, step_calls, off_path)
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = KnobLine.loads(text)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptFile(f"{path}:{n}: not a knobs log line ({exc})") from exc
        if line.kind == "knob" and line.knob is not None:
            previous = knobs.get(line.key)
            if previous is None or (line.knob.default is not None and previous.default is None):
                knobs[line.key] = line.knob
        elif line.kind == "value":
            values.setdefault(line.key, {}).setdefault(line.value, set()).add(line.suite)
            (passed if line.passed else defaulted).setdefault(line.key, set()).add(line.value)
        elif line.kind == "step":
            step_calls.setdefault(line.key, set())
            if line.value:
                off_path[line.key] = line.value
        elif line.kind == "called":
            step_calls.setdefault(line.key, set()).add(line.suite)
    return Exercised(knobs, values, passed, defaulted, step_calls, off_path)
