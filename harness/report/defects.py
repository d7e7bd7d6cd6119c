"""One row per defect: the failing cases of a run grouped by the MB defect behind them.

A maintainer opening a red night wants the few MB defects, not fifty cases: one regression in
MB's padding shows in every suite that packs prompts. Cases are grouped by what went wrong, the
same impact and kind of violation made by the same MB code:

* a known MB bug (KNOWN_FAIL): by the reviewed entries that explain it;
* MB raising or refusing (a FAIL without oracle violations): by the MB function of the frame the
  verdict names (``[at megatron/bridge/x.py:42 in fn]``, ``[by its check at ...]``) and the impact;
  without a frame, by the message with its numbers taken out;
* an invariant broken (a FAIL with oracle violations): by the *root* invariants, those no known bug
  listing the case explains, without the step-level consequences (logits, per-token loss, loss
  totals) when a data-level invariant broke too; a padding position that trains changes the loss
  totals, it is not a second defect;
* a harness or environment error: by its message with numbers and paths taken out.

The id (``D-`` and 8 hex digits) is a hash of that key, so the same defect keeps its id from one
night to the next and a new one is told by an id the base run does not have. After the nightly's
bisection, the culprit refines the grouping (:mod:`harness.nightly.refine`: a defect's other cases
checked at its lead's culprit, those that do not flip there split off). What is not done: naming
the MB function that produced a violating field (an invariant defect names its invariants, not a
line of MB).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.records.known import KnownFailure
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict

#: Invariants of the step, downstream of the batch: a consequence when a batch invariant broke too.
CONSEQUENCES = frozenset({"logits-equal-unpacked", "token-loss-equals-unpacked", "loss-totals-equal-unpacked"})
GROUPED = (Verdict.FAIL, Verdict.ERROR, Verdict.KNOWN_FAIL)
_FRAME = re.compile(r"\[(?:at|by its check at) (?P<file>[^\]:]+):(?P<line>\d+) in (?P<fn>[^\]]+)\]")
_NUMBER = re.compile(r"\d+")
_PATH = re.compile(r"(/[\w.+-]+)+/")


@dataclass
class Defect:
    """One defect of a run and the cases that show it."""

    id: str
    kind: str  # "fail", "known" or "error"
    impacts: list[str]
    what: str  # the violation kind: root invariants, an MB function, a known bug, an error class
    where: str  # MB's file:line (a raise, a known bug's code) or "" when not located
    cases: list[str] = field(default_factory=list)
    suites: list[str] = field(default_factory=list)
    smallest: str = ""  # the quickest case: the one to reproduce and to bisect with
    new: bool | None = None  # not in the base run (None: no base given)

    def line(self) -> str:
        """``DEFECT <impact> <where> <n> cases [new]``, as the terminal's last block prints it."""
        label = {"fail": "DEFECT", "known": "KNOWN ", "error": "ERROR "}[self.kind]
        impact = ",".join(self.impacts) or ("environment/harness" if self.kind == "error" else "unclassified")
        where = self.where or self.what
        suites = f", {len(self.suites)} suites" if len(self.suites) > 1 else ""
        tail = " [new]" if self.new else ""
        return f"{label} {self.id} {impact} {where} {len(self.cases)} case(s){suites}{tail}"


def defects(result: RunResult, base: RunResult | None = None, known_path: Path | None = None) -> list[Defect]:
    """The defects of ``result``'s documented tier, fails first, then errors, then known bugs, each
    by cases (most first); ``new`` against ``base`` when given."""
    entries = _entries(known_path)
    found: dict[str, Defect] = {}
    times: dict[str, float] = {}
    for case in result.documented:
        if case.verdict not in GROUPED:
            continue
        key, kind, what, where = _key(case, entries)
        did = "D-" + hashlib.sha256(json.dumps(key).encode()).hexdigest()[:8]
        d = found.setdefault(did, Defect(did, kind, [], what, where))
        d.cases.append(case.case_id)
        d.impacts = sorted(set(d.impacts) | set(case.impacts))
        if case.suite not in d.suites:
            d.suites.append(case.suite)
        if not d.smallest or case.duration_s < times[did]:
            d.smallest, times[did] = case.case_id, case.duration_s
    if base is not None:
        before = {d.id for d in defects(base, None, known_path)}
        for d in found.values():
            d.new = d.id not in before
    order = {"fail": 0, "error": 1, "known": 2}
    return sorted(found.values(), key=lambda d: (order[d.kind], -len(d.cases), d.id))


def matching(means: Sequence[str], found: Iterable[Defect]) -> list[str]:
    """The open defects a golden change's training consequence (:mod:`harness.golden.training`)
    goes the way of: more trained tokens with a defect that trains padding or masked tokens,
    fewer with one that drops trained tokens. A change that matches one is that defect showing
    where no invariant could see it, not a change to accept."""
    more = any("more token" in m for m in means)
    fewer = any("fewer token" in m for m in means)
    wanted = ({"trains-padding", "trains-masked-token"} if more else set()) | (
        {"drops-trained-token"} if fewer else set()
    )
    return [d.id for d in found if d.kind == "fail" and wanted & set(d.impacts)]


def of_case(found: Iterable[Defect]) -> dict[str, str]:
    """case id -> defect id."""
    return {c: d.id for d in found for c in d.cases}


def _key(case: CaseResult, entries: dict[str, KnownFailure]) -> tuple[list[str], str, str, str]:
    if case.verdict is Verdict.KNOWN_FAIL:
        ids = sorted(case.known) or ["?"]
        upstream = [entries[i].upstream for i in ids if i in entries]
        where = next((u.split(" (")[0].split(" and ")[0] for u in upstream if u), "")[:100]
        # one defect per piece of MB code: the entries of one bug's consequences (its loss totals,
        # its logits) share the code their upstream names first
        return ["known", where or ",".join(ids)], "known", ", ".join(ids), where
    first = case.message.splitlines()[0] if case.message else ""
    if case.verdict is Verdict.ERROR:
        cls = first.split(":")[0] if ":" in first else "error"
        return ["error", _normal(first)], "error", cls, ""
    if case.violations:
        roots = _roots(case, entries)
        impacts = sorted({str(v.get("impact")) for v in case.violations if v.get("invariant") in roots})
        return ["fail", *sorted(roots), *impacts], "fail", "+".join(sorted(roots)), ""
    frame = _FRAME.search(case.message)
    if frame:
        fn = f"{frame['file']} {frame['fn']}"
        return ["fail", fn, *case.impacts], "fail", fn, f"{frame['file']}:{frame['line']}"
    return ["fail", _normal(first), *case.impacts], "fail", first[:80], ""


def _roots(case: CaseResult, entries: dict[str, KnownFailure]) -> set[str]:
    """The invariants of the case's violations that no known bug listing the case explains, less
    the step-level consequences of a broken batch invariant."""
    listing = [e for e in entries.values() if e.lists(case.case_id)]
    unexplained = [v for v in case.violations if not any(e.covers(v) for e in listing)]
    kinds = {str(v.get("invariant")) for v in (unexplained or case.violations)}
    data = kinds - CONSEQUENCES
    return data or kinds


def _normal(text: str) -> str:
    """A message with the parts that vary per case taken out (numbers, paths, quoted values)."""
    text = _PATH.sub("/", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    return " ".join(_NUMBER.sub("N", text).split())[:200]


def _entries(path: Path | None) -> dict[str, KnownFailure]:
    from harness import paths
    from harness.errors import CorruptFile
    from harness.records import known

    try:
        return {e.id: e for e in known.load(path or paths.fixtures_dir() / known.FILENAME)}
    except CorruptFile:
        return {}


def summary_lines(found: Sequence[Defect], result: RunResult, reproduce: Callable[[RunResult, str], str]) -> list[str]:
    """The run's last block: one line per defect (reproduce command of the smallest case under it),
    then one line each for changed, fixed and untestable cases."""
    out: list[str] = []
    fails = [d for d in found if d.kind != "known"]
    knowns = [d for d in found if d.kind == "known"]
    cases = sum(len(d.cases) for d in fails)
    out.append(f"defects: {len(fails)} ({cases} case(s)); known MB bugs: {len(knowns)}")
    for d in found:
        out.append(d.line())
        if d.kind != "known":
            out.append(f"    smallest: {d.smallest}")
            out.append(f"    reproduce: {reproduce(result, d.smallest)}")
    doc = result.documented
    for verdict, words in (
        (Verdict.CHANGED, "changed (every invariant holds; review the golden diff)"),
        (Verdict.FIXED, "fixed (a known bug no longer seen)"),
        (Verdict.UNTESTABLE, "untestable here"),
    ):
        n = sum(c.verdict is verdict for c in doc)
        if n and verdict is Verdict.CHANGED:
            from harness.golden.training import from_mismatches

            trains = sum(bool(from_mismatches(c.diff_data)) for c in doc if c.verdict is verdict)
            words += f", {trains} of them change what trains (not offered for accept)" if trains else ""
        if n:
            out.append(f"{words}: {n} case(s)")
    return out
