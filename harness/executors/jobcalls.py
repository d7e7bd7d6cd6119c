"""What runs inside a cluster job: small picklable callables submitit unpickles on the node.

Kept apart from the executor so a job imports only this module (and the evaluator it
carries), never the driver-side machinery.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict


@dataclass(frozen=True)
class JobFault:
    """Returned (not raised) by a job that was cut short by the cluster, so the driver can tell
    it from a bug: submitit raises its UncompletedJobError from the time-limit signal handler."""

    reason: str


@dataclass(frozen=True)
class JobCall:
    """``fn(arg)`` in the job: the same evaluation entry point as a local evaluation."""

    fn: Callable[[Any], Any]  # runs in the job: its argument and result cross by pickle
    arg: object

    def __call__(self) -> object:
        from submitit.core.utils import UncompletedJobError

        try:
            return self.fn(self.arg)
        except UncompletedJobError as exc:  # the job reached its time limit (--slurm-time)
            return JobFault(f"time limit reached ({' '.join(str(exc).split())})")


class ProbeAnswer(TypedDict):
    """What the start-up job saw where the jobs run."""

    unseen: list[str]  # token files it could not read
    host: str
    namespace: list[str] | None  # the evaluator's cache namespace there (None: not measured)


@dataclass(frozen=True)
class SharedProbe:
    """The start-up job: can it read the tokens the driver wrote into the cache directory (and
    the output directories), and what is the evaluator's cache namespace where the jobs run (a
    container's torch and megatron-core, not the login node's)?"""

    token_files: tuple[str, ...]
    token: str
    evaluator: object = None

    def __call__(self, _: object = None) -> ProbeAnswer:
        unseen = [f for f in self.token_files if not _holds(f, self.token)]
        namespace = None
        if not unseen and hasattr(self.evaluator, "cache_namespace"):
            namespace = list(self.evaluator.cache_namespace())
        return {"unseen": unseen, "host": socket.gethostname(), "namespace": namespace}


def _holds(path: str, token: str) -> bool:
    try:
        return Path(path).read_text(encoding="utf-8") == token
    except OSError:
        return False


@dataclass(frozen=True)
class RemoteEvaluator:
    """An evaluator bound to where its jobs run: the cache namespace the start-up job measured
    there (verdicts are cached under the environment that produced them). Everything else is
    the wrapped evaluator's (``prepare``, ``details``...)."""

    inner: Any
    namespace: tuple[str, str]

    def __call__(self, arg: object) -> object:
        return self.inner(arg)

    def cache_namespace(self) -> tuple[str, str]:
        return self.namespace

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") or name in ("inner", "namespace"):  # unpickling looks these up first
            raise AttributeError(name)
        return getattr(self.inner, name)
