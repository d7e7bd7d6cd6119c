"""CPU stand-ins for CUDA-only pieces that Megatron-Bridge imports or calls unguarded.

Each stand-in is scoped (active only where it is needed) and recorded: the names of the
stand-ins used in a process are appended to the file named by ``HARNESS_STANDINS_LOG`` so the
run results and reports can list them. Nothing here changes MB's behaviour under test: the
stand-ins only replace code that cannot exist on a machine without CUDA.
"""

from __future__ import annotations

import os
import threading

from harness.contract import Env

_lock = threading.Lock()
_used: set[str] = set()


def record(name: str) -> None:
    """Remember that stand-in ``name`` was used in this process (once per process)."""
    with _lock:
        if name in _used:
            return
        _used.add(name)
    log = os.environ.get(Env.STANDINS_LOG)
    if log:
        try:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(name + "\n")
        except OSError:
            pass


def used() -> list[str]:
    with _lock:
        return sorted(_used)
