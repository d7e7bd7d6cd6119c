"""The plugin as a ``pytest11`` entry point: loaded by every pytest in the environment, inert
where nobody asked for it, and ``--harness-regen`` rewriting goldens in place."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.paths import ROOT, mb_location


def pytest_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_plugin_is_a_pytest11_entry_point() -> None:
    """Looked up as pytest does (every distribution: a stale harness.egg-info in the checkout
    must not hide the installed one)."""
    found = {(ep.name, ep.value) for d in md.distributions() for ep in d.entry_points if ep.group == "pytest11"}
    assert ("harness.suite.plugin", "harness.suite.plugin") in found, "reinstall the harness (pip install -e .)"


OTHER_PROJECT_TESTS = """
import pytest

def test_ok():
    assert True

def test_fails():
    assert 1 == 2
"""

MARKED = """
import pytest

@pytest.mark.gpu
def test_marked():
    pass
"""

OTHER_PROJECT_CONFTEST = """
import json, os, sys

def pytest_configure(config):
    heavy = [m for m in ("numpy", "torch", "pandas", "git") if m in sys.modules]
    with open(os.environ["PROBE"], "w") as fh:
        json.dump({"loaded": config.pluginmanager.has_plugin("harness.suite.plugin"), "heavy": heavy}, fh)
"""


def test_another_projects_pytest_is_untouched(tmp_path: Path, monkeypatch) -> None:
    """Loaded, but no verdict properties, no markers, no classification: the project's own
    ``pytest`` (testpaths=tests) and anyone else's run as if the plugin were absent."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\n")
    (tmp_path / "conftest.py").write_text(OTHER_PROJECT_CONFTEST)
    (tmp_path / "test_other.py").write_text(OTHER_PROJECT_TESTS)
    (tmp_path / "test_marked.py").write_text(MARKED)
    monkeypatch.setenv("PROBE", str(tmp_path / "probe.json"))
    proc = pytest_run(["-q", "--junitxml", str(tmp_path / "junit.xml"), "test_other.py"], tmp_path)
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe == {"loaded": True, "heavy": []}, "loaded through the entry point, importing nothing heavy"
    assert proc.returncode == 1 and "1 failed, 1 passed" in proc.stdout, proc.stdout
    props = [p.attrib["name"] for p in ET.parse(tmp_path / "junit.xml").iter("property")]
    assert props == [], "no harness verdict properties in someone else's JUnit"
    assert "--harness-regen" in pytest_run(["--help"], tmp_path).stdout, "its options are there, unused"
    marked = pytest_run(["-q", "test_marked.py"], tmp_path)  # the plugin registered none of its markers
    assert marked.returncode == 2 and "'gpu' not found in `markers`" in marked.stdout, marked.stdout


REGEN_SUITE = """
import os

def test_value(golden):
    golden.check({"x": [1, 2, int(os.environ["VALUE"])]})

def test_fixed(golden):
    golden.check({"y": 7})
"""


def test_harness_regen_rewrites_changed_goldens_in_place(tmp_path: Path, monkeypatch) -> None:
    suites, fixtures = tmp_path / "suites", tmp_path / "fixtures"
    suites.mkdir()
    (suites / "pytest.ini").write_text("[pytest]\nharness_suites = true\n")
    (suites / "test_demo.py").write_text(REGEN_SUITE)
    args = ["-q", "suites", "--harness-fixtures", str(fixtures), "--harness-obtained", str(tmp_path / "obtained")]
    value_golden = fixtures / "demo" / "test_value.json"

    monkeypatch.setenv("VALUE", "3")
    first = pytest_run(args, tmp_path)
    assert first.returncode == 1 and "2 failed" in first.stdout and not value_golden.exists(), "no golden: CHANGED"
    regen = pytest_run(args + ["--harness-regen"], tmp_path)
    assert (
        regen.returncode == 1 and "2 failed" in regen.stdout and "new golden written (--harness-regen)" in regen.stdout
    )
    assert value_golden.is_file() and (fixtures / "demo" / "test_fixed.json").is_file()
    assert pytest_run(args, tmp_path).returncode == 0, "the written goldens hold"

    fixed_before = (fixtures / "demo" / "test_fixed.json").read_bytes()
    monkeypatch.setenv("VALUE", "4")
    assert pytest_run(args, tmp_path).returncode == 1, "a changed value fails without --harness-regen"
    regen = pytest_run(args + ["--harness-regen"], tmp_path)
    out = regen.stdout
    assert regen.returncode == 1 and "1 failed, 1 passed" in out and "golden regenerated (--harness-regen)" in out
    assert "3" in out and "4" in out, "the failure shows what changed"
    assert pytest_run(args, tmp_path).returncode == 0
    assert (fixtures / "demo" / "test_fixed.json").read_bytes() == fixed_before, "an unchanged golden is not touched"


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return h.hexdigest()


@pytest.mark.slow
@pytest.mark.skipif(mb_location() is None, reason="no megatron.bridge installed (run scripts/setup.sh)")
def test_plain_pytest_on_the_suites_uses_the_harness_goldens(tmp_path: Path) -> None:
    """``pytest suites/`` reads fixtures/ (it used to look for suites/fixtures, the ini's
    directory, and fail every case), and --harness-regen leaves goldens that hold alone."""
    before = _digest(ROOT / "fixtures" / "cp_constraints")
    args = ["-q", "suites/test_cp_constraints.py", "--harness-obtained", str(tmp_path / "obtained")]
    proc = pytest_run(args + ["--harness-regen"], ROOT)
    assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout + proc.stderr
    assert _digest(ROOT / "fixtures" / "cp_constraints") == before
