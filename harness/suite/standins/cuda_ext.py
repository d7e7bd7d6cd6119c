"""Scoped stand-in for CUDA extensions that megatron-core compiles while a module is imported.

Why: megatron-core pinned by MB in late 2025 (Megatron-LM ef4ae4528a, 2025-10-01, to the lazy
compile of late 2025) builds a CUDA allocator with ``torch.utils.cpp_extension.load_inline`` in
the body of ``megatron/core/inference/unified_memory.py``, which ``import megatron.core`` reaches.
MCore guards the build (``except (RuntimeError, ImportError, OSError)``: "no unified memory"),
but on a machine without a GPU and without ``TORCH_CUDA_ARCH_LIST`` newer torch fails earlier,
with an ``IndexError`` from ``_get_cuda_arch_flags``, which escapes the guard: every MB module
that imports megatron-core then fails to import and the whole era is untestable.

What: while such a module body executes, and only when CUDA is absent, ``load_inline`` raises
the ``RuntimeError`` MCore's own guard expects (so MCore records "no unified memory", the true
state of a CPU machine). Nothing is compiled, nothing is written under ``~/.cache``; the
stand-in is recorded like the others.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence

from harness.suite import standins

# MCore modules whose body calls load_inline for a CUDA-only extension
WATCHED = ("megatron.core.inference.unified_memory",)
NAME = "cpp_extension.load_inline refuses CUDA builds on CPU"


def _refuse(*args: object, **kwargs: object) -> object:
    standins.record(NAME)
    raise RuntimeError("harness stand-in: no CUDA on this machine, CUDA extension not built")


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:  # importlib's signature
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:  # importlib's signature
        import torch
        import torch.utils.cpp_extension as ext

        if torch.cuda.is_available():
            self.inner.exec_module(module)
            return
        original = ext.load_inline
        ext.load_inline = _refuse  # the module body does ``from torch.utils.cpp_extension import load_inline``
        try:
            self.inner.exec_module(module)
        finally:
            ext.load_inline = original


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in WATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


_installed = False


def install() -> bool:
    """Install the finder once per process."""
    global _installed
    if _installed:
        return False
    sys.meta_path.insert(0, _Finder())
    _installed = True
    return True
