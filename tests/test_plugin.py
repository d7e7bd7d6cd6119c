"""Verdict classification by the pytest plugin, on throw-away suites (no MB needed).

The fake "MB" lives where a bisection puts a commit: under a cache directory whose path has
``harness`` in it. It is MB's code because the runner's roots (``HARNESS_MB_ROOTS``) say so,
not because of words in its path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.paths import ROOT

SUITE = """
import pytest
import torch
from harness.errors import Broken, Untestable
from harness.suite.adapters.step import SizedGroup
from megatron_fake.mod import boom, calls_back, imports_broken_module, imports_missing_dependency
from megatron_fake.mod import pads_badly, reads_attr

def test_pass(golden):
    golden.check({"x": [1, 2, 3]})

def test_golden_mismatch(golden):
    golden.check({"x": [1, 2, 4]})

def test_golden_missing(golden):
    golden.check({"y": 1})

def test_assert():
    assert 1 == 2, "behaviour differs"

def test_untestable():
    raise Untestable("operation missing in this era")

def test_skip():
    pytest.skip("needs CUDA")

def test_harness_bug():
    {}["nope"]

def test_megatron_raised():
    boom()

def test_torch_raised_from_megatron():
    pads_badly()

def test_torch_raised_from_harness():
    torch.nn.functional.pad(torch.zeros(2), (1, 1), mode="nonsense")

def _callback():
    return {}["harness bug reached from MB"]

def test_harness_code_called_by_megatron_raised():
    calls_back(_callback)

def test_mb_reads_what_a_harness_double_lacks():
    reads_attr(SizedGroup(2), "pre_process")

def test_mb_reads_what_its_own_object_lacks():
    reads_attr(boom, "pre_process")

def test_broken():
    raise Broken("import of megatron_fake.packing failed: SyntaxError")

def test_mb_imports_its_broken_module():
    imports_broken_module()

def test_mb_imports_a_missing_dependency():
    imports_missing_dependency()

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_setup_error(broken):
    pass

@pytest.fixture
def built_by_mb():
    boom()

def test_setup_megatron_raised(built_by_mb):
    pass
"""

FAKE_MB = """
import torch

def boom():
    raise ValueError('MB broke')

def pads_badly():
    return torch.nn.functional.pad(torch.zeros(2), (1, 1), mode="nonsense")

def calls_back(fn):
    return fn()

def reads_attr(obj, name):
    return getattr(obj, name)

def imports_broken_module():
    import megatron_fake.broken  # a SyntaxError in MB's own file: the commit is broken

def imports_missing_dependency():
    import harness_test_not_installed_pkg  # a third-party package this environment lacks
"""


def _run(tmp_path: Path, linked: bool = False) -> dict[str, dict]:
    """Run SUITE with the fake MB in a bisect-like workspace (``.../harness/cache/...``);
    ``linked``: MB is imported through a symlink to that tree."""
    suite_dir = tmp_path / "suites"
    suite_dir.mkdir()
    (suite_dir / "test_demo.py").write_text(SUITE)
    src = tmp_path / "home" / "harness" / "cache" / "workspaces" / "0123" / "trees" / "abc" / "src"
    fake = src / "megatron_fake"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "mod.py").write_text(FAKE_MB)
    (fake / "broken.py").write_text("def f(:\n")
    on_path = src
    if linked:
        on_path = tmp_path / "link"
        on_path.symlink_to(src, target_is_directory=True)
    fixtures = tmp_path / "fixtures"
    (fixtures / "demo").mkdir(parents=True)
    from harness.golden.serializer import encode
    from harness.golden.storage import Golden, golden_path, write_golden

    for case in ("test_pass", "test_golden_mismatch"):
        write_golden(golden_path(fixtures, "demo", case), Golden("demo", case, encode({"x": [1, 2, 3]}, {})))
    results = tmp_path / "cases.json"
    env = {"PYTHONPATH": f"{on_path}:{ROOT}", "PATH": "/usr/bin:/bin", "HARNESS_MB_ROOTS": str(fake)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(suite_dir),
            "-p",
            "harness.suite.plugin",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--harness-results",
            str(results),
            "--harness-fixtures",
            str(fixtures),
            "--harness-obtained",
            str(tmp_path / "obtained"),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert results.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(results.read_text())
    return {c["case_id"].split("::")[1]: c for c in doc["cases"]}


EXPECTED = {
    "test_pass": "pass",
    "test_golden_mismatch": "changed",
    "test_golden_missing": "changed",
    "test_assert": "fail",
    "test_untestable": "untestable",
    "test_skip": "untestable",
    "test_harness_bug": "error",
    "test_megatron_raised": "fail",
    "test_setup_error": "error",
    "test_torch_raised_from_megatron": "fail",
    "test_torch_raised_from_harness": "error",
    "test_harness_code_called_by_megatron_raised": "error",
    "test_mb_reads_what_a_harness_double_lacks": "error",
    "test_mb_reads_what_its_own_object_lacks": "fail",
    "test_broken": "fail",
    "test_mb_imports_its_broken_module": "fail",
    "test_mb_imports_a_missing_dependency": "untestable",
    "test_setup_megatron_raised": "fail",
}


def test_each_outcome_gets_its_verdict(tmp_path):
    cases = _run(tmp_path)
    verdicts = {k: v["verdict"] for k, v in cases.items()}
    assert verdicts == EXPECTED
    assert "first at index [2]" in cases["test_golden_mismatch"]["diff"]
    mm = cases["test_golden_mismatch"]["diff_data"]["mismatches"][0]
    assert mm["expected_row"] == [1, 2, 3] and mm["obtained_row"] == [1, 2, 4]
    assert "operation missing in this era" in cases["test_untestable"]["message"]
    assert "Megatron raised ValueError" in cases["test_megatron_raised"]["message"]
    assert "harness error KeyError" in cases["test_harness_bug"]["message"]
    assert "Megatron raised NotImplementedError" in cases["test_torch_raised_from_megatron"]["message"]
    assert "a harness test double" in cases["test_mb_reads_what_a_harness_double_lacks"]["message"]
    assert cases["test_broken"]["message"].startswith("broken: import of megatron_fake.packing failed")
    broken_import = cases["test_mb_imports_its_broken_module"]["message"]
    assert broken_import.startswith("broken: import of ") and "SyntaxError" in broken_import, broken_import
    missing = cases["test_mb_imports_a_missing_dependency"]["message"]
    assert "missing dependency 'harness_test_not_installed_pkg'" in missing, missing


def test_ownership_follows_symlinks(tmp_path):
    """MB imported through a symlinked path is still MB (roots and frames compared resolved)."""
    verdicts = {k: v["verdict"] for k, v in _run(tmp_path, linked=True).items()}
    assert verdicts == EXPECTED


def test_missing_golden_writes_obtained_not_golden(tmp_path):
    cases = _run(tmp_path)
    assert "no golden" in cases["test_golden_missing"]["message"]
    assert (tmp_path / "obtained" / "demo" / "test_golden_missing.json").exists()
    assert not (tmp_path / "fixtures" / "demo" / "test_golden_missing.json").exists(), "a run never writes goldens"


def test_torch_refusing_a_device_tensor_blames_the_caller_not_the_host_read_counter(tmp_path):
    """MB's step handles device-resident tensors (the host-read counter's subclass): torch refusing
    an operation MB asked of one is MB's failure, and one the harness asked of one the harness's."""
    import torch

    from harness.suite import ownership
    from harness.suite.adapters import hostsync

    def raised_in(filename: str) -> ownership.Owner:
        namespace: dict = {}
        exec(compile("def view(t):\n    return t.view(3, 7)\n", filename, "exec"), namespace)
        try:
            namespace["view"](hostsync.on_device(torch.zeros(5)))
        except RuntimeError as exc:
            return ownership.blame(exc.__traceback__, mb_roots=(str(tmp_path),))
        raise AssertionError("torch accepted a view of 5 elements as 3 x 7")

    assert raised_in(str(tmp_path / "megatron_step.py")) is ownership.Owner.MEGATRON
    assert raised_in(str(ownership.PACKAGE / "suite" / "adapters" / "batch.py")) is ownership.Owner.HARNESS
