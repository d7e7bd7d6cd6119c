"""Why an MB module that exists failed to import: a broken commit, or this environment.

The line between the two decides whether a case FAILs (bisectable) or is UNTESTABLE (a skip),
so a break can never hide as an era gap:

* **broken** (the commit's own code cannot be imported): a ``SyntaxError`` in a file of the
  code under test; an import of a module of the code under test that does not exist, or of a
  name such a module does not define (a circular import included); any other exception raised
  by the code under test's own module body.
* **untestable** (the environment, not the commit): a missing third-party module (named in the
  reason, e.g. a CUDA-only package a non-packing parent package imports unguarded, see
  ENVIRONMENT.md); a name missing from a module outside the code under test (an installed
  megatron-core older than the commit needs); an ``ImportError`` raised by hand (MB's "X is
  required"); anything raised inside third-party code while MB imports it.

* **environment** (an error, the harness's): a module of the code under test that is a build
  artifact of its tree (named by a ``Makefile`` in its package directory, as megatron-core's
  ``datasets/helpers_cpp``), missing because this environment did not build it. MB's entry point
  builds it before the data path (:mod:`harness.repository.corebuild`); a tree where that build
  failed is the harness's environment, never MB's break.

* **untestable, mismatched** (second level of a bisection only, MB held fixed while Megatron-LM
  commits vary): what would be broken only because of the Megatron-LM tree (a ``SyntaxError``
  in it, a megatron-core module or name MB imports that this commit lacks, its module body
  raising) says this megatron-core does not fit the MB held fixed: a skip, as an era gap is.

An exception chain (``raise ... from``, or raised while handling another) is read from the
outermost exception in: the first link that decides wins, so MB's ``raise RuntimeError("install
fla")`` in an ``except ImportError`` is still "missing dependency fla". "Code under test" is
decided by location (:mod:`harness.suite.ownership`), so it includes the pinned Megatron-LM tree.
"""

from __future__ import annotations

import enum
import re
import sys
from pathlib import Path

from harness.contract import CORE_BUILD_LOG
from harness.errors import Broken, EnvironmentProblem, Untestable
from harness.suite.ownership import Owner, frames, megatron_roots, owner_of, varying_roots


class _Cause(enum.Enum):
    BROKEN = "broken"
    MISSING = "missing"  # a module this environment does not have
    ENVIRONMENT = "environment"


def import_failure(module: str, exc: BaseException) -> Broken | Untestable | EnvironmentProblem:
    """The exception a case raises for ``module`` failing to import with ``exc``."""
    roots = megatron_roots()
    if (unbuilt := _unbuilt_artifact(exc)) is not None:
        return unbuilt
    varying = varying_roots()
    fixed = tuple(r for r in roots if r not in varying)  # the code under test that does not vary

    def broken(fixed_broken: bool) -> Broken | Untestable:
        """Broken, unless only the varying Megatron-LM tree makes it so (a mismatch: untestable)."""
        if varying and not fixed_broken:
            return Untestable(
                f"import of {module} failed: the megatron-core of this Megatron-LM commit does not import "
                f"with the Megatron-Bridge held fixed: {_describe(exc)}"
            )
        return Broken(f"import of {module} failed: {_describe(exc)}")

    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        cause = _decide(link, roots)
        if cause is _Cause.BROKEN:
            return broken(_decide(link, fixed) is _Cause.BROKEN)
        if cause is _Cause.MISSING:
            return Untestable(
                f"import of {module} failed: missing dependency '{getattr(link, 'name', '')}' "
                f"(not installed in this environment): {_describe(exc)}"
            )
        if cause is _Cause.ENVIRONMENT:
            return Untestable(f"import of {module} failed in this environment: {_describe(exc)}")
        link = link.__cause__ or link.__context__
    raised = frames(exc.__traceback__)
    if raised and owner_of(raised[-1], roots) is Owner.MEGATRON:
        return broken(owner_of(raised[-1], fixed) is Owner.MEGATRON)
    return Untestable(
        f"import of {module} failed in this environment (raised outside the code under test): {_describe(exc)}"
    )


def _unbuilt_artifact(exc: BaseException) -> EnvironmentProblem | None:
    """A missing module that its package's ``Makefile`` builds (anywhere in the chain)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        name = getattr(link, "name", None) if isinstance(link, ModuleNotFoundError) else None
        if name and "." in name:
            parent, _, leaf = name.rpartition(".")
            for place in getattr(sys.modules.get(parent), "__path__", None) or []:
                makefile = Path(place) / "Makefile"
                try:  # the module's own name as a word, not a prefix of a source file (helpers.cpp)
                    builds = re.search(rf"(?<![\w.]){re.escape(leaf)}(?![\w.])", makefile.read_text(errors="replace"))
                except OSError:
                    continue
                if builds:
                    why = _build_failure(Path(place)) or "not built in this environment"
                    return EnvironmentProblem(
                        f"{name} is a build artifact of {place} (its Makefile), missing here: {why}"
                    )
        link = link.__cause__ or link.__context__
    return None


def _build_failure(package_dir: Path) -> str | None:
    """The reason the driver recorded when building the artifacts of ``package_dir`` failed."""
    try:
        text = (package_dir / CORE_BUILD_LOG).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text.splitlines()[-1][:300] if text else None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _decide(exc: BaseException, roots: tuple[str, ...]) -> _Cause | None:
    if isinstance(exc, SyntaxError):
        return _Cause.BROKEN if exc.filename and _in_roots(exc.filename, roots) else _Cause.ENVIRONMENT
    if isinstance(exc, ModuleNotFoundError):
        return _Cause.BROKEN if exc.name and _module_in_roots(exc.name, roots) else _Cause.MISSING
    if isinstance(exc, ImportError):
        if exc.path:
            return _Cause.BROKEN if _in_roots(exc.path, roots) else _Cause.ENVIRONMENT
        if exc.name:
            return _Cause.BROKEN if _module_in_roots(exc.name, roots) else _Cause.ENVIRONMENT
        return _Cause.ENVIRONMENT  # raised by hand ("X is required"): a dependency is unavailable
    return None


def _in_roots(path: str, roots: tuple[str, ...]) -> bool:
    return owner_of(path, roots) is Owner.MEGATRON


def _module_in_roots(name: str, roots: tuple[str, ...]) -> bool:
    """Is ``name`` (imported or not) a module of the code under test? Decided by where it, or
    its nearest imported parent package, lives: a missing submodule of an MB package is MB's
    broken import; one of a namespace spread over several trees (``megatron``) is not."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is None:
            continue
        places = list(getattr(mod, "__path__", None) or []) or [getattr(mod, "__file__", None) or ""]
        return all(p and _in_roots(p, roots) for p in places)
    return False
