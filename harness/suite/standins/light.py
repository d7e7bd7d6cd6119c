"""Light import of Megatron-Bridge: package ``__init__`` files are not executed.

``import megatron.bridge.data.packing.algorithms`` normally executes ``megatron/bridge/__init__.py``
first, which imports every model bridge and transformers (~20 s). The pure packing modules
(``data/packing/*``, ``data/datasets/packing_utils``, ``training/utils/packed_seq_utils``, ...) do
not need any of it. In light mode (``HARNESS_IMPORT_MODE=light``, installed from
``sitecustomize``) a meta-path finder serves every *package* of the ``megatron.bridge`` tree as a
plain module with the right ``__path__`` (so submodules resolve from the same directories) whose
``__init__.py`` is not run. Plain modules are left to the normal finders (and to the scoped TE
stand-in), so module bodies run unchanged.

When code asks a skipped package for a name it does not have (``from megatron.bridge.data.packing
import PackedSequenceSpecs`` re-exported by the package ``__init__``), the package resolves it
lazily: a submodule of that name is imported if one exists, otherwise the real ``__init__.py`` is
executed once into the package (what a full import would have done) and the name is looked up
again. So light import never changes what a name means; it only defers package initialisation.

Also a pytest plugin (``-p harness.suite.standins.light``): with ``HARNESS_IMPORT_GROUP`` set, it
deselects every case whose ``import_group`` marker differs (an unmarked case belongs to "full").
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.contract import Env
from harness.suite import standins

if TYPE_CHECKING:
    import pytest

# megatron.training is served light too: MB's utils import it, and its package __init__ pulls in
# training.py, checkpointing and modelopt (~5 s). Its re-exported names resolve through the
# __init__'s own import statements (see _reexport_source), which avoids the circular imports a
# whole on-demand __init__ would cause. megatron.core cannot: its modules import each other
# through half-initialised packages. HARNESS_LIGHT_ROOTS overrides the list (comma-separated).
ROOTS = tuple(os.environ.get(Env.LIGHT_ROOTS, "megatron.bridge,megatron.training").split(","))
ENV_MODE = Env.IMPORT_MODE
ENV_GROUP = Env.IMPORT_GROUP
DEFAULT_GROUP = "full"
_INITIALISED = "__harness_light_initialised__"
_INITIALISING = "__harness_light_initialising__"


def _in_tree(fullname: str) -> bool:
    return any(fullname == r or fullname.startswith(r + ".") for r in ROOTS)


def _submodule_exists(paths: Sequence[str], name: str) -> bool:
    for base in paths:
        if os.path.isfile(os.path.join(base, name + ".py")) or os.path.isdir(os.path.join(base, name)):
            return True
    return False


def _run_real_init(module: types.ModuleType) -> None:
    """Execute the package's real ``__init__.py`` into it, once (on demand)."""
    d = module.__dict__
    if d.get(_INITIALISED) or d.get(_INITIALISING):
        return
    origin = d.get("__harness_light_origin__")
    d[_INITIALISING] = True
    try:
        if origin:
            with open(origin, "rb") as fh:
                code = compile(fh.read(), origin, "exec")
            standins.record(f"light import: ran {module.__name__}.__init__ on demand")
            exec(code, d)
        d[_INITIALISED] = True
    finally:
        d[_INITIALISING] = False


def _reexport_source(module: types.ModuleType, name: str) -> tuple[str, str] | None:
    """Where the package's ``__init__.py`` imports ``name`` from: (absolute module, original name).

    Only plain top-level ``from X import a [as name]`` statements count (also inside a top-level
    ``try``). Resolving a re-export this way imports just that submodule, instead of running the
    whole ``__init__`` (which may import the world, or import back the module being loaded).
    """
    origin = module.__dict__.get("__harness_light_origin__")
    if not origin:
        return None
    try:
        with open(origin, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    stmts = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.Try):
            stmts += node.body
    for node in stmts:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name or alias.name == "*":
                continue
            if node.level:
                base = module.__name__.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            return (target, alias.name) if target else None
    return None


def _lazy_getattr_for(module: types.ModuleType) -> object:
    def __getattr__(name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        d = module.__dict__
        paths = list(d.get("__path__") or [])
        if _submodule_exists(paths, name):
            return importlib.import_module(f"{module.__name__}.{name}")
        if not d.get(_INITIALISED) and not d.get(_INITIALISING):
            source = _reexport_source(module, name)
            if source is not None and source[0] != module.__name__:
                value = getattr(importlib.import_module(source[0]), source[1])
                d[name] = value
                return value
            _run_real_init(module)
            if name in d:
                return d[name]
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    return __getattr__


class _SkipInitLoader(importlib.abc.Loader):
    def __init__(self, origin: str | None) -> None:
        self.origin = origin

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return types.ModuleType(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__dict__["__harness_light_origin__"] = self.origin
        module.__dict__[_INITIALISED] = False
        module.__dict__["__getattr__"] = _lazy_getattr_for(module)
        standins.record(f"light import: package __init__ files of {', '.join(ROOTS)} not executed")


class LightImportFinder(importlib.abc.MetaPathFinder):
    """Serves packages of the ``megatron.bridge`` tree without running their ``__init__``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not _in_tree(fullname):
            return None
        # PathFinder searches the path entries directly (no sys.meta_path): no recursion into us
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.submodule_search_locations is None:
            return None  # a plain module (or absent): the normal finders handle it
        locations = list(spec.submodule_search_locations)
        new = importlib.machinery.ModuleSpec(
            fullname, _SkipInitLoader(spec.origin), origin=spec.origin, is_package=True
        )
        new.submodule_search_locations = locations
        return new


_finder: LightImportFinder | None = None


def install() -> bool:
    """Put the finder first on ``sys.meta_path`` (once per process)."""
    global _finder
    if _finder is not None:
        return False
    _finder = LightImportFinder()
    sys.meta_path.insert(0, _finder)
    return True


def uninstall() -> None:
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None


def active() -> bool:
    return _finder is not None


def skipped_init(module: types.ModuleType) -> bool:
    """True when ``module`` is a package served light whose ``__init__`` has not run."""
    return "__harness_light_origin__" in module.__dict__ and not module.__dict__.get(_INITIALISED)


# ---- pytest plugin: select the cases of one import group -------------------------------------


def case_group(item: pytest.Item) -> str:
    mark = item.get_closest_marker("import_group")
    if mark is None:
        return DEFAULT_GROUP
    if mark.args:
        return str(mark.args[0])
    return str(mark.kwargs.get("name", DEFAULT_GROUP))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    group = os.environ.get(ENV_GROUP)
    if not group:
        return
    keep: list[pytest.Item] = []
    drop: list[object] = []
    for item in items:
        (keep if case_group(item) == group else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
