"""GPU readiness checked on a CPU machine: the CPU forward suite stays on the CPU where CUDA is
available, and a broken Transformer Engine is an environment error, never MB's failure.

CUDA is simulated in a child process: ``torch.cuda.is_available()`` answers True (so every
``if torch.cuda.is_available()`` in torch, megatron-core, MB and the harness takes its GPU
branch) while ``Tensor.cuda()``, ``torch.cuda.current_device()`` and ``torch.cuda.synchronize()``
raise, and a real CUDA allocation fails as always here (no driver). A path that would put the
tiny CPU model's batch on a GPU therefore raises instead of passing silently. The control run
removes the pin and must fail the same case: it shows the simulation is strong enough to see an
unpinned path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.paths import ROOT
from harness.target import Target, mb_location

SIMULATE_CUDA = textwrap.dedent(
    """
    import torch

    def _refuse(name):
        def refuse(*args, **kwargs):
            raise RuntimeError(f"CUDA touched: {name} (the CPU forward must be pinned to the CPU)")
        return refuse

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.Tensor.cuda = _refuse("Tensor.cuda")
    torch.cuda.current_device = _refuse("torch.cuda.current_device")
    torch.cuda.synchronize = _refuse("torch.cuda.synchronize")
    """
)

UNPIN = textwrap.dedent(
    """
    import contextlib
    from harness.standins import cuda
    from harness.adapters import forward, step

    _calls, _mask = cuda.cpu_cuda_calls, cuda.cpu_causal_mask
    cuda.cpu_cuda_calls = lambda pin=False: _calls()
    cuda.cpu_causal_mask = lambda pin=False: _mask()
    forward.cpu_cuda_calls = cuda.cpu_cuda_calls
    """
)

SUITES_DIR, FIXTURES_DIR = ROOT / "suites", ROOT / "fixtures"  # the checkout's, which these tests run from

RUN_CASES = textwrap.dedent(
    """
    import sys
    import pytest
    sys.exit(pytest.main(sys.argv[1:]))
    """
)


def _needs_mb() -> None:
    if mb_location() is None:
        pytest.skip("megatron.bridge is not installed here")


def _run_forward_cpu(tmp_path: Path, keyword: str, *, unpin: bool) -> dict[str, dict]:
    """Selected forward_cpu cases in a child with CUDA simulated; verdicts by case id."""
    results = tmp_path / ("unpinned.json" if unpin else "pinned.json")
    script = SIMULATE_CUDA + (UNPIN if unpin else "") + RUN_CASES
    args = [str(SUITES_DIR / "test_forward_cpu.py"), "-p", "harness.plugin", "-p", "no:cacheprovider", "-q"]
    args += ["-c", str(SUITES_DIR / "pytest.ini"), "--rootdir", str(ROOT), "-k", keyword, "-W", "ignore"]
    args += ["--harness-results", str(results), "--harness-fixtures", str(FIXTURES_DIR)]
    env = Target().env(tmp_path / "standins.log")
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert results.exists(), f"no verdicts written: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    doc = json.loads(results.read_text())
    return {c["case_id"]: c for c in doc["cases"]}


@pytest.mark.slow
def test_cpu_forward_stays_on_the_cpu_where_cuda_is_available(tmp_path: Path) -> None:
    _needs_mb()
    keyword = "clean-prompt-mult4 or chat-cp2-mult4"
    pinned = _run_forward_cpu(tmp_path, keyword, unpin=False)
    assert len(pinned) == 2, sorted(pinned)
    for case_id, case in pinned.items():
        assert case["verdict"] == "pass", f"{case_id}: {case['verdict']}: {case['message'][:800]}"
    used = (tmp_path / "standins.log").read_text()
    assert "Tensor.cuda() no-op on CPU" in used, "MB's .cuda() was not reached: the pin was not exercised"

    unpinned = _run_forward_cpu(tmp_path, keyword, unpin=True)
    for case_id, case in unpinned.items():  # the control: without the pin the simulation catches it
        assert case["verdict"] != "pass", f"{case_id} passed unpinned: the simulation cannot see the GPU path"
        assert "CUDA touched" in case["message"] or "NVIDIA driver" in case["message"], case["message"][:800]
