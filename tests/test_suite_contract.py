"""The one contract between the driver and the suite process (issue 23, item 1).

Before: environment names spelled as literals in eight files, ``"sha-dirty"`` parsed in three,
the case record built as a dict that copied CaseResult, and a second ``python -c`` subprocess
per run to ask the child's versions. These tests fail on that layout and hold on this one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness import contract
from harness.contract import CasesFile, Commit, Env, Flag
from harness.paths import PACKAGE, ROOT
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict

CONTRACT = PACKAGE / "contract.py"


def _string_literals(path: Path) -> list[tuple[int, str]]:
    """String constants of a module's code (docstrings and comments are prose, not a handoff)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_every_handoff_name_is_spelled_only_in_the_contract() -> None:
    env_names = re.compile(r"^HARNESS_[A-Z_]+$")
    flags = {str(f) for f in Flag}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in (CONTRACT, PACKAGE / "records" / "commit.py"):
            continue
        for line, text in _string_literals(path):
            if env_names.match(text) or text in flags or text == Commit.DIRTY:
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {text!r}")
    assert not offenders, "spell these through harness.contract:\n" + "\n".join(offenders)


def test_the_driver_asks_no_second_process_for_versions() -> None:
    runner = (PACKAGE / "suiterun" / "runner.py").read_text(encoding="utf-8")
    assert "python -c" not in runner and '"-c"' not in runner and "subprocess.run" not in runner


def test_commit_is_parsed_in_one_place() -> None:
    assert Commit.parse("abc123-dirty") == Commit("abc123", True)
    assert str(Commit("abc123", True)) == "abc123-dirty" and str(Commit("abc123")) == "abc123"
    assert Commit.parse("") is None and contract.target_commit({}) is None
    assert contract.target_commit({Env.TARGET_COMMIT: "f00d"}) == Commit("f00d", False)
    assert contract.clean_sha("f00d-dirty") == "f00d" and contract.clean_sha(None) is None


def test_cases_file_round_trips_the_one_case_record(tmp_path: Path) -> None:
    case = CaseResult("s::c", "s", Verdict.KNOWN_FAIL, message="m", known=["k"], impacts=["trains-padding"])
    path = tmp_path / "cases.json"
    CasesFile([case], [{"nodeid": "test_s.py", "message": "E"}], {"torch": "2"}, 1.0, 7).save(path)
    again = CasesFile.load(path)
    assert again.cases == [case] and again.versions == {"torch": "2"} and again.pid == 7
    old = tmp_path / "old.json"  # schema 1 (no versions) still reads
    old.write_text('{"kind": "harness-cases", "schema_version": 1, "cases": [], "finished": 0, "pid": 1}')
    assert CasesFile.load(old).versions == {}


FINE = """
import pytest
pytestmark = pytest.mark.import_group("light")
def test_z():
    pass
"""


def test_the_child_writes_the_versions_the_run_records(tmp_path: Path) -> None:
    from tests.test_runner_salvage import _suites_dir, harness_run

    suites = _suites_dir(tmp_path)
    (suites / "test_a.py").write_text(FINE)
    proc, out = harness_run(tmp_path, suites, HARNESS_CORE_PIN="c0ffee" * 7)  # only its child can report it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = contract.read_versions(out / contract.VERSIONS_FILE)
    result = RunResult.load(out / "results.json")
    assert result.versions == written and "c0ffeec0ffee" in written["megatron-core"]
    assert CasesFile.load(contract.cases_file(out, "light")).versions == written
