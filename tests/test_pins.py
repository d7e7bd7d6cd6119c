"""megatron-core pinned by an MB commit (3rdparty/Megatron-LM), on real temporary git repos."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bisect.evaluator import MBEvaluator
from harness.errors import GitError
from harness.repository.gitrepo import open_repo
from harness.repository.pins import SUBMODULE, pinned_core
from harness.target import Target


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
        "PATH": "/usr/bin:/bin",
    }
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
    code = (
        "import json, megatron.core as c; from harness.versions import versions; "
        "print(json.dumps([c.PINNED, versions()['megatron-core']]))"
    )
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


# ---- a warm fork server per pinned megatron-core ---------------------------------------------

PROBE = """
import json, os, megatron.core as core

def test_probe():
    with open(os.environ["PROBE_OUT"], "w") as fh:
        json.dump({"pinned": core.PINNED, "preloaded": core.LOADED_BY != os.getpid()}, fh)
"""


def _core(root: Path, tag: str) -> Path:
    """A synthetic pinned tree: megatron/core says which pin it is and which process imported it."""
    pkg = root / tag / "megatron" / "core"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"import os\nPINNED = {tag!r}\nLOADED_BY = os.getpid()\n")
    return root / tag


def _probe(pool, tree: Path, tmp_path: Path, capacity: int = 2) -> dict:
    """One run through the pool's server for ``tree`` (a pytest file reading megatron.core)."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    out = tmp_path / f"probe-{tree.name}.json"
    tgt = Target(core=tree, core_pin=tree.name)
    server_env = dict(tgt.env(), HARNESS_IMPORT_MODE="light")
    run_env = dict(server_env, PROBE_OUT=str(out))
    argv = [str(probe), "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    with pool.lease(str(tree), server_env, tmp_path, capacity) as server:
        rc, timed_out = server.run(argv, run_env, tmp_path, tmp_path / f"{tree.name}.log", 300)
    assert rc == 0 and not timed_out, (tmp_path / f"{tree.name}.log").read_text()[-3000:]
    return json.loads(out.read_text())


@pytest.fixture
def pool():
    from harness.suiterun.forkserver import ServerPool

    p = ServerPool()
    yield p
    p.close()


@pytest.mark.slow
def test_each_pinned_tree_gets_its_own_warm_server(pool, tmp_path: Path) -> None:
    one, two = _core(tmp_path / "cores", "one"), _core(tmp_path / "cores", "two")
    assert _probe(pool, one, tmp_path) == {"pinned": "one", "preloaded": True}, "imported once, in the server"
    assert _probe(pool, two, tmp_path) == {"pinned": "two", "preloaded": True}
    assert _probe(pool, one, tmp_path) == {"pinned": "one", "preloaded": True}, "a second run reuses the server"
    assert pool.keys() == [str(two), str(one)], "least recently used first"


@pytest.mark.slow
def test_pool_keeps_at_most_capacity_servers_evicting_the_least_recently_used(pool, tmp_path: Path) -> None:
    trees = [_core(tmp_path / "cores", t) for t in ("one", "two", "three")]
    _probe(pool, trees[0], tmp_path)
    with pool.lease(str(trees[0]), {}, tmp_path, 2) as first_server:
        pass
    _probe(pool, trees[1], tmp_path)
    _probe(pool, trees[2], tmp_path)
    assert pool.keys() == [str(trees[1]), str(trees[2])]
    assert not first_server.alive(), "an evicted server is stopped (its memory given back)"


@pytest.mark.slow
def test_pool_full_when_every_server_is_busy(pool, tmp_path: Path) -> None:
    from harness.suiterun.forkserver import PoolFull

    one, two = _core(tmp_path / "cores", "one"), _core(tmp_path / "cores", "two")
    env = dict(Target(core=one).env(), HARNESS_IMPORT_MODE="light")
    with (
        pool.lease(str(one), env, tmp_path, 1),
        pytest.raises(PoolFull, match="all busy"),
        pool.lease(str(two), env, tmp_path, 1),
    ):
        pass
    assert _probe(pool, two, tmp_path, capacity=1)["pinned"] == "two", "room again once the run is over"


def test_server_that_cannot_start_is_reported_not_raised(pool, tmp_path: Path, monkeypatch) -> None:
    from harness.suiterun import forkserver

    monkeypatch.setattr(forkserver, "START_TIMEOUT_S", 0.0)
    with (
        pytest.raises(forkserver.ForkServerError, match="did not start"),
        pool.lease("x", dict(Target().env()), tmp_path, 2),
    ):
        pass
    assert pool.keys() == [], "a failed start leaves no entry behind"


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
    rev = _commit_lock(
        mb,
        f'version = "0.14.0rc1"\nsource = {{ git = "https://github.com/NVIDIA/Megatron-LM.git'
        f'?rev={mlm_shas[1]}#{mlm_shas[1]}" }}',
    )
    assert pinned_core(open_repo(mb), rev, mlm, tmp_path / "cache").pin == mlm_shas[1]
    directory = _commit_lock(mb, 'version = "0.16.0"\nsource = { directory = "3rdparty/Megatron-LM" }')
    assert pinned_core(open_repo(mb), directory, mlm, tmp_path / "cache") is None
    untagged = _commit_lock(mb, 'version = "0.13.0"\nsource = { registry = "https://pypi.org/simple" }')
    with pytest.raises(GitError, match=re.escape("core_v0.13.0")):
        pinned_core(open_repo(mb), untagged, mlm, tmp_path / "cache")
