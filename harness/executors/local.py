"""Where evaluations run: a small executor protocol and the local implementation.

The bisect driver only needs three things from an executor: how many evaluations may run
at once (``slots``), a way to start one (``submit(fn, arg)`` returning a handle with
``done()`` and ``result()``), and a way to wait until at least one started evaluation
finished (``wait_any(handles)``). It never assumes the evaluation runs in this process:
the function and its argument are plain picklable values (the driver passes a
:class:`~harness.bisect.evaluator.MBEvaluator`, a dataclass of paths and options, and a commit
sha), and the result is a plain dataclass. Recording verdicts (SQLite cache, the bisection
state machine) always happens in the driver, on the calling thread, as soon as
``wait_any`` reports a handle done, so an executor never touches the cache.

Local (:class:`LocalExecutor`): a thread pool. Threads are enough because each evaluation
is a ``git archive`` plus a pytest subprocess; the GIL is released while waiting on them.

Cluster (:class:`harness.executors.slurm.SlurmExecutor`): SLURM jobs through submitit,
one job per evaluation. Two more members serve it: ``cancel(handle)`` (the driver drops an
in-flight evaluation that a newer result made moot; the thread pool can only drop one not
started yet) and the optional ``bind(evaluator)`` (called once before the bisection starts,
so a remote executor can check that its jobs see the cache directory and learn the cache
namespace where the evaluations really run). The cache directory (``--cache-dir``) must
then be on a file system the compute nodes share; the verdict cache is still written only
by the driver. :func:`schedule` is the one loop that keeps an executor's slots busy (the bisect
driver, the SLURM shards of a run and the matrix's refs all go through it).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@dataclass(frozen=True)
class JobLog:
    """Where one cluster job of an evaluation wrote its output (carried in the outcome, so
    reports link the logs of every attempt, a retried one included)."""

    job_id: str
    cluster: str  # "slurm", or "local" for submitit's local processes
    stdout: str
    stderr: str
    attempt: int  # 1 = first submission, 2 = first retry...
    state: str  # how the job ended: COMPLETED, NODE_FAIL, PREEMPTED, TIMEOUT...


@runtime_checkable
class Handle(Protocol):
    """A started evaluation (a ``concurrent.futures.Future``, a submitit ``Job``...)."""

    def done(self) -> bool: ...

    def result(self) -> Any: ...


@runtime_checkable
class Executor(Protocol):
    """What the bisect driver needs from wherever evaluations run."""

    slots: int  # evaluations that may run at once (-j)

    def submit(self, fn: Callable[[Any], Any], arg: object) -> Handle:
        """Start ``fn(arg)``; return at once."""
        ...

    def wait_any(self, handles: Iterable[Handle], timeout: float | None = None) -> Sequence[Handle]:
        """Block until at least one of ``handles`` is done (or ``timeout``); return the done ones."""
        ...

    def cancel(self, handle: Handle) -> bool:
        """Drop an evaluation nobody needs any more; True when it will never deliver a result
        (the driver then forgets it), False when it goes on (its result is still recorded)."""
        ...

    def close(self, cancel: bool = False) -> None:
        """Release resources; ``cancel`` drops evaluations not started yet."""
        ...


class LocalExecutor:
    """Evaluations on this machine, ``slots`` at a time, in a thread pool."""

    def __init__(self, slots: int = 1) -> None:
        if slots < 1:
            raise ValueError("an executor needs at least one slot")
        self.slots = slots
        self._pool = cf.ThreadPoolExecutor(max_workers=slots, thread_name_prefix="harness-eval")

    def submit(self, fn: Callable[[Any], Any], arg: object) -> cf.Future:
        return self._pool.submit(fn, arg)

    def wait_any(self, handles: Iterable[Handle], timeout: float | None = None) -> list[Handle]:
        futures = list(handles)
        done, _ = cf.wait(futures, timeout=timeout, return_when=cf.FIRST_COMPLETED)  # type: ignore[arg-type]
        return [f for f in futures if f in done]

    def cancel(self, handle: Handle) -> bool:
        """A thread cannot be stopped: only an evaluation still waiting for a slot is dropped."""
        return isinstance(handle, cf.Future) and handle.cancel()

    def close(self, cancel: bool = False) -> None:
        self._pool.shutdown(wait=not cancel, cancel_futures=cancel)

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(cancel=exc[0] is not None)


def schedule(
    executor: Executor,
    submit: Callable[[T], Handle],
    refill: Callable[[int], list[T]],
    on_done: Callable[[T, Handle], None],
    running: dict[Handle, T] | None = None,
    after: Callable[[], None] | None = None,
) -> None:
    """The one scheduling loop: keep ``executor.slots`` items in flight.

    Whenever a slot is free, ``refill(free)`` gives up to ``free`` items to start (``submit``
    starts one); ``on_done(item, handle)`` runs on this thread for each finished one, as soon
    as ``wait_any`` reports it, and ``after()`` after each such batch (the bisect driver cancels
    evaluations a newer result made moot there, removing them from ``running``, which the caller
    may own for that). Returns when nothing runs and ``refill`` gives nothing.
    """
    running = {} if running is None else running
    while True:
        free = executor.slots - len(running)
        if free > 0:
            for item in refill(free)[:free]:
                running[submit(item)] = item
        if not running:
            return
        for handle in executor.wait_any(list(running)):
            on_done(running.pop(handle), handle)
        if after is not None:
            after()
