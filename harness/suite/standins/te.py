"""Scoped stand-in for ``transformer_engine`` during the import of selected MB modules.

Why scoped: some MB modules (``peft/lora_layers.py`` from 0.3.1 to the newest commit) import
``transformer_engine`` at top level without a guard, so ``import megatron.bridge`` fails on a
machine without TE. A global fake TE does not work: megatron-core and modelopt then believe TE
is present and crash. So a meta-path finder intercepts only MB modules whose source has an
unguarded top-level TE import, imports that module's other dependencies for real first, then
executes the module body with stand-in TE modules in ``sys.modules`` and removes them after.
Classes taken from the stand-in refuse instantiation with a clear "CUDA-only" error.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence

from harness.suite import standins

TE = "transformer_engine"
# CUDA-only packages some MB modules import at top level without a guard: Transformer Engine
# (peft/lora_layers.py, 0.3.1 to HEAD), its torch extension (Wan's diffusion/models/wan/utils.py in
# 0.4-0.5, for its CP split) and flash-linear-attention ``fla`` (the Kimi K3 model, for a while in
# mid 2026). Each gets a stand-in only when it is really absent.
CANDIDATES = (TE, "transformer_engine_torch", "fla")
STANDIN: tuple[str, ...] = ()


def _covered(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in STANDIN)


WATCHED_PREFIX = "megatron.bridge."


class _StandinMeta(type):
    """Attribute chains such as ``te.ops.Sequential`` (used in annotations) resolve too."""

    def __getattr__(cls, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _StandinMeta(name, (_StandinObject,), {"__module__": cls.__module__})
        setattr(cls, name, value)
        return value


class _StandinObject(metaclass=_StandinMeta):
    """Anything taken from the TE stand-in: subclassable, never usable."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"{type(self).__name__} is a harness stand-in for transformer_engine (CUDA-only); "
            "this code path is untestable without Transformer Engine"
        )


class _StandinModule(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _StandinMeta(name, (_StandinObject,), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


def is_standin(value: object) -> bool:
    """Whether ``value`` came from this stand-in (a module or anything taken from one)."""
    return isinstance(value, _StandinModule | _StandinMeta)


def _really_available(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _unguarded_te_imports(source: str) -> tuple[bool, list[str]]:
    """(has an unguarded top-level TE import, other top-level absolute imports)."""
    if not any(package in source for package in STANDIN):  # most MB modules: no parse needed
        return False, []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False, []
    has_te = False
    others: list[str] = []
    for node in tree.body:  # top level only: imports inside try/if/functions are guarded
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            if _covered(name):
                has_te = True
            else:
                others.append(name)
    return has_te, others


class _StandinTEFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``transformer_engine*`` stand-ins while at least one wrapped module executes."""

    def __init__(self) -> None:
        self.active = 0

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if self.active and _covered(fullname):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        mod = _StandinModule(spec.name)
        mod.__path__ = []  # a package, so submodules resolve through this finder too
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _WrappingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, others: list[str], te_finder: _StandinTEFinder) -> None:
        self.inner = inner
        self.others = others
        self.te_finder = te_finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        for name in self.others:  # real imports first, so they never see the stand-in
            with contextlib.suppress(Exception):
                importlib.import_module(name)
        before = {k for k in sys.modules if _covered(k)}
        self.te_finder.active += 1
        standins.record(f"{'/'.join(STANDIN)} stand-in while importing {module.__name__}")
        try:
            self.inner.exec_module(module)
        finally:
            self.te_finder.active -= 1
            for k in [k for k in sys.modules if _covered(k) and k not in before]:
                del sys.modules[k]


class _MBModuleFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of MB modules that import TE unguarded at top level."""

    def __init__(self, te_finder: _StandinTEFinder) -> None:
        self.te_finder = te_finder

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(WATCHED_PREFIX):
            return None
        # PathFinder searches the path entries directly (no sys.meta_path): no recursion into us
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            return None
        try:
            with open(spec.origin, encoding="utf-8") as fh:
                source = fh.read()
        except OSError:
            return None
        has_te, others = _unguarded_te_imports(source)
        if not has_te or spec.loader is None:
            return None
        spec.loader = _WrappingLoader(spec.loader, others, self.te_finder)
        return spec


_installed = False


def install() -> bool:
    """Install the finders once per process, for the candidates that are really absent."""
    global _installed, STANDIN
    if _installed:
        return False
    STANDIN = tuple(p for p in CANDIDATES if not _really_available(p))
    if not STANDIN:
        return False
    te_finder = _StandinTEFinder()
    sys.meta_path.insert(0, te_finder)
    sys.meta_path.insert(0, _MBModuleFinder(te_finder))
    _installed = True
    return True
