"""The feature ledger and the era-gap judge: an untestable case counts as an era gap only when
its reason names a ledger feature introduced after the commit under test (real temporary git
repositories); the ledger itself checked against MB's real history when a mirror is at hand."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from harness import features
from harness.eras.eragaps import EraJudge
from harness.errors import Untestable
from harness.features import Feature
from harness.repository.gitrepo import open_repo
from harness.suite.adapters import Candidate, NotHere, Operation
from tests.gitrepos import git

MIRROR = Path(os.environ.get("HARNESS_MB_MIRROR", "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"))


def test_every_ledger_tag_reads_back_and_an_unknown_key_fails_early():
    for key in features.FEATURES:
        exc = features.missing(key, "what the adapter saw")
        assert isinstance(exc, Untestable)
        assert str(exc).startswith("what the adapter saw [missing feature ")
        assert features.named(f"untestable: {exc}; later text") == [key]
    assert features.named("untestable: no CUDA") == []
    with pytest.raises(KeyError):
        features.missing("no-such-feature", "x")
    with pytest.raises(KeyError):
        Operation("op", [], feature="no-such-feature")


def test_an_operation_found_nowhere_names_its_feature():
    def absent() -> object:
        raise NotHere("no module m")

    op = Operation("pack", [Candidate("m (v9)", absent)], before="nothing before", feature="in-batch-packing")
    with pytest.raises(Untestable) as raised:
        op()
    text = str(raised.value)
    assert "operation 'pack' not found" in text and "tried m (v9): no module m" in text
    assert features.named(text) == ["in-batch-packing"]
    plain = Operation("plain", [Candidate("m", absent)])
    with pytest.raises(Untestable) as raised:
        plain()
    assert features.named(str(raised.value)) == [], "no feature given: nothing claimed"


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """main: base, feature (adds thing.py), later; a release branch forked at base carries a fix."""
    repo = tmp_path / "mb"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    shas = {}
    for name in ("base", "feature", "later"):
        if name == "feature":
            (repo / "thing.py").write_text("def thing(): ...\n")
        (repo / "log.txt").open("a").write(name + "\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", name)
        shas[name] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "r0.1", shas["base"])
    (repo / "log.txt").open("a").write("release fix\n")
    git(repo, "commit", "-q", "-am", "release fix")
    shas["release"] = git(repo, "rev-parse", "HEAD")
    return repo, shas


def test_era_gap_only_where_the_feature_commit_is_not_an_ancestor(history):
    repo, shas = history
    ledger = {
        "thing": Feature("thing", "the thing", shas["feature"][:9], "2026-01-01", "thing.py", "def thing"),
        "elsewhere": Feature("elsewhere", "a feature of another history", "0" * 40, "2026-01-01", "x.py", "x"),
    }
    judge = EraJudge(open_repo(repo), ledger)
    reason = "untestable: no thing here [missing feature thing: the thing, since abc 2026-01-01]"
    before, at_release = judge.judge(shas["base"], reason), judge.judge(shas["release"], reason)
    assert before.era_gap and at_release.era_gap, "the feature came later, on main only"
    assert "after this commit" in before.why
    for sha in (shas["feature"], shas["later"]):
        verdict = judge.judge(sha, reason)
        assert not verdict.era_gap and "exists here" in verdict.why, "the feature is there: a harness gap"
    plain = judge.judge(shas["base"], "untestable: missing dependency 'einops'")
    assert not plain.era_gap and "names no missing feature" in plain.why
    for key in ("elsewhere", "unheard-of"):
        other = judge.judge(shas["base"], f"untestable: x [missing feature {key}: y]")
        assert not other.era_gap and "not in the ledger or its commit is not in this repository" in other.why
    both = "untestable: x [missing feature elsewhere: y] [missing feature thing: z]"
    assert judge.judge(shas["base"], both).era_gap, "one named feature checked absent is enough"


def _git_text(*args: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(MIRROR), *args], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-Bridge mirror (set HARNESS_MB_MIRROR)")
@pytest.mark.parametrize("key", sorted(features.FEATURES))
def test_ledger_entry_matches_mb_history(key):
    """The entry's commit is on MB's first-parent main with its date, and its marker appears
    exactly there: present at the commit, absent at its first parent."""
    f = features.FEATURES[key]
    sha = (_git_text("rev-parse", "--verify", f"{f.since}^{{commit}}") or "").strip()
    assert sha, f"{f.since} is not in the mirror"
    chain = (_git_text("rev-list", "--first-parent", "HEAD") or "").split()
    assert sha in chain, f"{f.since} is not on MB's first-parent main"
    assert (_git_text("log", "-1", "--format=%cs", sha) or "").strip() == f.date
    at = _git_text("show", f"{sha}:{f.marker_path}") or ""
    before = _git_text("show", f"{sha}^:{f.marker_path}") or ""
    assert re.search(f.marker, at), f"{f.marker!r} not in {f.marker_path} at {f.since}"
    assert not re.search(f.marker, before), f"{f.marker!r} already in {f.marker_path} before {f.since}"
