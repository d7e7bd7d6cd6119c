"""Which of MB's step and loss functions the run's cases called: every training path to the loss.

Why: the data of a packed batch is only half of what trains; the other half is what the path's
step function (``gpt_step``, ``vlm_step``, ``megatron_mimo_step``, ...) makes of it and how its
loss function counts tokens. A path whose step no case calls is checked at the batch only. So
the suite process lists the step and loss functions MB defines (a module per path, ``*_step.py``,
in ``training`` and beside a model family's code, e.g. ``models/qwen_vl/qwen3_vl_step.py``, and
``training/losses.py``) and records which of them the cases called, with the suite of the running
case; ``harness coverage`` lists each as exercised or not, so a path a model family brings is
named where no case reaches it.

Recorded like the knobs (:mod:`harness.knobs.spy` wraps them as their module executes, and the
log gets ``step`` lines: :class:`harness.knobs.records.KnobLine`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

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


def inventory(bridge: Path) -> dict[str, list[str]]:
    """module -> the step and loss functions it defines at top level, read from ``bridge``'s sources."""
    out: dict[str, list[str]] = {}
    for path in sorted(bridge.rglob("*.py")):
        rel = path.relative_to(bridge).with_suffix("")
        module = PREFIX + ".".join(rel.parts)
        if not is_step_module(module):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in NAMES]
        if names:
            out[module] = names
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


def _recording(fn: Callable[..., Any], where: str, record: Callable[[str], None]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def called(*args: Any, **kwargs: Any) -> Any:
        record(where)
        return fn(*args, **kwargs)

    called.__harness_step__ = True  # type: ignore[attr-defined]
    return called
