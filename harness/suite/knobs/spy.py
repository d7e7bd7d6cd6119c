"""Which knob values the cases really exercise: recorded in the suite process, where MB runs.

A case's declared parameters say what its author meant; what counts is what MB's classes and
functions were called with. So the suite process (when the driver names a log in
:data:`~harness.contract.Env.KNOBS_LOG`) scans the MB package it imports
(:func:`harness.suite.knobs.inventory.scan`), and every owner of a knob is wrapped right after its
module executes (an import hook, so names imported from it elsewhere are the wrapper too): a
call binds its arguments to the signature, defaults applied, and records each knob's value
with the suite of the running case, and whether the caller passed it or MB's default applied
(a knob only ever defaulted was never *set* by a case: a field MB just added is such a
knob). For a dataclass the knobs are its fields as
``dataclasses.fields`` sees them, inherited ones included (``GPTModelProvider`` takes its
parallel sizes from megatron-core's ``TransformerConfig``).

Values are kept small and stable: scalars as ``repr``, paths as ``<path>``, a small container
of scalars (a per-modality length mapping) as ``repr`` up to 40 characters, anything else as
``<TypeName>``. The process appends its inventory and values to the log at the end of the
session (one JSON object per line, :class:`harness.records.knobs.KnobLine`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path, PurePath
from types import ModuleType
from typing import Any

from harness.contract import Env
from harness.records.knobs import FACTORY, Knob, KnobLine
from harness.suite.knobs import reach, steps, unread
from harness.suite.knobs.inventory import relevant, scan

_BY_MODULE: dict[str, list[Knob]] = {}
_KNOBS: dict[str, Knob] = {}
_VALUES: set[tuple[str, str, str, bool]] = set()  # (knob key, shown value, suite, passed by the caller)
_PATCHED: set[tuple[str, str]] = set()
_INHERITED: set[str] = set()  # knob keys of fields a class of MB inherits from outside MB (megatron-core)
_PACKAGE: dict[str, Path] = {}  # "bridge": the megatron/bridge directory this process imports
CURRENT = {"suite": ""}
_STEPS: dict[str, list[str]] = {}  # step module -> its step and loss functions (harness.suite.knobs.steps)
_OFF_PATH: dict[str, str] = {}  # step or loss function -> why no packed batch reaches it
_CALLED: set[tuple[str, str]] = set()  # (step function key, suite) of every call
_FACTORY_SENTINEL = getattr(dataclasses, "_HAS_DEFAULT_FACTORY", object())


def show(value: object) -> str:
    """A value as the table shows it (scalars and small containers of scalars as repr, the rest by type)."""
    if value is _FACTORY_SENTINEL:  # a dataclass field left to its default_factory (the signature's marker)
        return FACTORY
    if isinstance(value, enum.Enum):
        return str(value.value)
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, PurePath):
        return "<path>"
    if isinstance(value, (dict, list, tuple)) and len(value) <= 8 and _plain(value):
        text = repr(value)  # a small container of scalars (per-modality lengths): two values stay two
        if len(text) <= 40:
            return text
    return f"<{type(value).__name__}>"


def _plain(value: Any) -> bool:
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
    return all(x is None or isinstance(x, (bool, int, float, str)) for x in items)


def _record(knobs: list[Knob], arguments: dict[str, object], passed: set[str]) -> None:
    for knob in knobs:
        if knob.name in arguments:
            _VALUES.add((knob.key, show(arguments[knob.name]), CURRENT["suite"], knob.name in passed))


def _declared_in(cls: type, name: str) -> str:
    """The module of the class in ``cls``'s MRO that declares field ``name``."""
    for klass in cls.__mro__:
        if name in inspect.get_annotations(klass):
            return klass.__module__
    return cls.__module__


def _field_knobs(module: str, owner: str, cls: type) -> list[Knob]:
    out = []
    for f in dataclasses.fields(cls):
        annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        if relevant(f.name, annotation):
            has = f.default is not dataclasses.MISSING
            default = show(f.default) if has else FACTORY if f.default_factory is not dataclasses.MISSING else None
            knob = Knob(module, owner, f.name, annotation, default)
            if not _declared_in(cls, f.name).startswith(reach.BRIDGE):
                _INHERITED.add(knob.key)
            out.append(knob)
    return out


def _mark_off_path(knobs: dict[str, Knob]) -> dict[str, Knob]:
    """``knobs`` with each inherited field that no code MB reaches reads marked unread, with why
    (:mod:`harness.suite.knobs.reach`). Asked here, once per process at the end, not on import: the
    closure parses part of megatron-core, a second or two."""
    inherited = {k.name for key, k in knobs.items() if key in _INHERITED and k.read}
    bridge = _PACKAGE.get("bridge")
    if not inherited or bridge is None:
        return knobs
    candidates = inherited - unread.accessed(bridge, inherited)  # MB reading it itself settles it
    if not candidates:
        return knobs
    namespace = reach.Namespace(_megatron_portions())
    why = {name: found.why() for name in sorted(candidates) if (found := reach.off_path(namespace, name))}
    return {
        key: dataclasses.replace(k, read=False, why=why[k.name]) if key in _INHERITED and k.name in why else k
        for key, k in knobs.items()
    }


def _megatron_portions() -> list[Path]:
    spec = importlib.util.find_spec("megatron")
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []


def _wrap(
    fn: Callable[..., object], knobs: list[Knob], defaults: dict[str, object] | None = None
) -> Callable[..., object]:
    """``fn`` recording its knob arguments. A constructor that takes fields through ``**kwargs``
    (MB's ``GPTDatasetConfig`` hands them to megatron-core's) has them counted by name, and a
    dataclass field it was not given counts as its ``defaults`` value, not passed."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn
    var_kw = [p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]

    @functools.wraps(fn)
    def spied(*args: object, **kwargs: object) -> object:
        try:
            bound = sig.bind(*args, **kwargs)
            passed = set(bound.arguments)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            for name in var_kw:
                extra = arguments.pop(name, None) or {}
                passed.discard(name)
                arguments.update(extra)
                passed |= set(extra)
            for name, value in (defaults or {}).items():
                arguments.setdefault(name, value)
            _record(knobs, arguments, passed)
        except TypeError:
            pass  # the call itself will say what is wrong with it
        return fn(*args, **kwargs)

    spied.__harness_spied__ = True  # type: ignore[attr-defined]
    return spied


def _after_finalize(fn: Callable[..., object], knobs: list[Knob], defaults: dict[str, object]) -> Callable[..., object]:
    """``finalize`` recording the knob fields as MB finalised them: what the run then used. A field
    MB's finalisation derives (``variable_seq_lengths`` turned on for in-batch packing with PP, the
    way recipes assign fields after construction) counts as set when it is not the field's default."""
    if getattr(fn, "__harness_spied__", False):
        return fn

    @functools.wraps(fn)
    def spied(self: object, *args: object, **kwargs: object) -> object:
        out = fn(self, *args, **kwargs)
        try:
            # fields with a plain default only: a factory's or a required field's value says nothing here
            values = {k.name: getattr(self, k.name) for k in knobs if k.name in defaults and hasattr(self, k.name)}
            changed = {name for name, v in values.items() if _differs(v, defaults[name])}
            _record(knobs, values, changed)
        except Exception:  # recording must never change what MB does
            pass
        return out

    spied.__harness_spied__ = True  # type: ignore[attr-defined]
    return spied


def _differs(value: object, default: object) -> bool:
    try:
        return bool(value != default)
    except Exception:  # a value that cannot be compared (a tensor) is not a default
        return True


def _called(where: str) -> None:
    _CALLED.add((where, CURRENT["suite"]))


def _patch(module: ModuleType) -> None:
    name = module.__name__
    if name in _STEPS:
        steps.wrap(module, _called)
    for owner in sorted({k.owner for k in _BY_MODULE.get(name, ())}):
        if (name, owner) in _PATCHED:
            continue
        _PATCHED.add((name, owner))
        top = owner.split(".")[0]
        obj = getattr(module, top, None)
        if obj is None:
            continue
        scanned = [k for k in _BY_MODULE[name] if k.owner == owner]
        if isinstance(obj, type):
            knobs = _field_knobs(name, owner, obj) if dataclasses.is_dataclass(obj) else scanned
            for k in knobs:
                _KNOBS[k.key] = k
            defaults = (
                {f.name: f.default for f in dataclasses.fields(obj) if f.default is not dataclasses.MISSING}
                if dataclasses.is_dataclass(obj)
                else None
            )
            obj.__init__ = _wrap(obj.__init__, knobs, defaults)  # type: ignore[misc]
            if dataclasses.is_dataclass(obj) and callable(getattr(obj, "finalize", None)):
                obj.finalize = _after_finalize(obj.finalize, knobs, defaults or {})  # type: ignore[attr-defined]
        elif callable(obj) and not getattr(obj, "__harness_spied__", False):
            setattr(module, top, _wrap(obj, scanned))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the knob owners of a watched module as soon as its body has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _BY_MODULE and fullname not in _STEPS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                real = spec.loader.exec_module

                def exec_module(module: ModuleType, _real: Callable[[ModuleType], None] = real) -> None:
                    _real(module)
                    _patch(module)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
        return None


def install() -> bool:
    """Scan the MB this interpreter imports and watch its knob owners (False: no MB here)."""
    try:
        spec = importlib.util.find_spec("megatron.bridge")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    _PACKAGE["bridge"] = Path(next(iter(spec.submodule_search_locations)))
    for knob in scan(_PACKAGE["bridge"]):
        _BY_MODULE.setdefault(knob.module, []).append(knob)
        _KNOBS.setdefault(knob.key, knob)
    _STEPS.update(steps.inventory(_PACKAGE["bridge"]))
    _OFF_PATH.update(steps.off_packed_path(_PACKAGE["bridge"]))
    for name in {*_BY_MODULE, *_STEPS}:
        if name in sys.modules:
            _patch(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport())
    return True


def _log() -> Path | None:
    """The run's knobs log, as the driver names it to the suite process (None: no log asked for)."""
    return Path(os.environ[Env.KNOBS_LOG]) if os.environ.get(Env.KNOBS_LOG) else None


def seen() -> tuple[frozenset[tuple[str, str, str, bool]], frozenset[tuple[str, str]]]:
    """What this process has recorded so far: where a forked rank starts (:func:`write_new`)."""
    return frozenset(_VALUES), frozenset(_CALLED)


def write_new(
    since: tuple[frozenset[tuple[str, str, str, bool]], frozenset[tuple[str, str]]], path: Path | None = None
) -> None:
    """Append what this process recorded after ``since`` (a forked rank of a gloo world: its values
    and step calls; the parent writes the inventory). One ``os.write`` of an ``O_APPEND`` file, so
    the ranks of a world appending at once do not interleave their lines."""
    target = path or _log()
    if target is None:
        return
    lines = [KnobLine.of_value(k, v, suite, passed) for k, v, suite, passed in sorted(_VALUES - since[0])]
    lines += [KnobLine("called", key=where, suite=suite) for where, suite in sorted(_CALLED - since[1])]
    if not lines:
        return
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(line.dumps() + "\n" for line in lines).encode("utf-8"))
    finally:
        os.close(fd)


def write(path: Path | None = None) -> None:
    """Append this process's inventory and exercised values to the knobs log."""
    target = path or _log()
    if target is None or not _KNOBS:
        return
    lines = [KnobLine.of_knob(k) for k in _mark_off_path(_KNOBS).values()]
    lines += [KnobLine.of_value(key, value, suite, passed) for key, value, suite, passed in sorted(_VALUES)]
    keys = [steps.key(m, fn) for m, names in sorted(_STEPS.items()) for fn in names]
    lines += [KnobLine("step", key=k, value=_OFF_PATH.get(k, "")) for k in keys]
    lines += [KnobLine("called", key=where, suite=suite) for where, suite in sorted(_CALLED)]
    with target.open("a", encoding="utf-8") as fh:
        fh.write("".join(line.dumps() + "\n" for line in lines))
