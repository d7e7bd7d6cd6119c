"""What one evaluation of one commit returns: the record an executor carries back to the driver.

Here, beside the executors, because they create, pickle and return it (a thread's result, a cluster
job's result file) while the bisection only reads it: the bisect package imports it from here (and
re-exports it from :mod:`harness.bisect.evaluator`, where unpickling an older job's result looks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.executors.local import JobLog
from harness.records.results import CaseResult, HoldsCases
from harness.records.verdict import Verdict


@dataclass
class EvalOutcome(HoldsCases):
    """One evaluation of one commit, as an evaluator returns it (picklable).

    It carries the suite process's own records (:class:`~harness.records.results.CaseResult`),
    unchanged: the cache stores them and the bisect document shows them, so a verdict keeps one
    form from the suite process to the page. Verdicts and messages are views of them.
    """

    cases: dict[str, CaseResult]
    duration_s: float = 0.0
    note: str = ""  # why there are no verdicts, timeouts...
    # The cluster lost the job (preempted, node failure, time limit, killed) past its retries:
    # a skip for this evaluation that says nothing about MB, so the driver never caches it.
    infrastructure: bool = False
    jobs: list[JobLog] = field(default_factory=list)  # cluster jobs that ran it (ids, log paths)
    core_pin: str = ""  # the Megatron-LM commit of the megatron-core it ran with ("": the installed one)

    @classmethod
    def of(cls, verdicts: Mapping[str, Verdict], messages: Mapping[str, str] | None = None, **kw: Any) -> EvalOutcome:
        """An outcome from verdicts alone (an evaluator that runs no suite process: a scripted
        one, a benchmark's), as the records a suite process would have written."""
        return cls(results_of(verdicts, messages), **kw)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle; a result a harness wrote before the records travelled whole (a cluster job
        started before an upgrade: three dicts, verdicts, messages and details) reads as the bare
        records of its verdicts, not as an AttributeError in the middle of a bisection."""
        if "cases" not in state:
            old = dict(state)
            state = {k: v for k, v in old.items() if k not in ("verdicts", "messages", "details")}
            state["cases"] = results_of(old.get("verdicts") or {}, old.get("messages") or {})
        self.__dict__.update(state)


def results_of(verdicts: Mapping[str, Verdict], messages: Mapping[str, str] | None = None) -> dict[str, CaseResult]:
    """Case records for bare verdicts (their suite read from the case id)."""
    said = messages or {}
    return {c: CaseResult.bare(c, v, said.get(c, "")) for c, v in verdicts.items()}


__all__ = ["EvalOutcome", "results_of"]
