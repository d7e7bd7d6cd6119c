"""Who owns a file: the code under test, the harness, or neither; the rule both processes apply.

The suite process blames an exception's frames with it (:mod:`harness.suite.ownership`); the
driver blames the frames of a suite process that died of a fatal signal
(:mod:`harness.suiterun.fatal`). Both read the Megatron roots from the environment contract
(:data:`ENV_ROOTS`, set by :meth:`harness.target.Target.env`), so both apply one rule: the most
specific root holding the file wins.
"""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Iterable
from pathlib import Path

from harness.contract import Env
from harness.paths import PACKAGE

ENV_ROOTS = Env.MB_ROOTS
ENV_VARYING = Env.VARYING_CORE
# Stand-ins that *are* the third-party code they replace (a kernel's documented arithmetic): what
# they refuse, MB handed them, as torch refusing MB's tensor is MB's. The import stand-ins of
# Transformer Engine are not among them: their refusal is the harness's gap ("CUDA-only").
SPEAKS_FOR_THIRD_PARTY = (os.path.realpath(PACKAGE / "suite" / "standins" / "thd_partition.py"),)


class Owner(enum.Enum):
    MEGATRON = "megatron"  # the commit under test
    HARNESS = "harness"  # the harness package or its suites
    NONE = "none"  # third-party code, the standard library, generated code


def real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def encode_roots(paths: Iterable[Path | str]) -> str:
    """The value of :data:`ENV_ROOTS` for these directories (resolved, deduplicated)."""
    return os.pathsep.join(dict.fromkeys(real(p) for p in paths))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@functools.lru_cache(maxsize=8192)
def owner_in(filename: str, mb_roots: tuple[str, ...], harness_roots: tuple[str, ...]) -> Owner:
    """Owner of ``filename`` given the Megatron and harness roots (resolved directories)."""
    if not filename or filename.startswith("<"):  # <frozen importlib...>, <string>
        return Owner.NONE
    path = real(filename)
    if path in SPEAKS_FOR_THIRD_PARTY:
        return Owner.NONE
    best, owner = -1, Owner.NONE
    for roots, who in ((mb_roots, Owner.MEGATRON), (harness_roots, Owner.HARNESS)):
        for root in roots:
            if _inside(path, root) and len(root) > best:
                best, owner = len(root), who
    return owner
