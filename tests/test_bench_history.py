"""The pure parts of bench/bench_history.py on a generated git history (no mirror needed).

Which commits count as packing fixes merged before the cutoff, which commit the fixed lines
point at, which cases count as detected, and the table the closing note quotes.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_history", ROOT / "bench" / "bench_history.py")
assert _spec and _spec.loader
bh = importlib.util.module_from_spec(_spec)
sys.modules["bench_history"] = bh  # dataclasses look their module up
_spec.loader.exec_module(bh)

DATA = "src/megatron/bridge/data/packing.py"
ORIGINAL = "def mask(x):\n    keep = x != PAD\n    return keep\n"


def _commit(repo: Path, date: str, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    env = os.environ | {
        "GIT_AUTHOR_DATE": f"{date}T12:00:00Z",
        "GIT_COMMITTER_DATE": f"{date}T12:00:00Z",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", message], check=True, env=env)
    return bh.git(repo, "rev-parse", "HEAD").strip()


def _git(repo: Path, *args: str, date: str = "2025-05-01") -> None:
    env = os.environ | {"GIT_COMMITTER_DATE": f"{date}T12:00:00Z", "GIT_AUTHOR_DATE": f"{date}T12:00:00Z"}
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("mb")
    _git(repo, "init", "-q", "-b", "main")
    c = {"root": _commit(repo, "2025-05-01", "readme", {"README.md": "mb\n"})}
    c["base"] = _commit(repo, "2025-06-01", "initial", {DATA: ORIGINAL})
    c["intro"] = _commit(repo, "2025-07-01", "speed up collate", {DATA: ORIGINAL.replace("x != PAD", "x >= 0")})
    c["other"] = _commit(repo, "2025-07-05", "add docs", {DATA: ORIGINAL.replace("x != PAD", "x >= 0") + "# doc\n"})
    fixed = ORIGINAL + "# doc\n"
    c["fix"] = _commit(repo, "2025-08-01", "Fix loss mask for packed rows", {DATA: fixed})
    c["docs_fix"] = _commit(repo, "2025-08-02", "fix packing typo in README", {"README.md": "MB\n"})
    c["no_word"] = _commit(repo, "2025-08-03", "fix logging", {DATA: fixed + "# log\n"})
    c["feature"] = _commit(repo, "2025-08-04", "add packing option", {DATA: fixed + "# log\n# opt\n"})
    _git(repo, "checkout", "-q", "-b", "side")
    c["side"] = _commit(repo, "2026-01-15", "fix pad_seq_to_mult", {"src/megatron/bridge/data/other.py": "x = 1\n"})
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side", date="2026-02-10")
    c["late"] = _commit(repo, "2026-03-01", "fix packing padding", {DATA: fixed + "# late\n"})
    return repo, c


def test_collect_fixes_keeps_packing_fixes_merged_before_the_cutoff(history: tuple[Path, dict[str, str]]) -> None:
    repo, c = history
    fixes = bh.collect_fixes(repo, extra={})
    assert [f.sha for f in fixes] == [c["fix"]]
    assert fixes[0].files == [DATA] and fixes[0].why == "message"
    with_extra = bh.collect_fixes(repo, extra={c["feature"][:9]: ("hidden fix", "opt")})
    assert [(f.sha, f.why, f.lines) for f in with_extra] == [
        (c["fix"], "message", ""),
        (c["feature"], "hidden fix", "opt"),
    ]


def test_side_branch_merged_after_the_cutoff_is_held_out(history: tuple[Path, dict[str, str]]) -> None:
    repo, c = history
    assert c["side"] not in {f.sha for f in bh.collect_fixes(repo, cutoff="2026-02-01", extra={})}
    later = bh.collect_fixes(repo, cutoff="2026-01-20", extra={c["side"]: ("x", "")})  # merged later: still out
    assert c["side"] not in {f.sha for f in later}


def test_cutoff_cannot_move_into_held_out_history(history: tuple[Path, dict[str, str]]) -> None:
    with pytest.raises(SystemExit, match="held out"):
        bh.collect_fixes(history[0], cutoff="2026-03-01")


def test_introducer_is_the_newest_commit_behind_the_fixed_lines(history: tuple[Path, dict[str, str]]) -> None:
    repo, c = history
    (fix,) = bh.collect_fixes(repo, extra={})
    assert bh.propose_introducer(repo, fix) == c["intro"]


def test_detected_needs_fail_at_parent_and_gone_at_fix() -> None:
    parent = {"s::a": "fail", "s::b": "fail", "s::c": "pass", "s::d": "fail", "s::e": "fail"}
    fix = {"s::a": "pass", "s::b": "fail", "s::c": "pass", "s::d": "changed", "s::e": "untestable"}
    with_messages = [{c: (v, "m") for c, v in d.items()} for d in (parent, fix)]
    assert bh.detected_cases(*with_messages) == ["s::a", "s::d"]


def test_a_failure_that_changes_reason_is_explained_not_detected() -> None:
    parent = {"s::a": ("fail", "MB raised TypeError: x\nmore"), "s::b": ("fail", "same")}
    fix = {"s::a": ("fail", "MB raised IndexError: y"), "s::b": ("fail", "same")}
    assert bh.detected_cases(parent, fix) == []
    assert bh.moved_failures(parent, fix) == (
        "; 1 fail at both for another reason, e.g. s::a: 'MB raised TypeError: x' -> 'MB raised IndexError: y'"
    )
    assert bh.moved_failures(parent, parent) == ""


def test_table_counts_and_explains_misses() -> None:
    f1 = bh.Fix("a" * 40, "2025-08-01T00:00:00Z", "Fix loss mask", [DATA])
    f2 = bh.Fix("b" * 40, "2025-09-01T00:00:00Z", "fix chat template", [DATA])
    f3 = bh.Fix("c" * 40, "2025-10-01T00:00:00Z", "fix padding", [DATA])
    rows = [
        bh.Row(f1, detected=["s::a"], eval_s=50, introducer="d" * 40, culprits=["d" * 40], right=True, evaluations=9),
        bh.Row(f2, detected=["s::b"], introducer="e" * 40, right=False, evaluations=7, miss="bisect named fffffffff"),
        bh.Row(f3, miss="no case fails at the parent and passes at the fix"),
    ]
    lines = bh.format_table(rows).splitlines()
    assert lines[2].split()[:7] == ["aaaaaaaaa", "2025-08-01", "1", "ddddddddd", "right", "9", "50"]
    assert lines[3].split()[4] == "wrong" and lines[4].split()[2:5] == ["0", "-", "-"]
    assert lines[5] == "fixes 3, detected 2, bisected to the introducing commit 1"
    assert lines[6:] == [
        "miss bbbbbbbbb: bisect named fffffffff",
        "miss ccccccccc: no case fails at the parent and passes at the fix",
    ]


def test_introducer_blames_only_the_lines_a_hidden_fix_names(history: tuple[Path, dict[str, str]]) -> None:
    repo, c = history
    fix = bh.Fix(c["fix"], "", "", [DATA], lines="PAD")  # the removed line does not match "PAD"
    assert bh.propose_introducer(repo, fix) == ""
    fix.lines = r">= 0"
    assert bh.propose_introducer(repo, fix) == c["intro"]


def test_no_good_commit_before_the_package_existed(history: tuple[Path, dict[str, str]]) -> None:
    repo, c = history
    assert bh.has_package(repo, c["intro"]) and not bh.has_package(repo, f"{c['base']}^")


def test_a_parent_that_cannot_run_most_cases_is_named_in_the_miss() -> None:
    runs = {"s::a": ("untestable", "untestable: no tokenizer\nmore"), "s::b": ("untestable", "untestable: x")}
    runs |= {"s::c": ("untestable", "untestable: no tokenizer"), "s::d": ("pass", "")}
    assert bh.untestable_note(runs) == "; 3 of 4 cases untestable at the parent, mostly 'untestable: no tokenizer'"
    assert bh.untestable_note(runs | {"s::e": ("pass", ""), "s::f": ("fail", "x")}) == ""


def test_a_commit_pins_its_core_by_submodule_or_uv_lock(tmp_path: Path) -> None:
    """Before the submodule (2025-10-15) MB named megatron-core in uv.lock: such a commit runs
    with ``--megatron-lm`` too, not with whatever core is installed."""
    repo = tmp_path / "mb"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    bare = _commit(repo, "2025-08-01", "no pin", {DATA: ORIGINAL})
    entry = (
        '[[package]]\nname = "megatron-core"\nversion = "0.14.0"\nsource = { registry = "https://pypi.org/simple" }\n'
    )
    locked = _commit(repo, "2025-08-02", "lock", {"uv.lock": "version = 1\n\n" + entry})
    assert not bh.pins_core(repo, bare) and bh.pins_core(repo, locked)
