"""A refusal is a decision, not a crash: MB saying no up front, by an explicit check of its own.

When MB raises, the verdict used to be "Megatron raised ..." with impact ``crash`` whatever the
raise was. But a ``raise ValueError("Energon native sequence packing requires
micro_batch_size=1.")`` in a config's ``validate`` is MB deciding, before any batch exists, that
it will not run the configuration: no step trains anything wrong. Such a refusal is judged
against the documented rules instead (:mod:`harness.suite.known` and the plugin):

* a case a known-bug entry lists (the configuration used to misbehave or crash later): FIXED,
  refused up front now, the check named;
* a case that documents the refusal as safe accepts it (it calls :func:`up_front_check` itself);
* otherwise a finding of impact ``refuses-valid-config`` (a configuration the case holds valid).

Up front means: the innermost frame of the exception inside MB's code under test is an explicit
``raise`` or ``assert`` statement (not torch or Python failing inside a call), in a gate: a
function whose job is to check (``validate``, ``finalize``, ``__post_init__``, ``__init__``,
``check``/``verify`` helpers), or a generator (a sampler's ``__iter__``) before its first
``yield``. An explicit raise in the middle of computing a batch or a step stays ``crash``.
"""

from __future__ import annotations

import ast
import functools
import linecache
import re
import traceback
from pathlib import Path
from types import TracebackType

from harness.suite.adapters.rules import raising_check
from harness.suite.ownership import Owner, megatron_roots, owner_of

PREFIX = "MB refused up front"  # the verdict message of a refusal (outcome.verdict_of)
_GATE = re.compile(r"^_*(validate|finalize|post_init|init|check|verify|ensure|assert)", re.I)


def up_front_check(exc: BaseException, roots: tuple[str, ...] | None = None) -> str | None:
    """``file:line in function`` of the MB check that refused up front, or None (see module doc)."""
    roots = megatron_roots() if roots is None else roots
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if owner_of(f.filename, roots) is Owner.MEGATRON]
    if not frames:
        return None
    last = frames[-1]
    lineno = last.lineno or 0
    if raising_check(exc, tuple(Path(r) for r in roots)) is None:  # torch or Python failing, not MB's check
        return None
    if not (_GATE.match(last.name) or _before_first_yield(exc.__traceback__, last.filename, lineno)):
        return None
    path = last.filename.replace("\\", "/")
    at = path.rfind("/megatron/")
    return f"{path[at + 1 :] if at >= 0 else path}:{lineno} in {last.name}"


def describe(exc: BaseException, check: str) -> str:
    """The verdict message of a refusal."""
    return said(type(exc).__name__, str(exc), check)


def said(error_class: str | None, message: str, check: str | None) -> str:
    """A refusal in words (also for one a rank of a world reported: class, message, check)."""
    return f"{PREFIX}: {error_class}: {message} [by its check at {check}]"


def is_refusal(message: str) -> bool:
    """Is this verdict message MB's up-front refusal (raised as is, or as a suite's finding)?"""
    return message.removeprefix("assertion failed: ").startswith(PREFIX)


def _before_first_yield(tb: TracebackType | None, filename: str, lineno: int) -> bool:
    """The raise sits in a generator and no ``yield`` of that generator comes before it."""
    code = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename and tb.tb_lineno == lineno:
            code = tb.tb_frame.f_code
        tb = tb.tb_next
    if code is None or not code.co_flags & 0x20:  # CO_GENERATOR
        return False
    yields = _yield_lines(filename, code.co_firstlineno)
    return bool(yields) and min(yields) > lineno


@functools.cache
def _yield_lines(filename: str, first_line: int) -> tuple[int, ...]:
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _starts(node) == first_line:
            return tuple(sorted(n.lineno for n in ast.walk(node) if isinstance(n, (ast.Yield, ast.YieldFrom))))
    return ()


def _starts(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The line a function's code object reports as its first (the first decorator's, if any)."""
    return min([node.lineno] + [d.lineno for d in node.decorator_list])
