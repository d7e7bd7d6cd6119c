"""The parts of ``bisect.json`` that the descent into Megatron-LM adds (schema 3).

A second-level record is an ordinary :class:`~harness.bisect.document.BisectDoc` whose commits
are Megatron-LM commits, with :class:`HeldMB` (the MB tree held fixed) and :class:`PinCheck`
(is the Megatron-LM change between its endpoints what breaks the cases, MB held). A first-level
record keeps one :class:`Descent` per MB culprit that moved the pin, with the second-level
record nested in it (descended or, with the reason, not).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.bisect.document import BisectDoc


@dataclass(frozen=True)
class HeldMB:
    """The Megatron-Bridge held fixed while Megatron-LM commits vary (the second level)."""

    sha: str  # the MB commit, or "tree-<content hash>" for a source tree given with --mb-src
    repo: str = ""  # the MB repository holding ``sha`` ('' for a source tree)
    src: str = ""  # the source tree given with --mb-src ('' for a commit)
    subject: str = ""  # the MB commit's subject

    @property
    def label(self) -> str:
        """How the terminal and the report name it."""
        return f"source tree {self.src}" if self.src else f"{self.sha[:12]} {self.subject}".rstrip()

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> HeldMB:
        return cls(*(str(doc.get(k) or "") for k in ("sha", "repo", "src", "subject")))


class PinStatus(enum.Enum):
    """Whether the Megatron-LM change alone reproduces the cases, MB held fixed."""

    CONFIRMED = "confirmed"  # every case failing with the new commit is good with the old one
    PARTLY = "partly"  # some are; the others fail with the old commit too
    NOT_CONFIRMED = "not_confirmed"  # none: the change is not observable, or MB's side of it is the cause


@dataclass
class PinCheck:
    """The endpoints of a second-level bisection read as a check of the Megatron-LM change."""

    status: PinStatus
    detail: str = ""

    @property
    def label(self) -> str:
        return {
            PinStatus.CONFIRMED: "confirmed as the cause",
            PinStatus.PARTLY: "partly confirmed as the cause",
            PinStatus.NOT_CONFIRMED: "not confirmed as the cause",
        }[self.status]

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "detail": self.detail}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PinCheck:
        return cls(PinStatus(doc.get("status") or PinStatus.NOT_CONFIRMED.value), str(doc.get("detail") or ""))


@dataclass
class Descent:
    """One MB culprit that moved the pinned Megatron-LM, and the bisection of Megatron-LM behind it."""

    mb_culprit: str  # the MB commit that moved 3rdparty/Megatron-LM
    cases: list[str] = field(default_factory=list)  # the cases blamed on it (re-run at the second level)
    old_pin: str | None = None  # its parent's pin
    new_pin: str | None = None  # its pin
    descended: bool = False
    reason: str = ""  # not descended: why; descended: how the Megatron-LM range was walked
    doc: BisectDoc | None = None  # the second-level record

    def to_json(self) -> dict[str, Any]:
        return {
            "mb_culprit": self.mb_culprit,
            "cases": list(self.cases),
            "old_pin": self.old_pin,
            "new_pin": self.new_pin,
            "descended": self.descended,
            "reason": self.reason,
            "doc": self.doc.to_json() if self.doc else None,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Descent:
        from harness.bisect.document import BisectDoc  # the record nests a whole BisectDoc

        nested = doc.get("doc")
        return cls(
            str(doc.get("mb_culprit") or ""),
            [str(c) for c in doc.get("cases") or []],
            doc.get("old_pin"),
            doc.get("new_pin"),
            bool(doc.get("descended", False)),
            str(doc.get("reason") or ""),
            BisectDoc.from_json(nested) if isinstance(nested, dict) else None,
        )
