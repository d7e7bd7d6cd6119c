"""A Python snippet run as the suite process runs: in a child with the harness's stand-ins.

Tests that drive suite helpers on real MB (negative controls over MB's own micro-batches) must
not install Transformer Engine's stand-in in the test worker, where it would leak into every
later test; the snippet prints ``RESULT=`` and a JSON value, which is what comes back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from harness.paths import ROOT
from harness.target import Target


def run(script: str, timeout: int = 900) -> Any:
    """The JSON value the snippet printed last after ``RESULT=`` (the child's stderr when none)."""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=Target().env(), capture_output=True, text=True, timeout=timeout
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")]
    assert line, proc.stderr[-3000:]
    return json.loads(line[-1][len("RESULT=") :])
