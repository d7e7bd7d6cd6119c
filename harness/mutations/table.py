"""What ``harness mutate`` writes and prints: one :class:`Row` per catalogue entry, the
:class:`Summary` (``summary.json``), and the terminal table with the scores under it.

Why apart from the command: the records are the mutation score's on-disk form (read by the
benchmarks and the closing notes), and the table is their one rendering.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from harness.mutations import scoring
from harness.records.atomicio import write_versioned_json


@dataclass
class Row:
    """One catalogue entry's result (a row of the table and of summary.json)."""

    id: str
    layer: str
    kind: str
    catchable: bool
    description: str
    status: str
    reason: str = ""
    suites: list[str] = field(default_factory=list)
    invariant_cases: dict[str, list[str]] = field(default_factory=dict)
    golden_cases: dict[str, list[str]] = field(default_factory=dict)
    error_cases: list[str] = field(default_factory=list)
    fixed_cases: dict[str, list[str]] = field(default_factory=dict)
    cases: int = 0
    untestable: int = 0
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class Summary:
    """``summary.json`` (kind ``harness-mutate``): the scores, the baseline runs and every row."""

    score: float
    caught: int
    golden_only: int
    scored: int
    fixes_clean: int
    fixes: int
    baselines: list[dict[str, object]]
    faults: list[Row]

    def save(self, path: Path) -> None:
        write_versioned_json(path, scoring.SUMMARY_KIND, scoring.SUMMARY_SCHEMA, asdict(self))


def _shown(cases: dict[str, list[str]] | list[str], n: int = 2) -> str:
    names = list(cases)
    text = ", ".join(c.split("::", 1)[-1] for c in names[:n])
    return text + (f" (+{len(names) - n} more)" if len(names) > n else "")


def print_table(rows: list[Row], out: TextIO) -> None:
    width = max([len(r.id) for r in rows] + [5])
    print(f"{'entry':<{width}}  {'layer':<11} {'status':<17} cases", file=out)
    print("-" * (width + 60), file=out)
    for r in rows:
        cases = r.invariant_cases or r.golden_cases or r.error_cases
        status = r.status + ("" if r.catchable else " (n/c)")
        first = next(iter(r.invariant_cases.values()), [""])[0] if r.invariant_cases else ""
        print(
            f"{r.id:<{width}}  {r.layer:<11} {status:<17} {_shown(cases) or '-'}" + (f"  [{first}]" if first else ""),
            file=out,
        )
    s = scoring.overall([asdict(r) for r in rows])
    faults = [r for r in rows if r.kind == "fault" and r.status != scoring.Status.NOT_APPLICABLE.value]
    na = sum(r.status == scoring.Status.NOT_APPLICABLE.value for r in rows)
    print(f"\ninvariant-only score: {s.caught}/{s.scored} = {s.value:.1%}  ({na} not applicable)", file=out)
    golden = [r.id for r in faults if r.catchable and r.status == scoring.Status.GOLDEN_ONLY.value]
    print(
        f"golden-only catches: {len(golden)}"
        + (f" ({', '.join(golden)})" if golden else "")
        + f"; with goldens: {s.with_goldens:.1%}",
        file=out,
    )
    escaped = [
        r.id
        for r in faults
        if r.catchable and r.status in (scoring.Status.ESCAPED.value, scoring.Status.ERROR_ONLY.value)
    ]
    if escaped:
        print("escaped: " + ", ".join(escaped), file=out)
    for r in faults:
        if not r.catchable:
            print(f"not catchable here (n/c, not scored): {r.id}: {r.status}; {r.reason}", file=out)
    for r in rows:
        if r.kind == "fix" and r.status != scoring.Status.NOT_APPLICABLE.value:
            verdict = "OK" if r.status == scoring.Status.CLEAN.value else "ORACLE OR FIX WRONG"
            print(
                f"fix {r.id}: {r.status} [{verdict}]; removes baseline failures in {len(r.fixed_cases)} case(s)"
                + (f"; new invariant-level differences in {_shown(r.invariant_cases, 4)}" if r.invariant_cases else ""),
                file=out,
            )
