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

Adding a cluster executor (SLURM through submitit) touches neither the algorithm nor the
driver; write a class with the same three members, e.g.::

    class SubmititExecutor:
        def __init__(self, folder, slots, **slurm):
            import submitit
            self.slots = slots
            self._ex = submitit.AutoExecutor(folder=folder)
            self._ex.update_parameters(**slurm)        # partition, time, gpus_per_node...

        def submit(self, fn, arg):
            return self._ex.submit(fn, arg)            # a submitit Job: has done() and result()

        def wait_any(self, handles, timeout=None):
            return poll_until_any_done(handles, timeout, interval_s=10.0)

        def close(self, cancel=False):
            pass

and pass it to :func:`harness.bisect.driver.run_bisection` (``executor=``). The cache
directory (``--cache-dir``) must then be on a file system the compute nodes share,
because workspaces are materialised there by the job; the verdict cache is still written
only by the driver. :func:`poll_until_any_done` is the generic ``wait_any`` for handles
that only offer ``done()``.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Handle(Protocol):
    """A started evaluation (a ``concurrent.futures.Future``, a submitit ``Job``...)."""

    def done(self) -> bool: ...

    def result(self) -> Any: ...


@runtime_checkable
class Executor(Protocol):
    """What the bisect driver needs from wherever evaluations run."""

    slots: int  # evaluations that may run at once (-j)

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Handle:
        """Start ``fn(arg)``; return at once."""
        ...

    def wait_any(self, handles: Iterable[Handle], timeout: float | None = None) -> list[Handle]:
        """Block until at least one of ``handles`` is done (or ``timeout``); return the done ones."""
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

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> cf.Future:
        return self._pool.submit(fn, arg)

    def wait_any(self, handles: Iterable[Handle], timeout: float | None = None) -> list[Handle]:
        futures = list(handles)
        done, _ = cf.wait(futures, timeout=timeout, return_when=cf.FIRST_COMPLETED)  # type: ignore[arg-type]
        return [f for f in futures if f in done]

    def close(self, cancel: bool = False) -> None:
        self._pool.shutdown(wait=not cancel, cancel_futures=cancel)

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(cancel=exc[0] is not None)


def poll_until_any_done(
    handles: Iterable[Handle], timeout: float | None = None, interval_s: float = 5.0
) -> list[Handle]:
    """Generic ``wait_any`` for handles that only offer ``done()`` (cluster jobs)."""
    pending = list(handles)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done = [h for h in pending if h.done()]
        if done or not pending or (deadline is not None and time.monotonic() >= deadline):
            return done
        time.sleep(interval_s)


def map_unordered(executor: Executor, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[T, R]]:
    """Run ``fn`` over ``items`` with at most ``executor.slots`` in flight; yield (item, result)
    as each finishes. A convenience for callers that know all items up front (benchmarks)."""
    queue = list(items)
    running: dict[Any, T] = {}
    while queue or running:
        while queue and len(running) < executor.slots:
            item = queue.pop(0)
            running[executor.submit(fn, item)] = item
        for handle in executor.wait_any(list(running)):
            yield running.pop(handle), handle.result()
