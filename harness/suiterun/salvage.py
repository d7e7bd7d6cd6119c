"""Reading a suite process's verdicts back, whatever way it ended.

Normally the child's CasesFile is the result. When it leaves none, its live event log
(:mod:`harness.caselog`) says how far it got. Killed at the time limit: the case(s) it
was running FAIL with ``broken: timeout`` (a hang is the commit's failure, bisectable; the kill
at ``--timeout`` keeps a hung commit from hanging a bisection). Died of a fatal signal inside
MB's code (faulthandler's stack, :mod:`harness.suiterun.fatal`): that case FAILs with impact
``crash``. Died otherwise: the running case is an ERROR. Finished cases keep their verdicts,
cases never started are UNTESTABLE ("not run"). Nothing collected at all: one ERROR per suite
file. A session that did not collect what it was given (pytest exit 2-4) makes each suite
file with no case an ERROR with the collection message: nothing drops out of a run silently.
"""

from __future__ import annotations

from pathlib import Path

from harness import paths
from harness.caselog import CaseLog, read_log
from harness.contract import CasesFile
from harness.errors import CorruptFile
from harness.records.results import CaseResult
from harness.records.verdict import Verdict, worst
from harness.suiterun.fatal import mb_crash
from harness.suiterun.launch import ChildExit
from harness.suiterun.plan import Group
from harness.target import Target

# pytest's exit codes for a session that did not run what it was given: interrupted (a collection
# error stops the whole session), internal error, usage error. Each suite file of the group that
# produced no case then stands as an ERROR, so the run exits 1 instead of reporting the rest.
NOT_COLLECTED = (2, 3, 4)


def collect(
    cases_file: Path,
    events_file: Path,
    files: list[Path],
    outcome: ChildExit,
    group: str | None,
    empty_ok: bool = False,
    tgt: Target | None = None,
) -> tuple[list[CaseResult], list[str]]:
    """The cases of one suite process (its CasesFile, else salvaged from its event log) and notes."""
    notes: list[str] = []
    if not outcome.timed_out:
        try:
            doc: CasesFile | None = CasesFile.load(cases_file)
        except (FileNotFoundError, CorruptFile):
            doc = None
        if doc is not None:
            cases = list(doc.cases)
            rc = outcome.rc
            if rc not in (0, 1) and not (rc == 5 and not cases):  # 5: nothing selected (e.g. by -k in one group)
                reason = f"pytest exited with code {rc}: {last_lines(outcome.tail)}"
                notes.append(reason)
                if rc in NOT_COLLECTED:  # nothing of these files may silently drop out of the run
                    ran = {c.suite for c in cases}
                    why = {Path(e["nodeid"]).name: e["message"] for e in doc.collection_errors}
                    cases += [
                        whole_suite(
                            f,
                            Verdict.ERROR,
                            f"not collected: {why[f.name]}" if f.name in why else f"not collected: {reason}",
                            group,
                        )
                        for f in files
                        if f.stem[5:] not in ran
                    ]
            if not cases and not empty_ok:
                notes.append("no case was selected")
            return cases, notes
    return salvage(read_log(events_file), files, outcome, group, tgt)


def _finished(log: CaseLog, case_id: str) -> CaseResult:
    """A finished case of the log (a setup error and a teardown error for one case: the worst)."""
    records = [CaseResult.from_json(c) for c in log.done[case_id]]
    verdict = worst([r.verdict for r in records])
    return next(r for r in records if r.verdict is verdict)


def salvage(
    log: CaseLog, files: list[Path], outcome: ChildExit, group: str | None, tgt: Target | None = None
) -> tuple[list[CaseResult], list[str]]:
    """Verdicts of a suite process that left no verdict file, from its event log; a fatal signal
    inside MB's code (harness.suiterun.fatal) makes the case that was running a FAIL, bisectable."""
    crash = None
    if not outcome.timed_out:
        roots = tuple(str(r) for r in (tgt or Target()).megatron_roots())
        crash = mb_crash(outcome.tail, roots, (str(paths.PACKAGE), str(paths.suites_dir())))
    if outcome.timed_out:
        stopped = f"the suite process ran past {outcome.timeout_s:.0f} s and was killed"
    else:
        stopped = (
            f"the suite process exited with code {outcome.rc} before reporting verdicts: {last_lines(outcome.tail)}"
        )
    if not log.collected:
        reason = f"{stopped} (before any case was collected)"
        return [whole_suite(f, Verdict.ERROR, reason, group) for f in files], [reason]
    running = log.in_flight
    where = f" while {', '.join(running)} ran" if running else ""
    cases: list[CaseResult] = []
    for case_id, suite in log.collected.items():
        if case_id in log.done:
            cases.append(_finished(log, case_id))
        elif case_id in running and outcome.timed_out:
            cases.append(
                CaseResult(
                    case_id, suite, Verdict.FAIL, message=f"broken: timeout: this case was running when {stopped}"
                )
            )
        elif case_id in running and crash is not None:
            cases.append(CaseResult(case_id, suite, Verdict.FAIL, message=crash.message(), impacts=["crash"]))
        elif case_id in running:
            cases.append(CaseResult(case_id, suite, Verdict.ERROR, message=f"this case was running when {stopped}"))
        else:
            cases.append(CaseResult(case_id, suite, Verdict.UNTESTABLE, message=f"not run: {stopped}{where}"))
    return cases, [f"{stopped}{where}"]


def interrupted_cases(in_flight: tuple[Group, Path] | None, not_started: list[Group]) -> list[CaseResult]:
    """What an interrupted run knows: the finished cases of the suite process it stopped (from its
    event log, ``in_flight`` = (group, event log)), and everything else as not run (untestable:
    nothing was said about MB)."""
    reason = "not run: the run was interrupted"
    out: list[CaseResult] = []
    if in_flight is not None:
        group, events = in_flight
        log = read_log(events)
        for case_id, suite in log.collected.items():
            if case_id in log.done:
                out.append(_finished(log, case_id))
            else:
                out.append(CaseResult(case_id, suite, Verdict.UNTESTABLE, message=reason))
        seen = {c.suite for c in out}
        out += [whole_suite(f, Verdict.UNTESTABLE, reason, group.name) for f in group.files if f.stem[5:] not in seen]
    for group in not_started:
        out += [whole_suite(f, Verdict.UNTESTABLE, reason, group.name) for f in group.files]
    return out


def last_lines(text: str, n: int = 6) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-1500:]


def whole_suite(file: Path, verdict: Verdict, reason: str, group: str | None) -> CaseResult:
    """One verdict for a suite whose cases are unknown; the import group keeps the light and
    full placeholders of one suite file apart."""
    suite = file.stem[5:]
    return CaseResult(
        case_id=f"{suite}::*" + (f"[{group} import]" if group else ""), suite=suite, verdict=verdict, message=reason
    )
