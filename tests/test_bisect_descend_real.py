"""``harness bisect --megatron-lm`` end to end, both levels, on real MB and megatron-core trees.

Two repositories are built at test time (nothing of MB or Megatron-LM is committed here): a
Megatron-LM-like repository whose first commit holds the installed megatron-core's
``megatron/core``, then noise, a commit whose megatron-core does not import (a skip), its fix,
the commit injecting a fault the packed_seq_params cases observe (tests/faults.py) and more
noise; and an MB-like repository of the installed MB's files pinning it through a real
``3rdparty/Megatron-LM`` gitlink, with a pin the Megatron-LM repository lacks (a skip) and a
bump across the faulty commit. ``harness bisect`` must name the bump in MB, then the injecting
commit in Megatron-LM, and leave both repositories byte-identical. The commits are laid out so
that each level's first interior probe is its skip. Selected cases: the sentinel cases of one
suite (light import, through the fork server of each megatron-core tree).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import faults
from tests.gitrepos import GIT_ENV, commit_all, git, installed, pin, tree_digest

pytestmark = pytest.mark.slow

SELECT = ["--suite", "packed_seq_params", "-k", "test_offline_sentinel_stripped"]
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


@dataclass
class Repos:
    mb: Path
    mlm: Path
    mb_shas: list[str]
    mlm_shas: list[str]


def _noise(repo: Path, i: int) -> None:
    with open(repo / "README.md", "a") as fh:
        fh.write(f"note {i}\n")


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Repos:
    root = tmp_path_factory.mktemp("descend")
    mlm, mb = root / "Megatron-LM", root / "Megatron-Bridge"
    core = mlm / "megatron" / "core"
    shutil.copytree(installed("megatron.core"), core, ignore=IGNORE)
    shutil.copytree(installed("megatron.bridge"), mb / "src" / "megatron" / "bridge", ignore=IGNORE)
    for repo in (mlm, mb):
        git(root, "init", "-q", "-b", "main", str(repo))
        (repo / "README.md").write_text(f"{repo.name} (test copy)\n")

    def mlm_commit(i: int, msg: str, change: faults.Fault | None = None) -> str:
        if change is None:
            _noise(mlm, i)
        else:
            change.apply_to(core)
        return commit_all(mlm, msg, i)

    mlm_shas = [
        mlm_commit(0, "Import megatron-core"),
        mlm_commit(1, "Docs"),
        mlm_commit(2, "Docs (2)"),
        mlm_commit(3, "Refactor PackedSeqParams", faults.CORE_PACKED_SEQ_PARAMS_SYNTAX_ERROR),  # skip
        mlm_commit(4, "Fix the PackedSeqParams refactor", faults.CORE_PACKED_SEQ_PARAMS_SYNTAX_ERROR.reverse()),
        mlm_commit(5, "Count the end-of-sequence boundary in max_seqlen", faults.CORE_MAX_SEQLEN_OFF_BY_ONE),
        mlm_commit(6, "Docs (3)"),
    ]
    mb_shas = []
    for i, (msg, pinned) in enumerate(
        [
            ("Import Megatron-Bridge sources", mlm_shas[1]),
            ("Update README", mlm_shas[1]),
            ("Pin a Megatron-LM side branch", "1" * 40),  # not in the Megatron-LM repository: a skip
            ("Pin Megatron-LM main again", mlm_shas[1]),
            ("Bump Megatron-LM", mlm_shas[6]),  # the culprit: moves the pin across the faulty commit
            ("Update README again", mlm_shas[6]),
        ]
    ):
        _noise(mb, i)
        git(mb, "add", "-A")
        pin(mb, pinned)
        mb_shas.append(commit_all(mb, msg, i, add=False))
    return Repos(mb, mlm, mb_shas, mlm_shas)


def test_names_the_bump_then_the_megatron_lm_commit_and_touches_neither_repository(
    repos: Repos, tmp_path: Path
) -> None:
    before = tree_digest(repos.mb), tree_digest(repos.mlm)
    proc = subprocess.run(
        [
            sys.executable, "-m", "harness", "bisect", f"{repos.mb_shas[0]}..{repos.mb_shas[-1]}",
            "--repo", str(repos.mb), "--megatron-lm", str(repos.mlm), *SELECT,
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"),
        ],
        capture_output=True, text=True, env={**os.environ, **GIT_ENV}, timeout=1500,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-5000:]
    doc = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert doc["schema_version"] == 4
    fault = faults.CORE_MAX_SEQLEN_OFF_BY_ONE
    blamed = {c["case_id"]: c["culprit"]["sha"] for c in doc["cases"] if c["culprit"]}
    assert blamed and all(fault.caught_by(c) for c in blamed), blamed
    assert set(blamed.values()) == {repos.mb_shas[4]}, "first level: the bump"
    assert set(doc["probes"][repos.mb_shas[2]].values()) <= {"untestable"}, "the missing pin was probed: a skip"

    (descent,) = doc["descents"]
    assert descent["descended"] and sorted(descent["cases"]) == sorted(blamed)
    assert (descent["old_pin"], descent["new_pin"]) == (repos.mlm_shas[1], repos.mlm_shas[6])
    second = descent["doc"]
    assert second["held"]["sha"] == repos.mb_shas[4] and second["range"]["first_parent"]
    assert [c["sha"] for c in second["commits"]] == repos.mlm_shas[1:]
    assert set(second["probes"][repos.mlm_shas[6]]) == set(blamed), "only the blamed cases are re-run"
    found = {c["case_id"]: (c["culprit"] or {}).get("sha") for c in second["cases"]}
    assert found == dict.fromkeys(blamed, repos.mlm_shas[5]), "second level: the injecting Megatron-LM commit"
    culprit = second["cases"][0]["culprit"]
    assert culprit["subject"] == "Count the end-of-sequence boundary in max_seqlen"
    assert culprit["author"] == "Ada Tester" and culprit["date"].startswith("2026-01-06")
    assert culprit["files"] == ["megatron/core/packed_seq_params.py"]
    assert "int(self.max_seqlen_q) + 1" in culprit["diff"] and culprit["diff_scope"] == "packing-related files"
    skipped = second["probes"][repos.mlm_shas[3]]
    assert set(skipped.values()) == {"untestable"}, "a megatron-core that does not import with the MB held: a skip"
    with sqlite3.connect(tmp_path / "cache" / "verdicts.sqlite") as db:
        why = db.execute(
            "SELECT DISTINCT v.message FROM case_verdicts v JOIN evaluations e ON v.evaluation_id = e.id"
            " WHERE e.commit_sha = ? AND e.core_commit = ?",
            (repos.mb_shas[4], repos.mlm_shas[3]),
        ).fetchall()
    assert why and all("does not import with the Megatron-Bridge held fixed: SyntaxError" in m for (m,) in why), why
    assert second["pin_change"]["status"] == "confirmed"

    out = proc.stdout
    assert f"Megatron-LM behind first bad commit {repos.mb_shas[4][:12]}" in out
    assert f"first bad commit {repos.mlm_shas[5][:12]}  Count the end-of-sequence boundary" in out
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="descent-1-timeline"' in html and "Count the end-of-sequence boundary in max_seqlen" in html
    assert (tree_digest(repos.mb), tree_digest(repos.mlm)) == before, "both repositories byte-identical"
