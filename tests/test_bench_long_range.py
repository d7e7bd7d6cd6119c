"""The pure parts of bench/bench_long_range.py: what a ``git bisect run`` step answers, and the
sparse throwaway clone it runs in (on a generated repository; no mirror needed)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
_spec = importlib.util.spec_from_file_location("bench_long_range", ROOT / "bench" / "bench_long_range.py")
assert _spec and _spec.loader
blr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(blr)


def test_step_code_maps_verdicts_to_git_bisect_answers():
    assert blr.step_code({"a": "pass", "b": "fail"}) == 1
    assert blr.step_code({"a": "pass", "b": "error"}) == 1
    assert blr.step_code({"a": "pass", "b": "untestable"}) == 0
    assert blr.step_code({"a": "untestable"}) == 125
    assert blr.step_code({}) == 125  # the suite wrote nothing: skip, never "good"


def test_sparse_clone_materialises_src_and_tests_only(tmp_path):
    repo = tmp_path / "mb"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for rel in ("src/pkg/a.py", "tests/test_a.py", "docs/big.md"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x = 1\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "one"], check=True, env={**os.environ, **env})
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    clone = blr.sparse_clone(repo, tmp_path / "clone", sha)
    assert (clone / "src/pkg/a.py").is_file() and (clone / "tests/test_a.py").is_file()
    assert not (clone / "docs").exists()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == "", "the source repository is only read"


def test_real_bisect_information_limit_counts_one_search_per_target():
    """bench_real_bisect's limit: the two endpoints, then ceil(log2) of each target's range, a target
    being the found cases with one culprit and one start (GOOD, or a late start's commit)."""
    spec = importlib.util.spec_from_file_location("bench_real_bisect", ROOT / "bench" / "bench_real_bisect.py")
    assert spec and spec.loader
    brb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(brb)
    commits = [{"sha": f"{i:040d}"} for i in range(1024)]

    def found(case: str, at: int) -> dict:
        return {"case_id": case, "status": "found", "culprit": {"sha": commits[at]["sha"]}}

    doc = {
        "commits": commits,
        "cases": [found("a", 10), found("b", 10), found("c", 700), found("d", 900), {"case_id": "e"}],
        "late_starts": [{"case_id": "d", "runs_from": commits[767]["sha"]}],  # 256 commits after it
    }
    # targets: (10, GOOD), (700, GOOD), (900, from 767): 10 + 10 + 8 bits, plus the two endpoints
    assert brb.information_limit(doc) == (3, 2 + 10 + 10 + 8)
