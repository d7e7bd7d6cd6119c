"""Verdict classification by the pytest plugin, on throw-away suites (no MB needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.paths import ROOT

SUITE = """
import pytest
from harness.plugin import Untestable
from megatron_fake.mod import boom

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

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_setup_error(broken):
    pass
"""


def _run(tmp_path: Path) -> dict[str, dict]:
    suite_dir = tmp_path / "suites"
    suite_dir.mkdir()
    (suite_dir / "test_demo.py").write_text(SUITE)
    fake = tmp_path / "lib" / "megatron" / "megatron_fake"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "mod.py").write_text("def boom():\n    raise ValueError('MB broke')\n")
    fixtures = tmp_path / "fixtures"
    (fixtures / "demo").mkdir(parents=True)
    from harness.golden.serializer import encode
    from harness.golden.storage import Golden, golden_path, write_golden

    for case in ("test_pass", "test_golden_mismatch"):
        write_golden(golden_path(fixtures, "demo", case), Golden("demo", case, encode({"x": [1, 2, 3]}, {})))
    results = tmp_path / "cases.json"
    env_path = f"{tmp_path / 'lib' / 'megatron'}:{ROOT}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(suite_dir),
            "-p",
            "harness.plugin",
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
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    doc = json.loads(results.read_text())
    return {c["case_id"].split("::")[1]: c for c in doc["cases"]}


def test_each_outcome_gets_its_verdict(tmp_path):
    cases = _run(tmp_path)
    verdicts = {k: v["verdict"] for k, v in cases.items()}
    assert verdicts == {
        "test_pass": "pass",
        "test_golden_mismatch": "changed",
        "test_golden_missing": "changed",
        "test_assert": "fail",
        "test_untestable": "untestable",
        "test_skip": "untestable",
        "test_harness_bug": "error",
        "test_megatron_raised": "fail",
        "test_setup_error": "error",
    }
    assert "first at index [2]" in cases["test_golden_mismatch"]["diff"]
    mm = cases["test_golden_mismatch"]["diff_data"]["mismatches"][0]
    assert mm["expected_row"] == [1, 2, 3] and mm["obtained_row"] == [1, 2, 4]
    assert "operation missing in this era" in cases["test_untestable"]["message"]
    assert "Megatron raised ValueError" in cases["test_megatron_raised"]["message"]
    assert "harness error KeyError" in cases["test_harness_bug"]["message"]


def test_missing_golden_writes_obtained_not_golden(tmp_path):
    cases = _run(tmp_path)
    assert "no golden" in cases["test_golden_missing"]["message"]
    assert (tmp_path / "obtained" / "demo" / "test_golden_missing.json").exists()
    assert not (tmp_path / "fixtures" / "demo" / "test_golden_missing.json").exists(), "a run never writes goldens"
