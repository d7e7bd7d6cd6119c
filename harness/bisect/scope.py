"""What one evaluation ran: a selection run whole (suites, ``-k``), or listed cases only.

Why it is recorded: the verdict cache holds verdicts per (commit, case). A bisection's
endpoints run its whole selection, since they decide which cases are open; an intermediate
probe runs only the cases still open. A later bisect (or nightly) asking for other cases at
a cached commit must know what is there: a case probe never stands for a whole selection
(a partial probe never poisons a full one), and a selection run covers a suite only for the
same ``-k``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.contract import split_case_id


@dataclass(frozen=True)
class Scope:
    """``suites`` None: the default suite set; ``cases`` set: a probe of exactly these cases."""

    suites: tuple[str, ...] | None = None
    keyword: str | None = None
    cases: tuple[str, ...] | None = None

    @property
    def partial(self) -> bool:
        return self.cases is not None

    def label(self) -> str:
        """A few words for a probe line: "all", "suites a, b", "3 open cases"."""
        if self.cases is not None:
            return f"{len(self.cases)} open case{'s' if len(self.cases) != 1 else ''}"
        if self.suites is None:
            what = "all"
        elif len(self.suites) > 3:  # a part of an endpoint (harness.bisect.split)
            what = f"{len(self.suites)} suites ({', '.join(self.suites[:2])}, ...)"
        else:
            what = "suites " + ", ".join(self.suites)
        return what + (f" -k {self.keyword!r}" if self.keyword else "")

    def to_json(self) -> str:
        doc: dict[str, object] = {}
        if self.suites is not None:
            doc["suites"] = sorted(self.suites)
        if self.keyword is not None:
            doc["k"] = self.keyword
        if self.cases is not None:
            doc["cases"] = sorted(self.cases)
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Scope:
        """'' (rows stored before scopes were recorded) reads as a run of the default selection:
        those rows are reachable only under the default selection's key (see the cache)."""
        doc = json.loads(text) if text else {}
        suites, cases = doc.get("suites"), doc.get("cases")
        return cls(
            tuple(suites) if suites is not None else None,
            doc.get("k"),
            tuple(cases) if cases is not None else None,
        )


def suite_of(case_id: str) -> str:
    """The suite of a case id (harness.contract spells the format)."""
    return split_case_id(case_id)[0]
