"""Who owns a line of code: the Megatron commit under test, the harness, or neither.

A failing case is blamed by *where the code lives*, never by words in a path. ``harness
bisect`` materialises MB commits under the cache directory (``~/.cache/harness/...``): a rule
like "the path has ``megatron`` and not ``harness`` in it" made every exception MB raised
during a bisection a harness ERROR, so a regression that shows up as MB raising could not be
bisected, while the same commit run with ``harness run --mb-src`` was a FAIL.

Roots (directories, compared after resolving symlinks; the most specific root wins, so a cache
directory inside a harness checkout still holds MB code):

* **Megatron**: the MB source tree under test (``--mb-src``, a bisect workspace, or the
  installed package) and, with ``--megatron-lm``, the pinned Megatron-LM tree (it comes with
  the MB commit, so what it raises is blamed on that commit). The runner passes them to the
  suite process in :data:`ENV_ROOTS`; a plain ``pytest suites/`` run falls back to the
  ``megatron.bridge`` this interpreter imports.
* **Harness**: the ``harness`` package, the ``suites`` directory and the directory of every
  suite file a pytest session collects (:func:`add_harness_root`, called by the plugin).
* Everything else (torch, numpy, the standard library, pytest, an installed megatron-core)
  owns nothing: an exception raised there belongs to whichever project frame called it.

At the second level of a bisection (MB held at one commit, one Megatron-LM commit after
another), the Megatron-LM tree is also listed in :data:`ENV_VARYING`: it is still code under
test (what it raises at run time is a finding), but when it fails to import with the MB held
fixed, the pair does not fit (:mod:`harness.suite.adapters.failures`), a skip rather than a break.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from harness.owners import ENV_ROOTS, ENV_VARYING, Owner, owner_in, real
from harness.paths import PACKAGE, mb_location, suites_dir

# Frames of the harness that only pass a call through to torch (the host-read counter around the
# tensors MB's step moves to the device): torch refusing the call refuses what the caller handed
# it, so blame looks past them to the caller, as it looks past torch's own frames.
PASSES_THROUGH = frozenset({(os.path.realpath(PACKAGE / "suite" / "adapters" / "hostsync.py"), "__torch_function__")})
_harness_roots: tuple[str, ...] = (str(PACKAGE), str(suites_dir()))


def megatron_roots() -> tuple[str, ...]:
    """Directories whose code is the commit under test, as this process was told."""
    value = os.environ.get(ENV_ROOTS)
    if value is not None:
        return tuple(p for p in value.split(os.pathsep) if p)
    loc = mb_location()
    return (real(loc),) if loc else ()


def varying_roots() -> tuple[str, ...]:
    """Megatron roots a bisection varies against a fixed MB (the Megatron-LM tree at the second
    level); empty otherwise."""
    return tuple(p for p in os.environ.get(ENV_VARYING, "").split(os.pathsep) if p)


def add_harness_root(path: Path | str) -> None:
    """Count the code under ``path`` as the harness's (the directory of a collected suite file)."""
    global _harness_roots
    root = real(path)
    if root not in _harness_roots:
        _harness_roots = (*_harness_roots, root)


def _owner(filename: str, mb_roots: tuple[str, ...]) -> Owner:
    return owner_in(filename, mb_roots, _harness_roots)


def owner_of(filename: str, mb_roots: tuple[str, ...] | None = None) -> Owner:
    """Owner of a source file (``mb_roots`` defaults to :func:`megatron_roots`)."""
    return _owner(filename, megatron_roots() if mb_roots is None else mb_roots)


def frames(tb: TracebackType | None) -> list[str]:
    """File names of a traceback's frames, outermost first."""
    out = []
    while tb is not None:
        out.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return out


def _code_frames(tb: TracebackType | None) -> list[tuple[str, str]]:
    """(file name, function name) of a traceback's frames, outermost first."""
    out = []
    while tb is not None:
        out.append((tb.tb_frame.f_code.co_filename, tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    return out


def mb_frame(tb: TracebackType | None, mb_roots: tuple[str, ...] | None = None) -> str:
    """Where in MB the innermost MB frame of a traceback is: ``megatron/bridge/x.py:42 in fn``
    ("" when no frame is MB's): the line blame was decided on, shown with the exception."""
    roots = megatron_roots() if mb_roots is None else mb_roots
    found = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        if _owner(code.co_filename, roots) is Owner.MEGATRON:
            path = code.co_filename
            at = path.rfind("/megatron/")
            found = f"{path[at + 1 :] if at >= 0 else path}:{tb.tb_lineno} in {code.co_name}"
        tb = tb.tb_next
    return found


def blame(tb: TracebackType | None, mb_roots: tuple[str, ...] | None = None) -> Owner:
    """Owner of the innermost project frame (Megatron or harness) of a traceback.

    Third-party frames are passed over: torch refusing a tensor MB built is MB's failure,
    torch refusing one the harness built is the harness's.
    """
    roots = megatron_roots() if mb_roots is None else mb_roots
    for filename, name in reversed(_code_frames(tb)):
        if (real(filename), name) in PASSES_THROUGH:
            continue
        who = _owner(filename, roots)
        if who is not Owner.NONE:
            return who
    return Owner.NONE
