"""A parallel layout executed for real on CPU: one forked process per rank, a gloo world, MCore's groups.

Why processes and not doubles: MB's context-parallel partition, its data-parallel sampler and
its pipeline-stage ``get_batch`` read their rank and size from real process groups
(``torch.distributed.get_rank(group)``), and a CP-aware attention needs a real all-gather. A
double that answers ``size()`` (:class:`harness.suite.adapters.step.SizedGroup`) exercises arithmetic
only; here every rank runs MB's code with its own rank.

Why fork: the suite process has MB imported (seconds) and the tiny model built; a forked rank
starts in ~0.1 s with both. The parent's world-of-one gloo group cannot be torn down in a fork
(its threads are not there: ``destroy_process_group`` segfaults), so a rank *forgets* it (a
fresh ``c10d._World``, the old objects kept referenced, never destroyed) and leaves with
``os._exit`` so no destructor of the inherited groups runs.

:func:`run_world` runs ``fn(rank)`` on every rank of a :class:`Layout` and returns the ranks'
results in rank order. A rank that raises: MB's exception (innermost project frame in MB) is
MB's failure (:class:`~harness.errors.Broken`, impact crash, with the MB frame); ``Untestable``
stays untestable; a contract the rank checks itself (:class:`~harness.records.impact.ImpactFailure`)
is that failure, with its impact; anything else is a harness error. A rank that dies by a signal
or does not finish within ``timeout`` (a hang: a collective one rank never joins) is MB's
failure too.
A gloo connection that fails while MCore creates the groups, before anything of MB runs, starts
the world again (:data:`INIT_ATTEMPTS`).

What a fork cannot inherit: thread pools. A rank runs torch on one thread, and Hugging Face's
fast tokenizers without their Rust thread pool (``TOKENIZERS_PARALLELISM=false``): once the suite
process has tokenized in parallel (a VLM processor's collate does), a forked rank that tokenizes
waits forever on pool threads the fork did not copy. Both change speed only, never a token.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

import torch

from harness.errors import Broken, Untestable
from harness.records.impact import Impact, ImpactFailure
from harness.suite.standins.cuda import cpu_cuda_calls

T = TypeVar("T")
_KEPT: list[object] = []  # the parent's groups, in a rank: referenced until os._exit, never destroyed
DEFAULT_TIMEOUT = 120.0
# Gloo's TCP full mesh on localhost now and then fails to connect while MCore creates its groups
# (seen ~1 in 5 runs of a PP 3 world with megatron-core 0.16.1, which builds a gloo copy of every
# group): nothing of MB has run yet, so the world is started again, at most this many times in all.
INIT_ATTEMPTS = 3
_TRANSIENT_INIT = ("connectFullMesh failed", "Connection closed by peer", "Connection reset by peer")


class _InitFlake(Exception):
    """A rank's gloo connection failed while the world was being set up (before ``fn`` ran)."""


@dataclass(frozen=True)
class Layout:
    """Sizes of the parallel dimensions (MCore's order: TP innermost, then CP, DP, PP)."""

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def __str__(self) -> str:
        return f"TP{self.tp} CP{self.cp} PP{self.pp} DP{self.dp}"


def _forget_inherited_world() -> object:
    """Drop the parent's process groups from this (forked) process without touching them."""
    import torch.distributed.distributed_c10d as c10d
    from megatron.core import parallel_state

    kept = (c10d._world, dict(vars(parallel_state)))  # referenced, so never destroyed in the fork
    c10d._world = c10d._World()
    parallel_state.destroy_model_parallel()
    return kept


def _init_rank(layout: Layout, rank: int, store: str, seed: int) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=layout.world)
    sizes: dict[str, object] = {
        "tensor_model_parallel_size": layout.tp,
        "pipeline_model_parallel_size": layout.pp,
        "context_parallel_size": layout.cp,
    }
    if "create_gloo_process_groups" in inspect.signature(parallel_state.initialize_model_parallel).parameters:
        sizes["create_gloo_process_groups"] = False  # the world is gloo already: no second copy of each group
    with cpu_cuda_calls(pin=True):
        parallel_state.initialize_model_parallel(**sizes)
        try:
            mp_random.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True)
        except TypeError:
            mp_random.model_parallel_cuda_manual_seed(seed)


def _rank_main(layout: Layout, rank: int, store: str, seed: int, fn: Callable[[int], object], conn: Connection) -> None:
    from harness.suite.knobs import spy
    from harness.suite.ownership import Owner, blame, mb_frame

    reply: tuple[object, ...]
    since = spy.seen()  # what the rank calls MB with is the run's too (harness coverage)
    try:
        _KEPT.append(_forget_inherited_world())
        torch.set_num_threads(1)
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # read at every call: no pool threads in a fork
        try:
            _init_rank(layout, rank, store, seed)
        except RuntimeError as exc:
            if not any(text in str(exc) for text in _TRANSIENT_INIT):
                raise
            reply = ("init-flake", str(exc))
        else:
            reply = ("ok", fn(rank))
    except Untestable as exc:
        reply = ("untestable", str(exc))
    except ImpactFailure as exc:  # a contract a rank checks itself: a failure with its impact, not an error
        reply = ("fail", str(exc), exc.impact.value)
    except BaseException as exc:
        tb = exc.__traceback__
        owner = "megatron" if blame(tb) is Owner.MEGATRON else "harness"
        reply = ("error", owner, type(exc).__name__, str(exc), mb_frame(tb), traceback.format_exc())
    try:
        # before the reply: the parent goes on (and may end the session) once it has it; recording
        # must never change what the rank reports
        with contextlib.suppress(Exception):
            spy.write_new(since)
        conn.send_bytes(pickle.dumps(reply))  # plain pickle: tensors by value, not shared memory the exit frees
        conn.close()
    finally:
        os._exit(0)


def _raise_for(layout: Layout, rank: int, reply: tuple[Any, ...]) -> None:
    kind = reply[0]
    if kind == "untestable":
        raise Untestable(reply[1])
    if kind == "init-flake":
        raise _InitFlake(f"rank {rank} of {layout}: {reply[1]}")
    if kind == "fail":
        raise ImpactFailure(f"rank {rank} of {layout}: {reply[1]}", Impact(reply[2]))
    _, owner, name, message, where, text = reply
    if owner == "megatron":
        at = f" [at {where}]" if where else ""
        raise Broken(f"rank {rank} of {layout}: Megatron raised {name}: {message}{at}")
    raise RuntimeError(f"rank {rank} of {layout}: {name}: {message}\n{text}")


def _collect(
    layout: Layout, procs: Sequence[tuple[BaseProcess, Connection]], deadline: float
) -> dict[int, tuple[Any, ...]]:
    """The ranks' replies until all answered, one raised (the others may wait on it forever), or the deadline."""
    from multiprocessing.connection import wait

    replies: dict[int, tuple[object, ...]] = {}
    open_ = {conn: rank for rank, (_, conn) in enumerate(procs)}
    try:
        while open_ and time.monotonic() < deadline:
            for conn in wait(list(open_), timeout=max(0.0, deadline - time.monotonic())):
                rank = open_.pop(conn)  # type: ignore[call-overload]
                try:
                    replies[rank] = pickle.loads(conn.recv_bytes())  # type: ignore[union-attr]
                except EOFError:  # died without a word: the others may wait on it forever
                    proc = procs[rank][0]
                    proc.join(5)
                    code = proc.exitcode
                    what = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited ({code})"
                    raise Broken(f"rank {rank} of {layout} {what} without a result (a crash in MB)") from None
                if replies[rank][0] != "ok":
                    _raise_for(layout, rank, replies[rank])
    finally:
        for proc, conn in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
            conn.close()
    return replies


def run_world(layout: Layout, fn: Callable[[int], T], *, seed: int = 1234, timeout: float = DEFAULT_TIMEOUT) -> list[T]:
    """``fn(rank)`` on every rank of ``layout`` (forked gloo processes); the results in rank order.

    A gloo connection that fails while the groups are created (:data:`INIT_ATTEMPTS`) starts the
    world again; past the last attempt it is the harness's error (an environment problem, never MB's)."""
    for attempt in range(1, INIT_ATTEMPTS + 1):
        try:
            return _run_world_once(layout, fn, seed, timeout)
        except _InitFlake as exc:
            if attempt == INIT_ATTEMPTS:
                raise RuntimeError(f"gloo could not connect the ranks in {INIT_ATTEMPTS} attempts: {exc}") from None
    raise AssertionError("unreachable")


def rank_groups() -> Any:
    """This rank's process groups as MB's steps read them (MCore's ``ProcessGroupCollection`` of the
    world :func:`run_world` set up)."""
    from harness.suite.adapters import symbol

    return symbol("megatron.core.process_groups_config", "ProcessGroupCollection").use_mpu_process_groups()


def _run_world_once(layout: Layout, fn: Callable[[int], T], seed: int, timeout: float) -> list[T]:
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    store = os.path.join(tempfile.mkdtemp(prefix="harness-world-"), "store")
    procs = []
    for rank in range(layout.world):
        here, there = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_rank_main, args=(layout, rank, store, seed, fn, there), daemon=True)
        with warnings.catch_warnings():  # a rank forgets the parent's threads' state (module docstring)
            warnings.filterwarnings(
                "ignore", message=".*use of fork\\(\\) may lead to deadlocks", category=DeprecationWarning
            )
            proc.start()
        there.close()
        procs.append((proc, here))
    replies = _collect(layout, procs, time.monotonic() + timeout)
    for rank in range(layout.world):
        if rank not in replies:
            raise Broken(f"rank {rank} of {layout} did not finish within {timeout:.0f} s (a hang in MB)")
    return [replies[rank][1] for rank in range(layout.world)]
