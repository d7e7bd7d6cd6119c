"""Which of MB's step and loss functions the run's cases called: every training path to the loss.

Why: the data of a packed batch is only half of what trains; the other half is what the path's
step function (``gpt_step``, ``vlm_step``, ``megatron_mimo_step``, ...) makes of it and how its
loss function counts tokens. A path whose step no case calls is checked at the batch only. So
the suite process lists the step and loss functions MB defines (a module per path, ``*_step.py``,
in ``training`` and beside a model family's code, e.g. ``models/qwen_vl/qwen3_vl_step.py``, and
``training/losses.py``) and records which of them the cases called, with the suite of the running
case; ``harness coverage`` lists each as exercised or not, so a path a model family brings is
named where no case reaches it.

A path whose step is a callable class (``DGPTStep``) has its ``__call__`` listed as its forward step.
A function a step reaches only after it has refused a packed batch (an ``if`` on the batch's
packed-sequence fields in the same function that raises about packing), and a step whose module's
code never names packing (identifiers and strings, comments aside), are on no packed path (read from MB's source at the
commit): the table says so instead of *not exercised* (:func:`off_packed_path`).

Recorded like the knobs (:mod:`harness.suite.knobs.spy` wraps them as their module executes, and the
log gets ``step`` lines: :class:`harness.records.knobs.KnobLine`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

#: The functions of a path's step module that a micro-batch passes through on its way to the loss.
NAMES = frozenset(
    {
        "forward_step",
        "get_batch",
        "loss_func",
        "_create_loss_function",
        "masked_next_token_loss",
        "create_masked_next_token_loss_function",
    }
)
PREFIX = "megatron.bridge."


def is_step_module(name: str) -> bool:
    """A module of MB that holds a path's step (``*_step``, anywhere in the package) or the losses."""
    if not name.startswith(PREFIX):
        return False
    tail = name[len(PREFIX) :]
    return tail.rsplit(".", 1)[-1].endswith("_step") or tail == "training.losses"


def _step_trees(bridge: Path) -> list[tuple[str, ast.Module]]:
    """(module, parsed source) of every step module under ``bridge`` (unparsable files left out)."""
    out = []
    for path in sorted(bridge.rglob("*.py")):
        rel = path.relative_to(bridge).with_suffix("")
        module = PREFIX + ".".join(rel.parts)
        if not is_step_module(module):
            continue
        try:
            out.append((module, ast.parse(path.read_text(encoding="utf-8"))))
        except (OSError, SyntaxError, ValueError):
            continue
    return out


def _names(tree: ast.Module) -> list[str]:
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in NAMES]
    for node in tree.body:  # a step class: its __call__ is the path's forward step
        calls = isinstance(node, ast.ClassDef) and any(
            isinstance(m, ast.FunctionDef) and m.name == "__call__" for m in node.body
        )
        if calls and isinstance(node, ast.ClassDef) and node.name.endswith("Step"):
            names.append(f"{node.name}.__call__")
    return names


def inventory(bridge: Path) -> dict[str, list[str]]:
    """module -> the step and loss functions it defines at top level (and ``Class.__call__`` of a
    step class), read from ``bridge``'s sources."""
    return {module: names for module, tree in _step_trees(bridge) if (names := _names(tree))}


_PACKED = ("cu_seqlens", "packed_seq")  # what a packed batch carries, in any era's names


def _refusal(node: ast.If) -> str | None:
    """The message of ``if <packed batch>: raise X("...pack...")`` (a step refusing every packed
    batch: the test reads the batch's packed-sequence fields), else None."""
    if not any(p in ast.unparse(node.test) for p in _PACKED):
        return None
    for stmt in node.body:
        if isinstance(stmt, ast.Raise) and stmt.exc is not None:
            texts = [c.value for c in ast.walk(stmt.exc) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if any("pack" in t.lower() for t in texts):
                return " ".join(texts)
    return None


def off_packed_path(bridge: Path) -> dict[str, str]:
    """key -> why no packed batch reaches it, read from MB's source: a step module whose code never
    names packing; or a function every call site of which, in its module, comes
    after the calling function has refused packed batches (``line N: message``)."""
    out: dict[str, str] = {}
    for module, tree in _step_trees(bridge):
        names = set(_names(tree))
        if module != PREFIX + "training.losses" and "pack" not in ast.unparse(tree).lower():
            out.update({key(module, n): "its step's code never names packing" for n in names})
            continue
        sites: dict[str, list[str | None]] = {}  # name -> per call site, the refusal before it (None: none)
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            ifs = [n for n in ast.walk(fn) if isinstance(n, ast.If)]
            refusals = [(n.lineno, why) for n in ifs if (why := _refusal(n)) is not None]
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                if isinstance(call.func, ast.Name) and call.func.id in names:
                    before = [(line, why) for line, why in refusals if line < call.lineno]
                    why = f"after MB refuses packed batches (line {before[0][0]}: {before[0][1]})" if before else None
                    sites.setdefault(call.func.id, []).append(why)
        for name, found in sites.items():
            if found and all(found):
                out[key(module, name)] = str(found[0])
    return out


def key(module: str, name: str) -> str:
    """``training/gpt_step.py:forward_step``: how the log and the table name a function."""
    return f"{module[len(PREFIX) :].replace('.', '/')}.py:{name}"


def wrap(module: ModuleType, record: Callable[[str], None]) -> None:
    """Wrap ``module``'s step and loss functions (those it defines, not imported ones) so that a
    call records its key (the recorder keeps a set)."""
    for name in NAMES:
        fn = getattr(module, name, None)
        if not callable(fn) or getattr(fn, "__module__", "") != module.__name__:
            continue
        if getattr(fn, "__harness_step__", False):
            continue
        setattr(module, name, _recording(fn, key(module.__name__, name), record))
    for owner, cls in vars(module).items():  # a step class's __call__
        if not (isinstance(cls, type) and owner.endswith("Step") and cls.__module__ == module.__name__):
            continue
        call = cls.__dict__.get("__call__")
        if callable(call) and not getattr(call, "__harness_step__", False):
            wrapped = _recording(call, key(module.__name__, f"{owner}.__call__"), record)
            cls.__call__ = wrapped  # type: ignore[method-assign]


def _recording(fn: Callable[..., object], where: str, record: Callable[[str], None]) -> Callable[..., object]:
    @functools.wraps(fn)
    def called(*args: object, **kwargs: object) -> object:
        record(where)
        return fn(*args, **kwargs)

    called.__harness_step__ = True  # type: ignore[attr-defined]
    return called
