"""GPU readiness checked on a CPU machine: the CPU forward suite stays on the CPU where CUDA is
available, a broken Transformer Engine is an environment error (never MB's failure),
``--require-gpu`` turns GPU cases that did not run into an exit 2, and the GPU suite's negative
control sees a moved boundary on MB's real batches.

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
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import gpucheck
from harness.errors import EnvironmentProblem, UsageError
from harness.paths import ROOT, mb_location
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.target import Target
from suites._forward import BF16, CONTROL_MARGIN, FP32
from tests import suite_child

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
    from harness.suite.standins import cuda
    from harness.suite.adapters import forward, step

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
    args = [str(SUITES_DIR / "test_forward_cpu.py"), "-p", "harness.suite.plugin", "-p", "no:cacheprovider", "-q"]
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
    keyword = "(test_offline_gpt_step and clean-prompt-mult4) or (vlm_step and chat-cp2-mult4)"
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


BROKEN_TE = {
    "ImportError": "raise ImportError('/opt/te/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so: "
    "undefined symbol: _ZN3c1017RegisterOperatorsD1Ev')",
    "OSError": "raise OSError('/opt/te/libtransformer_engine.so: undefined symbol: cudnnGetVersion')",
}


@pytest.mark.parametrize("kind", sorted(BROKEN_TE))
def test_a_broken_transformer_engine_is_an_environment_error_never_mbs(tmp_path: Path, kind: str) -> None:
    """TE built for another torch, on a (simulated) CUDA machine: the GPU case is ERROR with an
    ``environment:`` reason naming the import error and the fix; never FAIL, never UNTESTABLE."""
    te = tmp_path / "site" / "transformer_engine"
    te.mkdir(parents=True)
    (te / "__init__.py").write_text(BROKEN_TE[kind] + "\n")
    results = tmp_path / "cases.json"
    args = [str(SUITES_DIR / "test_forward_gpu.py"), "-p", "harness.suite.plugin", "-p", "no:cacheprovider", "-q"]
    args += ["-c", str(SUITES_DIR / "pytest.ini"), "--rootdir", str(ROOT), "-W", "ignore"]
    args += ["-k", "clean-prompt-mult1 and not pad", "--harness-results", str(results)]
    args += ["--harness-fixtures", str(FIXTURES_DIR)]
    env = Target().env()
    env["PYTHONPATH"] = f"{tmp_path / 'site'}:{env['PYTHONPATH']}"
    proc = subprocess.run(
        [sys.executable, "-c", SIMULATE_CUDA + RUN_CASES, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert results.exists(), f"no verdicts written: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    (case,) = json.loads(results.read_text())["cases"]
    assert case["verdict"] == "error", case
    assert case["message"].startswith("environment: transformer_engine is installed but does not import"), case
    assert f"{kind}: " in case["message"] and "undefined symbol" in case["message"]
    assert "scripts/setup_gpu.sh" in case["message"]


def _result(*cases: tuple[str, Verdict, str]) -> RunResult:
    return RunResult(
        "r",
        {},
        {},
        {},
        "full",
        cases=[CaseResult(f"{suite}::c{i}", suite, v, message=m) for i, (suite, v, m) in enumerate(cases)],
    )


def test_require_gpu_turns_gpu_cases_that_did_not_run_into_an_environment_error(tmp_path: Path) -> None:
    suites = [ROOT / "suites" / "test_forward_gpu.py", ROOT / "suites" / "test_forward_cpu.py"]
    assert gpucheck.check_selection(suites) == ["forward_gpu"]
    with pytest.raises(UsageError, match="no GPU suite selected"):
        gpucheck.check_selection([ROOT / "suites" / "test_forward_cpu.py"])

    gpucheck.check_result(
        _result(("forward_gpu", Verdict.PASS, ""), ("forward_cpu", Verdict.UNTESTABLE, "x")), ["forward_gpu"]
    )
    gpucheck.check_result(_result(("forward_gpu", Verdict.FAIL, "a verdict on MB")), ["forward_gpu"])
    untestable = _result(
        ("forward_gpu", Verdict.PASS, ""), ("forward_gpu", Verdict.UNTESTABLE, "untestable: no CUDA device visible")
    )
    with pytest.raises(EnvironmentProblem) as info:
        gpucheck.check_result(untestable, ["forward_gpu"])
    assert info.value.exit_code == 2
    assert "1 of 2 GPU case(s) did not run" in info.value.one_line() and "no CUDA device" in info.value.one_line()
    with pytest.raises(EnvironmentProblem, match="environment: transformer_engine"):
        gpucheck.check_result(
            _result(("forward_gpu", Verdict.ERROR, "environment: transformer_engine ...")), ["forward_gpu"]
        )
    with pytest.raises(EnvironmentProblem, match="no case of forward_gpu ran"):
        gpucheck.check_result(_result(("forward_cpu", Verdict.PASS, "")), ["forward_gpu"])


def test_run_require_gpu_needs_a_gpu_suite_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    assert main(["run", "--suite", "packing_algorithms", "--require-gpu"]) == 2
    assert "--require-gpu: no GPU suite selected" in capsys.readouterr().err


@pytest.mark.slow
def test_the_negative_control_sees_a_moved_boundary_on_mbs_batches(tmp_path: Path) -> None:
    """The GPU suite's control, run on the CPU model over MB's real micro-batches: moving one
    boundary by a token moves real-token logits far beyond both tolerances, and a tolerance
    that cannot see it is refused (the case would err, not pass)."""
    _needs_mb()
    script = textwrap.dedent(
        """
        import json
        from suites import _forward, _forward_control, test_forward_gpu as g
        case = next(c for c in g.OFFLINE if c.id == "clean-prompt-mult4")
        res = _forward.cpu_offline(case)
        control = _forward_control.wrong_boundary_error(res, _forward.models()[0])
        note = _forward_control.check_control(res, control, _forward.FP32)
        blind = _forward.Tolerances("blind", control, 1.0, 1.0, 1.0)
        try:
            _forward_control.check_control(res, control, blind)
            refused = ""
        except _forward_control.ToleranceBlind as exc:
            refused = str(exc)
        got = {"noise": res.errors.logits, "control": control, "note": note, "refused": refused}
        print("RESULT=" + json.dumps(got))
        """
    )
    got = suite_child.run(script)
    assert got["noise"] < FP32.logits
    assert got["control"] > 100 * FP32.logits and got["control"] > CONTROL_MARGIN * BF16.logits, got
    assert "one boundary moved by a token" in got["note"] and f"{got['control']:.3g}" in got["note"]
    assert "cannot see a wrong boundary" in got["refused"]


def _setup_gpu(tmp_path: Path, nvidia_smi: str, nvcc_release: str | None) -> subprocess.CompletedProcess[str]:
    """scripts/setup_gpu.sh with stand-in nvidia-smi/nvcc first on PATH, as a dry run (DRY_RUN=1:
    it checks the machine and prints the pip commands, never installs)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{nvidia_smi}\n")
    if nvcc_release:
        (bin_dir / "nvcc").write_text(
            f"#!/bin/sh\necho 'Cuda compilation tools, release {nvcc_release}, V{nvcc_release}.1'\n"
        )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DRY_RUN": "1", "HARNESS_VENV": sys.prefix}
    env.pop("CUDA_HOME", None)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup_gpu.sh")], env=env, capture_output=True, text=True, timeout=300
    )


def _torch_cuda_major() -> int:
    import torch

    if torch.version.cuda is None:
        pytest.skip("this torch is a CPU build: setup_gpu.sh refuses it before looking at nvcc")
    return int(torch.version.cuda.split(".")[0])


def test_setup_gpu_fails_in_one_line_without_a_gpu(tmp_path: Path) -> None:
    proc = _setup_gpu(tmp_path, "exit 9", None)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "setup_gpu.sh: error: nvidia-smi failed: the NVIDIA driver does not answer (nothing installed)"
    ]


def test_setup_gpu_builds_te_for_the_installed_torchs_cuda(tmp_path: Path) -> None:
    major = _torch_cuda_major()
    gpu = "echo 'NVIDIA H100 80GB HBM3, 550.54.15'"
    wrong = _setup_gpu(tmp_path, gpu, f"{major + 1}.0")
    assert wrong.returncode == 2 and f"nvcc is CUDA {major + 1}.0 but torch" in wrong.stderr, wrong.stderr
    right = _setup_gpu(tmp_path, gpu, f"{major}.2")
    assert right.returncode == 0, right.stderr
    assert f"install --no-build-isolation 'transformer_engine[pytorch,core-cu{major}]==" in right.stdout, right.stdout


# --------------------------------------------------------------------------------------------
# examples/ci: a GPU runner never goes green without its GPU cases
# --------------------------------------------------------------------------------------------


def test_nightly_sh_requires_the_gpu_where_nvidia_smi_answers(tmp_path: Path) -> None:
    """nightly.sh with a stand-in harness (records its arguments, exits as harness does when GPU
    cases could not run): --require-gpu is passed on a GPU machine and exit 2 comes through."""
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    args_file = tmp_path / "args"
    (venv_bin / "harness").write_text(f'#!/bin/sh\necho "$@" > {args_file}\nexit 2\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\n")
    for tool in (venv_bin / "harness", bin_dir / "nvidia-smi"):
        tool.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MB": str(tmp_path / "mb"),
        "HARNESS_VENV": str(tmp_path / "venv"),
        "SKIP_SETUP": "1",
        "OUT": str(tmp_path / "out"),
        "HISTORY": str(tmp_path / "history.parquet"),
        "SUITES": "forward_gpu",
    }
    env.pop("REQUIRE_GPU", None)
    script = str(ROOT / "examples" / "ci" / "nightly.sh")
    proc = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--require-gpu" in args_file.read_text().split() and "--suite forward_gpu" in args_file.read_text()
    proc = subprocess.run(["bash", script], env={**env, "REQUIRE_GPU": "0"}, capture_output=True, text=True)
    assert "--require-gpu" not in args_file.read_text().split()


def test_the_gpu_workflow_sets_up_python_and_te_requires_the_gpu_and_keys_caches() -> None:
    import yaml

    doc = yaml.safe_load((ROOT / "examples" / "ci" / "nightly-gpu.yml").read_text())
    steps = doc["jobs"]["nightly"]["steps"]
    by_name = {s.get("name", ""): s for s in steps}
    python = by_name["Python 3.12"]
    assert python["uses"].startswith("actions/setup-python@") and python["with"]["python-version"] == "3.12"
    setup = by_name["Set up (idempotent; reuses the environment in the runner's tool cache)"]
    assert "steps.python.outputs.python-path" in setup["env"]["HARNESS_PYTHON"]
    assert "hashFiles(" in setup["env"]["HARNESS_VENV"] and "./scripts/setup_gpu.sh" in setup["run"]
    assert [s["name"] for s in steps].index("Python 3.12") < [s["name"] for s in steps].index(setup["name"])
    assert "--require-gpu" in by_name["harness nightly"]["run"]
    assert 'exit "$rc"' in by_name["harness nightly"]["run"]
    restore, save = by_name["Restore the history store"], by_name["Save the history store"]
    assert restore["with"]["key"] == save["with"]["key"]
    for part in ("env.MB_REF", "github.run_id", "github.run_attempt"):
        assert part in save["with"]["key"]
    assert restore["with"]["restore-keys"] == "harness-history-${{ env.MB_REF }}-"


@pytest.mark.slow
def test_nightly_with_require_gpu_on_a_machine_without_one_exits_2_after_writing_the_night(tmp_path: Path) -> None:
    _needs_mb()
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the GPU cases may run here")
    out, store = tmp_path / "out", tmp_path / "history.parquet"
    cmd = [sys.executable, "-m", "harness", "nightly", "--suite", "forward_gpu", "--require-gpu", "-q"]
    cmd += ["--out", str(out), "--history", str(store), "--commit", "night-1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("harness: error:")]
    assert "--require-gpu: 6 of 6 GPU case(s) did not run" in line and "no CUDA device" in line
    assert (out / "report.html").exists() and (out / "trend.html").exists() and store.exists()


@pytest.mark.slow
def test_a_gpu_suite_gives_no_verdict_without_cuda_even_on_a_broken_mb(tmp_path: Path) -> None:
    """Issue 23: without CUDA the GPU suite ran its CPU half and reported changed / known-fail /
    fail from it (v0.5.1 with a pinned core). On a copy of MB with a fault the CPU half would see,
    every forward_gpu case is untestable for want of a GPU, and none is a verdict."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the GPU suite runs for real here")
    _needs_mb()
    from harness.commands import mutate
    from harness.mutations import installed_package_dir, load_catalogue

    fault = {f.id: f for f in load_catalogue()}["cu_seqlens_off_by_one"]
    result = mutate.run_copy(fault, tmp_path / "run", ["forward_gpu"], timeout=600, pkg=installed_package_dir())
    assert result is not None and result.cases
    wrong = [(c.case_id, c.verdict.value, c.message[:200]) for c in result.cases if c.verdict is not Verdict.UNTESTABLE]
    assert not wrong, wrong
    assert all("needs a CUDA GPU" in c.message for c in result.cases)
