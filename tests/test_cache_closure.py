"""The verdict cache key covers all the code a suite process runs (issues 23 and 46).

A hand-kept list of directories left 18 of the modules a suite process imports out of the key
(the oracle among them): a changed invariant reused verdicts computed by the old one. The key is
now the suite package, the ground floor and the suites, closed by construction
(``tests/test_architecture.py`` checks the seam).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import paths
from harness.bisect import closure
from harness.bisect.evaluator import MBEvaluator

MUST = (
    "harness/suite/oracle/differential.py",
    "harness/suite/oracle/boundaries.py",
    "harness/records/impact.py",
    "harness/suite/outcome.py",
    "harness/suite/ownership.py",
    "harness/suite/known.py",
    "harness/features.py",
    "harness/records/verdict.py",
    "harness/suite/adapters/sft.py",
    "harness/suite/standins/te.py",
    "suites/_sftcases.py",
)


def test_the_key_holds_every_module_that_decides_a_verdict():
    files = {str(f.relative_to(paths.ROOT)) for f in closure.suite_process_files()}
    missing = [m for m in MUST if m not in files]
    assert not missing, missing
    assert "harness/commands/matrix.py" not in files, "a module the suite process never imports stays out"


@pytest.fixture
def copied_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of harness/, suites/ and a small fixtures dir, with paths pointed at it."""
    root = tmp_path / "tree"
    shutil.copytree(paths.PACKAGE, root / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(paths.suites_dir(), root / "suites", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "fixtures").mkdir()
    (root / "fixtures" / "known_failures.json").write_text("{}")
    monkeypatch.setattr(paths, "PACKAGE", root / "harness")
    monkeypatch.setattr(paths, "suites_dir", lambda: root / "suites")
    monkeypatch.setattr(paths, "fixtures_dir", lambda: root / "fixtures")
    return root


def test_changing_one_oracle_function_changes_the_cache_key(copied_tree: Path, tmp_path: Path):
    ev = MBEvaluator(tmp_path / "repo", tmp_path / "ws", tmp_path / "runs")
    before = ev.cache_namespace()
    target = copied_tree / "harness" / "suite" / "oracle" / "boundaries.py"
    text = target.read_text()
    assert "if logical_len == seg.real:" in text
    target.write_text(text.replace("if logical_len == seg.real:", "if logical_len >= seg.real:"))
    changed = ev.cache_namespace()
    assert changed[0] != before[0], "an invariant changed: verdicts it decided must not be reused"
    unrelated = copied_tree / "harness" / "commands" / "matrix.py"
    unrelated.write_text(unrelated.read_text() + "\n# a comment in code no suite process imports\n")
    assert ev.cache_namespace() == changed, "driver code, which no suite process imports, does not invalidate the cache"
