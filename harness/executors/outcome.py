"""What one evaluation of one commit returns: the record an executor carries back to the driver.

Here, beside the executors, because they create, pickle and return it (a thread's result, a cluster
job's result file) while the bisection only reads it: the bisect package imports it from here (and
re-exports it from :mod:`harness.bisect.evaluator`, where unpickling an older job's result looks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.executors.local import JobLog
from harness.records.verdict import Verdict


@dataclass
class EvalOutcome:
    """One evaluation of one commit, as an evaluator returns it (picklable)."""

    verdicts: dict[str, Verdict]
    messages: dict[str, str] = field(default_factory=dict)
    details: dict[str, dict[str, str]] = field(default_factory=dict)  # case -> {"diff", "source"}
    duration_s: float = 0.0
    note: str = ""  # why there are no verdicts, timeouts...
    # The cluster lost the job (preempted, node failure, time limit, killed) past its retries:
    # a skip for this evaluation that says nothing about MB, so the driver never caches it.
    infrastructure: bool = False
    jobs: list[JobLog] = field(default_factory=list)  # cluster jobs that ran it (ids, log paths)
    core_pin: str = ""  # the Megatron-LM commit of the megatron-core it ran with ("": the installed one)


__all__ = ["EvalOutcome"]
