"""A suite process that died of a fatal signal: whose code was running when it died.

A segfault or an abort inside MB (a C extension it calls, an ``os.abort()``) kills the suite
process without a Python exception, so no verdict is written. pytest's faulthandler plugin
(on by default in every suite process) prints the Python stack of the crashing thread to the
process's output when the signal arrives; the runner keeps the end of that output. Read here
with the same ownership rule as an exception (:mod:`harness.owners`): when the innermost
frame of MB or harness code is MB's, the crash is MB's, a FAIL (``broken: crash``, impact
``crash``) that a bisection can blame; otherwise it stays an ERROR of the harness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.owners import Owner, owner_in, real

_FATAL = re.compile(r"^Fatal Python error: (?P<what>.+)$", re.M)
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ .*\(most recent call first\):", re.M)
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


@dataclass(frozen=True)
class Crash:
    """What killed the process and the innermost MB frame it was running."""

    what: str  # e.g. "Aborted", "Segmentation fault"
    site: str  # "path:line in function"

    def message(self) -> str:
        return f"broken: crash: the suite process died ({self.what}) in MB's {self.site}"


def mb_crash(output: str, mb_roots: tuple[str, ...], harness_roots: tuple[str, ...]) -> Crash | None:
    """The MB crash in ``output`` (a suite process's last output), or None when there is none or
    the innermost project frame of the crashing thread is not MB's."""
    fatal = list(_FATAL.finditer(output))
    if not fatal:
        return None
    last = fatal[-1]
    rest = output[last.end() :]
    start = next((m for m in _THREAD.finditer(rest) if m.group(1) == "Current thread"), None)
    if start is None:
        return None
    mb = tuple(real(r) for r in mb_roots)
    harness = tuple(real(r) for r in harness_roots)
    for line in rest[start.end() :].splitlines()[1:]:
        m = _FRAME.match(line)
        if m is None:
            if line.strip():
                break  # the end of this thread's frames
            continue
        who = owner_in(m.group("file"), mb, harness)  # most recent call first: the innermost wins
        if who is Owner.MEGATRON:
            return Crash(last.group("what").strip(), f"{m.group('file')}:{m.group('line')} in {m.group('func')}")
        if who is Owner.HARNESS:
            return None
    return None


__all__ = ["Crash", "mb_crash"]
