"""Result records of a run: what the plugin writes and every report reads.

One ``results.json`` per run (kind ``harness-run``), versioned and written atomically.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.records.atomicio import read_versioned_json, record_from, write_versioned_json
from harness.records.machine import Machine, upgrade_v1
from harness.records.provenance import Provenance
from harness.records.verdict import FAILING, Verdict

RUN_KIND = "harness-run"
RUN_SCHEMA = 2  # 2: ``machine`` is a :class:`~harness.records.machine.Machine` (was cpus/accelerator)


@dataclass
class CaseResult:
    """The verdict of one case, with what a person needs to understand it."""

    case_id: str  # "<suite>::<case>", stable across commits (it keys bisect verdicts)
    suite: str
    verdict: Verdict
    duration_s: float = 0.0
    message: str = ""  # one paragraph: failure summary, untestable reason, error
    diff: str = ""  # human-readable golden diff (terminal and HTML)
    diff_data: dict[str, Any] | None = None  # structured diff (first index, errors, rows)
    source: str = "golden"  # "golden" or "upstream": which source of verdicts
    violations: list[dict[str, object]] = field(default_factory=list)  # broken oracle invariants (structured)
    known: list[str] = field(default_factory=list)  # known MB bug entries that explain (or expected) it
    impacts: list[str] = field(default_factory=list)  # training impacts of a FAIL / KNOWN_FAIL (oracle.impact)
    tier: str = "documented"  # "hypothetical": an input no MB producer emits, never failing a run

    @classmethod
    def bare(cls, case_id: str, verdict: Verdict, message: str = "") -> CaseResult:
        """A record of a verdict alone (its suite read from the case id): what a cache of an older
        schema held, or an evaluator that runs no suite process gives."""
        return cls(case_id, case_id.partition("::")[0], verdict, message=message)

    @property
    def hypothetical(self) -> bool:
        return self.tier == "hypothetical"

    def to_json(self) -> dict[str, object]:
        doc = dataclasses.asdict(self)
        doc["verdict"] = self.verdict.value
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> CaseResult:
        return record_from(cls, doc, verdict=Verdict(doc["verdict"]))


class HoldsCases:
    """Views of the case records an evaluation holds: what an evaluator returned
    (:class:`harness.executors.outcome.EvalOutcome`) or the cache gave back
    (:class:`harness.bisect.cache.Evaluation`). The records are what they carry; verdicts and
    messages are read from them, never kept beside them."""

    cases: dict[str, CaseResult]

    @property
    def verdicts(self) -> dict[str, Verdict]:
        return {c: r.verdict for c, r in self.cases.items()}

    @property
    def messages(self) -> dict[str, str]:
        return {c: r.message for c, r in self.cases.items()}


@dataclass
class RunResult:
    """One run of the suites against one target."""

    run_id: str
    target: dict[str, Any]
    versions: dict[str, str]
    machine: Machine
    import_mode: str
    standins: list[str] = field(default_factory=list)
    started: str = ""
    duration_s: float = 0.0
    cases: list[CaseResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # MB's commit (or release tag) and the harness's; absent (empty) in files written before it
    provenance: Provenance = field(default_factory=Provenance)
    # the command-line options that decided these verdicts (harness.commands._args.verdict_flags):
    # every printed hint repeats them; empty for runs written before them (the target's path then)
    hint_flags: list[str] = field(default_factory=list)
    partial: bool = False  # interrupted (Ctrl-C, SIGTERM): only what finished is in ``cases``

    def counts(self, suite: str | None = None, *, hypothetical: bool = False) -> dict[str, int]:
        """Cases per verdict value (of one suite, when given) of the documented tier, or of the
        hypothetical tier when asked (those are reported apart and never fail a run)."""
        out = {v.value: 0 for v in Verdict}
        for case in self.cases:
            if (suite is None or case.suite == suite) and case.hypothetical == hypothetical:
                out[case.verdict.value] += 1
        return out

    @property
    def documented(self) -> list[CaseResult]:
        """The cases that decide the run (every case not in the hypothetical tier)."""
        return [c for c in self.cases if not c.hypothetical]

    @property
    def ok(self) -> bool:
        """Nothing to act on: no regression, harness error, fixed known bug or unreviewed change."""
        return self.exit_code() == 0

    def exit_code(self, allow_changed: bool = False) -> int:
        """0 when no case failed, erred or is FIXED (CHANGED too, unless allowed) and some case ran."""
        bad = set(FAILING) | (set() if allow_changed else {Verdict.CHANGED})
        return 1 if self.nothing_ran() or any(c.verdict in bad for c in self.documented) else 0

    def nothing_ran(self) -> str | None:
        """Why no case was checked, when none was: a run of zero checks is no green run."""
        if not self.cases:
            return "; ".join(self.notes) or "no case was selected"
        if all(c.verdict is Verdict.UNTESTABLE for c in self.cases):
            reasons: dict[str, int] = {}
            for c in self.cases:
                reasons[c.message] = reasons.get(c.message, 0) + 1
            common = max(reasons, key=lambda r: reasons[r])
            return f"all {len(self.cases)} selected case(s) are untestable here (most often: {common[:300]})"
        return None

    def to_json(self) -> dict[str, object]:
        doc = dataclasses.asdict(self)
        doc["cases"] = [c.to_json() for c in self.cases]
        doc["machine"] = self.machine.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunResult:
        return record_from(
            cls,
            doc,
            cases=[CaseResult.from_json(c) for c in doc.get("cases", [])],
            machine=Machine.from_json(doc.get("machine")),
            provenance=Provenance.from_json(doc.get("provenance")),
        )

    def save(self, path: Path) -> None:
        write_versioned_json(path, RUN_KIND, RUN_SCHEMA, self.to_json())

    @classmethod
    def load(cls, path: Path) -> RunResult:
        return cls.from_json(read_versioned_json(path, RUN_KIND, RUN_SCHEMA, {1: _upgrade_v1}))


def _upgrade_v1(doc: dict[str, Any]) -> dict[str, object]:
    return {**doc, "machine": upgrade_v1(doc.get("machine") or {})}
