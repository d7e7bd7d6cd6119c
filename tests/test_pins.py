"""megatron-core pinned by an MB commit (3rdparty/Megatron-LM), on real temporary git repos."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bisect.evaluator import MBEvaluator
from harness.errors import GitError
from harness.gitrepo import open_repo
from harness.pins import SUBMODULE, pinned_core
from harness.target import Target


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repos(tmp_path: Path) -> tuple[Path, Path, list[str], list[str]]:
    """A Megatron-LM repo (two commits) and an MB repo whose commits pin each, plus one without a pin."""
    mlm, mb = tmp_path / "mlm", tmp_path / "mb"
    git(tmp_path, "init", "-q", "-b", "main", str(mlm))
    git(tmp_path, "init", "-q", "-b", "main", str(mb))
    core = mlm / "megatron" / "core"
    core.mkdir(parents=True)
    mlm_shas = []
    for tag in ("one", "two"):
        (core / "__init__.py").write_text(f"PINNED = {tag!r}\n")
        git(mlm, "add", "-A")
        git(mlm, "commit", "-q", "-m", tag)
        mlm_shas.append(git(mlm, "rev-parse", "HEAD"))
    (mb / "src" / "megatron" / "bridge").mkdir(parents=True)
    (mb / "src" / "megatron" / "bridge" / "__init__.py").write_text("")
    git(mb, "add", "-A")
    git(mb, "commit", "-q", "-m", "no pin yet")
    mb_shas = [git(mb, "rev-parse", "HEAD")]
    for sha in mlm_shas:
        git(mb, "update-index", "--add", "--cacheinfo", f"160000,{sha},{SUBMODULE}")
        git(mb, "commit", "-q", "-m", f"bump Megatron-LM to {sha[:7]}")
        mb_shas.append(git(mb, "rev-parse", "HEAD"))
    return mlm, mb, mlm_shas, mb_shas


def test_each_commit_gets_the_core_it_pins(repos, tmp_path: Path) -> None:
    mlm, mb, mlm_shas, mb_shas = repos
    repo = open_repo(mb)
    assert pinned_core(repo, mb_shas[0], mlm, tmp_path / "cache") is None, "no submodule, no pin"
    for mb_sha, mlm_sha, tag in zip(mb_shas[1:], mlm_shas, ("one", "two")):
        pinned = pinned_core(repo, mb_sha, mlm, tmp_path / "cache")
        assert pinned is not None and pinned.pin == mlm_sha
        assert (pinned.path / "megatron" / "core" / "__init__.py").read_text() == f"PINNED = {tag!r}\n"


def test_pinned_core_comes_before_the_installed_one(repos, tmp_path: Path) -> None:
    mlm, mb, _, mb_shas = repos
    pinned = pinned_core(open_repo(mb), mb_shas[2], mlm, tmp_path / "cache")
    tgt = Target(src=mb / "src", commit=mb_shas[2], core=pinned.path, core_pin=pinned.pin)
    code = ("import json, megatron.core as c; from harness.target import versions; "
            "print(json.dumps([c.PINNED, versions()['megatron-core']]))")
    out = subprocess.run([sys.executable, "-c", code], env=tgt.env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    value, reported = json.loads(out.stdout.strip().splitlines()[-1])
    assert value == "two", "megatron.core resolves to the pinned Megatron-LM tree"
    assert pinned.pin[:12] in reported, "results record the pinned commit, not the installed version"


def test_pin_missing_from_megatron_lm_repo(repos, tmp_path: Path) -> None:
    mlm, mb, _, _ = repos
    git(mb, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},{SUBMODULE}")
    git(mb, "commit", "-q", "-m", "pin a commit the Megatron-LM repo lacks")
    sha = git(mb, "rev-parse", "HEAD")
    with pytest.raises(GitError):
        pinned_core(open_repo(mb), sha, mlm, tmp_path / "cache")
    ev = MBEvaluator(mb, tmp_path / "ws", tmp_path / "cache" / "runs", megatron_lm=mlm)
    outcome = ev(sha)
    assert outcome.verdicts == {} and "pinned megatron-core unavailable" in outcome.note, "skipped, never failed"


_LOCK = """version = 1

[[package]]
name = "megatron-bridge"
version = "0.1.0"

[[package]]
name = "megatron-core"
{source}
dependencies = [
    {{ name = "torch" }},
]

[[package]]
name = "numpy"
version = "2.0.0"
source = {{ registry = "https://pypi.org/simple" }}
"""


def _commit_lock(mb: Path, source: str) -> str:
    (mb / "uv.lock").write_text(_LOCK.format(source=source))
    git(mb, "add", "-A")
    git(mb, "commit", "-q", "-m", "lock")
    return git(mb, "rev-parse", "HEAD")


def test_uv_lock_pins_before_the_submodule(repos, tmp_path: Path) -> None:
    """MB before 2025-10-15 pinned megatron-core in uv.lock: a PyPI version (the core_v<version>
    tag of Megatron-LM) or a git rev; a directory source is the submodule era."""
    mlm, mb, mlm_shas, mb_shas = repos
    git(mlm, "tag", "core_v0.14.0", mlm_shas[0])
    git(mb, "checkout", "-q", "-b", "old", mb_shas[0])  # before the submodule
    registry = _commit_lock(mb, 'version = "0.14.0"\nsource = { registry = "https://pypi.org/simple" }')
    pinned = pinned_core(open_repo(mb), registry, mlm, tmp_path / "cache")
    assert pinned is not None and pinned.pin == mlm_shas[0] and "core_v0.14.0" in pinned.via
    assert (pinned.path / "megatron" / "core" / "__init__.py").read_text() == "PINNED = 'one'\n"
    rev = _commit_lock(mb, f'version = "0.14.0rc1"\nsource = {{ git = "https://github.com/NVIDIA/Megatron-LM.git'
                           f'?rev={mlm_shas[1]}#{mlm_shas[1]}" }}')
    assert pinned_core(open_repo(mb), rev, mlm, tmp_path / "cache").pin == mlm_shas[1]
    directory = _commit_lock(mb, 'version = "0.16.0"\nsource = { directory = "3rdparty/Megatron-LM" }')
    assert pinned_core(open_repo(mb), directory, mlm, tmp_path / "cache") is None
    untagged = _commit_lock(mb, 'version = "0.13.0"\nsource = { registry = "https://pypi.org/simple" }')
    with pytest.raises(GitError, match="core_v0.13.0"):
        pinned_core(open_repo(mb), untagged, mlm, tmp_path / "cache")
