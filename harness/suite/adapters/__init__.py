"""Era adapters: stable operations resolved against whatever MB a run faces.

Suites never import MB paths. They ask for an operation ("pack these right-padded rows in
batch", "build PackedSeqParams from this batch"...). Each operation lists candidate
implementations, newest era first; a candidate *probes* (module exists, symbol exists,
signature accepts a parameter, config field exists) and, when it fits, adapts MB's output to
one canonical form. When no candidate fits, the case is :class:`Untestable` with the list of
what was tried, so a missing or renamed API is a bisect "skip", never a pass or a fail.

A break is not an era gap: an MB module that exists and cannot be imported because of the
commit's own code, or an operation whose output no longer holds what it produces
(:class:`MissingOutput`), is :class:`~harness.suite.plugin.Broken`: a failure, bisectable. See
:mod:`harness.suite.adapters.failures` for where the line between broken and untestable lies.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from harness import features
from harness.errors import Broken, MissingOutput, NotHere, Untestable
from harness.suite.adapters.failures import import_failure

__all__ = [
    "Candidate",
    "MissingOutput",
    "NotHere",
    "Operation",
    "Untestable",
    "accepts",
    "field_names",
    "load_module",
    "module_source",
    "symbol",
]


def _find_spec(name: str) -> importlib.machinery.ModuleSpec:
    """``importlib.util.find_spec`` with the era rules: absent -> NotHere, a parent that does not
    import -> the import failure (Broken or Untestable, see :func:`import_failure`)."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:
        if not _names_module_or_parent(exc, name):  # a parent package imports something missing here
            raise import_failure(name, exc) from exc
        spec = None
    except Exception as exc:  # a parent package does not import
        raise import_failure(name, exc) from exc
    if spec is None:
        raise NotHere(f"no module {name}")
    return spec


def module_source(name: str) -> str | None:
    """Source text of an MB module without executing it; None when the module does not exist.

    Era signals read it (which API a commit has) where importing the module would be costly or
    would itself be the behaviour under test.
    """
    try:
        spec = _find_spec(name)
    except NotHere:
        return None
    if spec.origin is None:  # a namespace package: no source file
        return None
    try:
        with open(spec.origin, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, TypeError):
        return None


def load_module(name: str) -> types.ModuleType:
    """Import an MB module; absent -> NotHere; present but failing to import -> Broken (the
    commit's own code) or Untestable (a missing dependency, this environment), with the cause."""
    _find_spec(name)
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise import_failure(name, exc) from exc


def _names_module_or_parent(exc: ModuleNotFoundError, name: str) -> bool:
    """True when the missing module is ``name`` itself or one of its parent packages."""
    missing = exc.name or ""
    return bool(missing) and (name == missing or name.startswith(missing + "."))


def symbol(module: str, name: str) -> Any:
    mod = load_module(module)
    if not hasattr(mod, name):
        raise NotHere(f"{module} has no {name}")
    return getattr(mod, name)


def source_text(obj: Any) -> str:
    """Source of an MB function or class ('' when unavailable): probes read it for key names."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def field_names(cls: object) -> set[str]:
    """Dataclass field names of an MB config class (empty for anything else)."""
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def accepts(fn: Callable[..., object], *params: str) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(p in sig.parameters for p in params)


P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Candidate(Generic[P, R]):
    """One era's implementation of an operation: ``probe`` finds MB's API for that era (raising
    :class:`NotHere` when the era lacks it) and returns the call, typed as the operation declares."""

    era: str  # human label, e.g. "data/packing (v0.6+)"
    probe: Callable[[], Callable[P, R]]


class Operation(Generic[P, R]):
    """A named operation with era candidates; resolves once per process.

    Its signature ``P -> R`` is declared once, by the candidates' type: every era's call takes the
    same parameters and returns the same canonical form, and mypy holds each candidate to it.
    """

    def __init__(
        self, name: str, candidates: list[Candidate[P, R]], before: str = "", feature: str | None = None
    ) -> None:
        self.name = name
        self.candidates = candidates
        self.before = before  # what MB had before the oldest candidate's era (named in the untestable reason)
        # the ledger feature (:mod:`harness.features`) the operation is: absent everywhere -> that era gap
        self.feature = feature
        if feature is not None:
            features.tag(feature)  # a key the ledger lacks fails at import, not in a sweep

    @functools.cached_property
    def resolved(self) -> tuple[str, Callable[P, R]]:
        tried = []
        for cand in self.candidates:
            try:
                return cand.era, cand.probe()
            except NotHere as exc:
                tried.append(f"{cand.era}: {exc}")
        before = f"{self.before}; " if self.before else ""
        reason = f"operation '{self.name}' not found in this Megatron-Bridge ({before}tried {'; '.join(tried)})"
        raise features.missing(self.feature, reason) if self.feature else Untestable(reason)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            _, fn = self.resolved
        except Untestable:
            self.__dict__.pop("resolved", None)  # re-raise fresh each time, never cache a failure object
            raise
        try:
            return fn(*args, **kwargs)
        except NotHere as exc:  # a late probe: a feature this era lacks, found out at call time
            raise Untestable(f"operation '{self.name}' ({self.resolved[0]}): {exc}") from exc
        except MissingOutput as exc:  # MB ran it and the output is not there: the operation broke
            raise Broken(f"operation '{self.name}' ({self.resolved[0]}): {exc}") from exc

    @property
    def era(self) -> str:
        return self.resolved[0]


class Needed(Protocol):
    """What :func:`needs` asks of an operation, whatever its signature: the era it resolves to."""

    @property
    def era(self) -> str: ...


def needs(*ops: Needed) -> None:
    """What a case needs of MB, stated before it builds anything: each operation resolved for the MB
    under test, so that an era without one makes the case untestable with that era's reason (not a
    failure halfway through the case, and not a bare attribute access a linter must be told about)."""
    for op in ops:
        op.era  # noqa: B018 - resolving is the point: it raises Untestable for an era without it
