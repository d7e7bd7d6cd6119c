"""``--require-gpu``: on a GPU runner, GPU cases that did not run are an environment error.

Without a GPU the GPU suites' cases are UNTESTABLE, and a run in which they are untestable is
green: right on a laptop, wrong on the GPU runner of a nightly, where it means the GPU was not
visible, Transformer Engine is missing or broken, or the suite was dropped. With
``--require-gpu`` (``harness run``, ``harness nightly``; examples/ci/ passes it where
``nvidia-smi`` works), every selected case of a GPU suite must reach a verdict on MB: one that
is UNTESTABLE or ERROR (``environment:`` for a Transformer Engine that does not import) makes
the command exit 2 with one line, after its reports are written so the reason can be read
there too. A GPU suite is a suite file marked ``pytest.mark.gpu``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from harness.errors import EnvironmentProblem, UsageError
from harness.records.results import RunResult
from harness.records.verdict import Verdict

_GPU_MARK = re.compile(r"pytest\.mark\.gpu\b")


def add_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--require-gpu",
        action="store_true",
        help="every GPU case must run (for GPU runners): a GPU case that is untestable or errs here "
        "(no CUDA device, Transformer Engine missing or broken) is an environment error, exit 2",
    )


def gpu_suites(files: list[Path]) -> list[str]:
    """Names of the suites among ``files`` whose cases need a GPU (marked ``pytest.mark.gpu``)."""
    out = []
    for path in files:
        try:
            if _GPU_MARK.search(path.read_text(encoding="utf-8")):
                out.append(path.stem.removeprefix("test_"))
        except OSError:
            continue
    return out


def check_selection(files: list[Path]) -> list[str]:
    """Before the run: ``--require-gpu`` needs a GPU suite among the selected ones."""
    names = gpu_suites(files)
    if not names:
        raise UsageError("--require-gpu: no GPU suite selected (add --suite forward_gpu)")
    return names


def check_result(result: RunResult, suites: list[str]) -> None:
    """After the run (reports written): every case of the GPU ``suites`` reached a verdict on MB."""
    cases = [c for c in result.cases if c.suite in suites]
    if not cases:
        raise EnvironmentProblem(f"--require-gpu: no case of {', '.join(suites)} ran")
    missed = [c for c in cases if c.verdict in (Verdict.UNTESTABLE, Verdict.ERROR)]
    if missed:
        reason = " ".join((missed[0].message or "no reason recorded").split())[:400]
        raise EnvironmentProblem(
            f"--require-gpu: {len(missed)} of {len(cases)} GPU case(s) did not run on this machine "
            f"({missed[0].case_id}: {reason})"
        )
