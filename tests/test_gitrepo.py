"""The git driver against real temporary repositories built at test time."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.errors import GitError, UsageError
from harness.repository.gitrepo import GitRepo, open_repo
from harness.repository.workspaces import WorkspaceCache

GITLINK = "1234567890abcdef1234567890abcdef12345678"


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No user/system git config leaks in; commits get fixed identities."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "Ada Tester")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "ada@example.com")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def write(repo: Path, rel: str, text: str) -> None:
    p = repo / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def commit(repo: Path, msg: str, files: dict[str, str]) -> str:
    for rel, text in files.items():
        write(repo, rel, text)
    git(repo, "add", "--", *files)
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD")


@dataclass
class Repo:
    """History: c0 - c1 - c2 - M - c3 on main, side s1 forked at c1 and merged by M."""

    path: Path
    c0: str
    c1: str
    c2: str
    s1: str
    merge: str
    c3: str


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    path = tmp_path / "user"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    c0 = commit(
        path,
        "start",
        {"src/pkg/a.py": "A = 0\n", "pyproject.toml": "[project]\nname='x'\n", "docs/big.txt": "x" * 1000},
    )
    git(path, "tag", "v0")
    c1 = commit(path, "add tests", {"src/pkg/a.py": "A = 1\n", "tests/test_a.py": "def test(): pass\n"})
    git(path, "update-index", "--add", "--cacheinfo", f"160000,{GITLINK},3rdparty/Megatron-LM")
    (path / "3rdparty/Megatron-LM").mkdir(parents=True)  # an uninitialised submodule, as after a plain clone
    git(path, "commit", "-q", "-m", "pin submodule")
    git(path, "checkout", "-q", "-b", "side")
    s1 = commit(path, "side work", {"src/pkg/side.py": "S = 1\n"})
    git(path, "checkout", "-q", "main")
    c2 = commit(path, "main work", {"src/pkg/b.py": "B = 2\n", "README": "readme\n"})
    git(path, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(path, "rev-parse", "HEAD")
    c3 = commit(path, "break A", {"src/pkg/a.py": "A = 3\n", "docs/notes.txt": "n\n"})
    git(path, "tag", "-a", "-m", "release", "v3")
    return Repo(path, c0, c1, c2, s1, merge, c3)


def snapshot(path: Path) -> dict[str, str]:
    """Hash of every file under the repository, .git included (HEAD, index, refs, config)."""
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            f = Path(root) / name
            out[str(f.relative_to(path))] = hashlib.sha256(f.read_bytes()).hexdigest()
        for d in dirs:
            out[str((Path(root) / d).relative_to(path)) + "/"] = "dir"
    return out


# ------------------------------------------------------------------ open/resolve


def test_open_repo_rejects_non_repositories(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for bad in (plain, tmp_path / "missing"):
        with pytest.raises(GitError) as info:
            open_repo(bad)
        assert info.value.one_line() == f"harness: error: not a git repository: {bad}"


def test_open_repo_from_subdirectory(repo: Repo) -> None:
    r = open_repo(repo.path / "src")
    assert r.path == repo.path.resolve()
    assert not r.bare


def test_resolve_tags_short_hashes_and_expressions(repo: Repo) -> None:
    r = open_repo(repo.path)
    assert r.resolve("v0") == repo.c0
    assert r.resolve("v3") == repo.c3, "annotated tags peel to the commit"
    assert r.resolve(repo.c1[:8]) == repo.c1
    assert r.resolve("main~1") == repo.merge
    assert r.resolve("side") == repo.s1


@pytest.mark.parametrize("ref", ["nope", "v9", "deadbeef", "--all", ""])
def test_unknown_ref_is_a_one_line_usage_error(repo: Repo, ref: str) -> None:
    r = open_repo(repo.path)
    with pytest.raises(UsageError) as info:
        r.resolve(ref)
    line = info.value.one_line()
    assert "\n" not in line
    assert line == f"harness: error: unknown ref {ref!r} in {repo.path.resolve()}"


# ------------------------------------------------------------------ ranges


def test_check_range_rejects_non_ancestor_and_empty(repo: Repo) -> None:
    r = open_repo(repo.path)
    assert r.check_range("v0", "v3") == (repo.c0, repo.c3)
    with pytest.raises(UsageError, match="not an ancestor"):
        r.check_range("v3", "v0")
    with pytest.raises(UsageError, match="not an ancestor"):
        r.check_range(repo.s1, repo.c2)  # siblings
    with pytest.raises(UsageError, match="empty range"):
        r.check_range("main", repo.c3)


def test_commits_between_first_parent_vs_ancestry_path(repo: Repo) -> None:
    r = open_repo(repo.path)
    pin = r.resolve("main~3")  # the "pin submodule" commit, where side forks
    fp = r.commits_between(repo.c1, repo.c3, first_parent=True)
    assert fp == [repo.c1, pin, repo.c2, repo.merge, repo.c3]
    full = r.commits_between(repo.c1, repo.c3)
    assert full[0] == repo.c1 and full[-1] == repo.c3
    assert set(full) == {repo.c1, pin, repo.c2, repo.s1, repo.merge, repo.c3}
    for i, sha in enumerate(full[1:], start=1):  # topological: parents come first
        assert all(p not in full[i:] for p in r.parents(sha))


def test_commits_between_from_a_side_commit(repo: Repo) -> None:
    r = open_repo(repo.path)
    assert r.commits_between(repo.s1, repo.c3) == [repo.s1, repo.merge, repo.c3]
    with pytest.raises(UsageError, match="first-parent"):
        r.commits_between(repo.s1, repo.c3, first_parent=True)


def test_ancestry_path_excludes_branches_forked_before_good(repo: Repo) -> None:
    r = open_repo(repo.path)
    assert repo.s1 not in r.commits_between(repo.c2, repo.c3)
    assert r.commits_between(repo.c2, repo.c3) == [repo.c2, repo.merge, repo.c3]


# ------------------------------------------------------------------ content


def test_commit_info_and_diff(repo: Repo) -> None:
    r = open_repo(repo.path)
    info = r.commit_info(repo.c3)
    assert (info.sha, info.subject, info.author, info.email) == (repo.c3, "break A", "Ada Tester", "ada@example.com")
    assert info.files == ("src/pkg/a.py",), "only files under src/"
    assert info.parents == (repo.merge,)
    assert info.date[:4].isdigit() and "T" in info.date
    root = r.commit_info(repo.c0)
    assert root.parents == () and root.files == ("src/pkg/a.py",)
    assert r.commit_info(repo.merge).files == ("src/pkg/side.py",), "merges diff against the first parent"
    patch = r.diff(repo.c3, ["src"])
    assert "-A = 1" in patch and "+A = 3" in patch
    assert "notes" not in patch
    assert "notes.txt" in r.diff(repo.c3, ["docs"])


def test_submodule_pin(repo: Repo) -> None:
    r = open_repo(repo.path)
    assert r.submodule_pin(repo.c3) == GITLINK
    assert r.submodule_pin(repo.c1) is None
    assert r.submodule_pin(repo.c3, path="src") is None, "a directory is not a gitlink"


def test_is_dirty(repo: Repo) -> None:
    r = open_repo(repo.path)
    assert not r.is_dirty()
    write(repo.path, "untracked.txt", "u")
    assert not r.is_dirty()
    assert r.is_dirty(include_untracked=True)
    write(repo.path, "src/pkg/a.py", "A = 'edited'\n")
    assert r.is_dirty()
    assert any("src/pkg/a.py" in line for line in r.dirty_files())


def test_no_checkout_clone_is_not_dirty(repo: Repo, tmp_path: Path) -> None:
    """A ``git clone --no-checkout`` (how bisect users and our own docs make a clone to bisect in)
    has no index and an empty working tree: no "uncommitted changes", even with a few of its
    directories materialised by ``git archive``; an edit after a checkout still counts."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(repo.path), str(clone)], check=True)
    r = open_repo(clone)
    assert git(clone, "status", "--porcelain").strip(), "git itself lists every file as deleted"
    assert not r.is_dirty() and r.dirty_files() == []
    assert not r.checked_out()
    archive = subprocess.run(["git", "-C", str(clone), "archive", "HEAD", "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(clone)], input=archive.stdout, check=True)
    assert not r.is_dirty(include_untracked=True)
    git(clone, "checkout", "-q", "HEAD", "--", ".")  # now it is a checkout: edits are changes again
    assert r.checked_out() and not r.is_dirty()
    write(clone, "src/pkg/a.py", "A = 'edited'\n")
    assert r.is_dirty()


def test_linked_worktree_is_a_checkout(repo: Repo, tmp_path: Path) -> None:
    """The index of a linked worktree lives under .git/worktrees/NAME, not in the worktree."""
    wt = tmp_path / "wt"
    git(repo.path, "worktree", "add", "-q", str(wt), repo.c1)
    r = open_repo(wt)
    assert r.checked_out() and not r.is_dirty()
    write(wt, "src/pkg/a.py", "A = 'edited'\n")
    assert r.is_dirty()


# ------------------------------------------------------------------ workspaces


def test_materialize_per_commit_contents(repo: Repo, tmp_path: Path) -> None:
    cache = WorkspaceCache(tmp_path / "cache", repo.path)
    t0 = cache.materialize("v0")
    assert t0.name == repo.c0
    assert (t0 / "src/pkg/a.py").read_text() == "A = 0\n"
    assert not (t0 / "tests").exists(), "tests/ did not exist yet at c0"
    assert not (t0 / "docs").exists(), "only src, tests and pyproject.toml are materialised"
    t3 = cache.materialize(repo.c3[:10])
    assert (t3 / "src/pkg/a.py").read_text() == "A = 3\n"
    assert (t3 / "src/pkg/side.py").read_text() == "S = 1\n"
    assert (t3 / "tests/test_a.py").exists()
    assert (t3 / "pyproject.toml").exists()
    assert not (t3 / "3rdparty").exists()
    marker = t3 / "src/pkg/marker"
    marker.write_text("kept")
    assert cache.materialize(repo.c3) == t3 and marker.exists(), "cached by sha, not rebuilt"
    cache.cleanup(repo.c3)
    assert not t3.exists()
    assert (cache.materialize(repo.c3) / "src/pkg/a.py").read_text() == "A = 3\n"
    assert not list(cache.trees.glob(".tmp-*")), "no temporary directories left behind"


def test_materialize_fetches_commits_made_after_the_mirror(repo: Repo, tmp_path: Path) -> None:
    cache = WorkspaceCache(tmp_path / "cache", repo.path)
    cache.materialize(repo.c0)
    newer = commit(repo.path, "later", {"src/pkg/a.py": "A = 4\n"})
    fresh = WorkspaceCache(tmp_path / "cache", repo.path)  # a later run reuses the mirror
    assert (fresh.materialize(newer) / "src/pkg/a.py").read_text() == "A = 4\n"


def test_materialize_unreachable_commit_is_a_git_error(repo: Repo, tmp_path: Path) -> None:
    cache = WorkspaceCache(tmp_path / "cache", repo.path)
    cache.sync()
    git(repo.path, "checkout", "-q", "--detach")
    dangling = commit(repo.path, "detached", {"src/pkg/d.py": "D\n"})
    with pytest.raises(GitError, match="not reachable"):
        cache.materialize(dangling)


def test_stale_temp_dirs_from_killed_runs_are_removed(repo: Repo, tmp_path: Path) -> None:
    trees = tmp_path / "cache" / "trees"
    stale = trees / ".tmp-999999999-abc"
    stale.mkdir(parents=True)
    WorkspaceCache(tmp_path / "cache", repo.path)
    assert not stale.exists()


def test_user_repository_is_byte_identical_after_everything(repo: Repo, tmp_path: Path) -> None:
    write(repo.path, "src/pkg/a.py", "A = 'uncommitted'\n")  # a dirty tree, as users have
    future = time.time() + 5
    os.utime(repo.path / "README", (future, future))  # stale stat info: status would refresh the index
    before = snapshot(repo.path)
    r = open_repo(repo.path)
    good, bad = r.check_range("v0", "v3")
    for first_parent in (False, True):
        for sha in r.commits_between(good, bad, first_parent=first_parent):
            r.commit_info(sha)
            r.diff(sha, ["src", "tests"])
            r.submodule_pin(sha)
    r.is_dirty()
    r.is_dirty(include_untracked=True)
    with pytest.raises(UsageError):
        r.resolve("nope")
    cache = WorkspaceCache(tmp_path / "cache", r)
    for sha in r.commits_between(good, bad):
        cache.materialize(sha)
    cache.sync()
    cache.cleanup(bad)
    after = snapshot(repo.path)
    assert after == before
    assert not (repo.path / ".git/refs/bisect").exists()
    assert not (repo.path / ".git/BISECT_LOG").exists()
    assert not (repo.path / ".git/worktrees").exists()
    assert isinstance(r, GitRepo)
