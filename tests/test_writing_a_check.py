"""docs/writing-a-check.md's worked example, run as written (slow: the installed MB, three runs).

Why: the page is how a newcomer adds a check; its claim (two files: the suite and its golden; the
check proven by a catalogue fault) is only worth something while the harness does what the page
says. So the page's code blocks are the input here: the suite block is written into a copy of
``suites/``, its golden recorded through the reviewed command into an empty fixtures root, the
suite run, and the fault block applied to a broken copy of the installed MB.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.commands import mutate
from harness.mutations import installed_package_dir, load_catalogue
from harness.records.results import RunResult

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "writing-a-check.md"
SUITE = "worked_example"


def _block(marker: str) -> str:
    """The fenced code block right after ``<!-- worked-example:MARKER -->`` in the page."""
    found = re.search(rf"<!-- worked-example:{marker} -->\n```\w*\n(.*?)```", DOC.read_text(), re.S)
    assert found, f"{DOC.name} has no worked-example:{marker} block"
    return found.group(1)


def test_the_pages_check_records_its_golden_passes_and_turns_red_on_the_pages_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One test, in the page's order (the fault's baseline needs the golden the record step wrote)."""
    try:
        pkg = installed_package_dir()
    except RuntimeError:
        pytest.skip("megatron.bridge is not installed here")
    suites, fixtures = tmp_path / "suites", tmp_path / "fixtures"
    shutil.copytree(ROOT / "suites", suites, ignore=shutil.ignore_patterns("__pycache__", "test_*.py"))
    (suites / f"test_{SUITE}.py").write_text(_block("suite"))
    fixtures.mkdir()
    where = ["--suite", SUITE, "--suites-dir", str(suites), "--fixtures", str(fixtures), "-q"]

    assert cli.main(["fixtures", "record", "--yes", *where]) == 0  # file 2: its golden
    goldens = sorted(p.relative_to(fixtures).as_posix() for p in fixtures.rglob("*.json"))
    assert goldens == [f"{SUITE}/test_first_fit_decreasing_places_every_sequence_once.json"], goldens

    assert cli.main(["run", "--out", str(tmp_path / "run"), *where]) == 0
    result = RunResult.load(tmp_path / "run" / "results.json")
    assert [(c.case_id.split("::")[-1], c.verdict.value) for c in result.cases] == [
        ("test_first_fit_decreasing_places_every_sequence_once", "pass")
    ]

    monkeypatch.setenv("HARNESS_SUITES_DIR", str(suites))  # harness mutate's suites and goldens
    monkeypatch.setenv("HARNESS_FIXTURES_DIR", str(fixtures))
    named = json.loads(_block("fault"))
    fault = dataclasses.replace({f.id: f for f in load_catalogue()}[named["id"]], suites=tuple(named["suites"]))
    _, evidence = mutate.run_baseline(tmp_path / "baseline", [SUITE], timeout=600, pkg=pkg)
    row = mutate.score_fault(fault, evidence, tmp_path / "mutants", all_suites=False, timeout=600, pkg=pkg)
    assert row.status == "caught", row
    reasons = [r for rs in row.invariant_cases.values() for r in rs]
    assert any("in no bin" in r for r in reasons), reasons
