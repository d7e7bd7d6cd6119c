"""``harness matrix``: ref selection (release tags, --sample along --first-parent), typed rows,
untestable share of the CPU cases, HTML; end to end on a repository built from the installed MB."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import features
from harness.commands.matrix import print_table
from harness.eras import matrix
from harness.eras.eragaps import EraJudge
from harness.errors import UsageError
from harness.features import Feature
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report.matrix import render_matrix_report
from harness.repository.gitrepo import open_repo
from tests.gitrepos import GIT_ENV, git


def commit(repo: Path, name: str) -> str:
    (repo / "log.txt").open("a").write(name + "\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list[str], str]:
    """main: 0..9 with a merged side branch after 4 (its commit is not on the first-parent chain);
    v0.1.0rc4 is tagged on a release branch forked at 2."""
    repo = tmp_path / "mb"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    main = [commit(repo, f"main {i}") for i in range(3)]
    git(repo, "checkout", "-q", "-b", "r0.1", main[2])
    commit(repo, "release fix")
    git(repo, "tag", "v0.1.0rc4")
    git(repo, "checkout", "-q", "main")
    main += [commit(repo, f"main {i}") for i in range(3, 5)]
    git(repo, "checkout", "-q", "-b", "side")
    side = commit(repo, "side work")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    main.append(git(repo, "rev-parse", "HEAD"))
    main += [commit(repo, f"main {i}") for i in range(6, 10)]
    git(repo, "tag", "v0.2.0", main[6])
    return repo, main, side


def test_release_refs():
    tags = ["v0.1.0rc1", "v0.1.0rc4", "v0.1.0rc10", "v0.2.0rc1", "v0.2.0", "v0.10.0", "v0.3.1", "26.04-alpha.rc1"]
    assert matrix.release_refs(tags) == ["v0.1.0rc10", "v0.2.0", "v0.3.1", "v0.10.0"]


def test_sample_evenly_along_first_parent(history):
    repo, main, side = history
    r = open_repo(repo)
    since = matrix.default_since(r, matrix.release_refs(git(repo, "tag").split()))
    assert since == main[2], "the oldest release tag's fork point"
    picked = matrix.sample_first_parent(r, 3, since)
    assert picked == [main[2], main[6], main[9]], "both ends and the middle of the first-parent chain"
    assert side not in matrix.sample_first_parent(r, 100, main[0]), "side-branch commits are never sampled"
    assert matrix.sample_first_parent(r, 100, main[0]) == main
    with pytest.raises(UsageError, match="first-parent"):
        matrix.sample_first_parent(r, 3, side)
    with pytest.raises(UsageError):
        matrix.sample_first_parent(r, 0, since)


def test_gpu_suites_are_not_cpu_cases():
    assert "forward_gpu" in matrix.gpu_suites() and "packing_algorithms" not in matrix.gpu_suites()


def _run(cases: list[CaseResult]) -> RunResult:
    return RunResult(
        run_id="r",
        target={},
        versions={"megatron-bridge": "0.2.0", "megatron-core": "Megatron-LM abc"},
        machine={},
        import_mode="auto",
        cases=cases,
        duration_s=3.0,
    )


def test_row_counts_untestable_share_of_cpu_cases_and_groups_reasons(tmp_path, history):
    repo, main, _ = history
    gap = (
        "untestable: operation 'pack_in_batch' not found in this Megatron-Bridge (in-batch packing does not "
        "exist before X; tried a: no module a; b: no module b) [missing feature inb: in-batch packing, since S D]"
    )
    cases = [CaseResult(f"packing_algorithms::c{i}", "packing_algorithms", Verdict.PASS) for i in range(18)]
    cases += [
        CaseResult("in_batch_packing::a", "in_batch_packing", Verdict.UNTESTABLE, message=gap),
        CaseResult("in_batch_packing::b", "in_batch_packing", Verdict.UNTESTABLE, message=gap.replace("a:", "z:")),
        CaseResult("forward_gpu::g", "forward_gpu", Verdict.UNTESTABLE, message="untestable: no CUDA"),
        CaseResult("config_validation::x", "config_validation", Verdict.FAIL, message="expected rejected"),
    ]
    row = matrix.row_from_run(
        "v0.2.0",
        "release",
        main[2],
        "2025-11-26T00:00:00+00:00",
        _run(cases),
        tmp_path / "results.json",
        {"forward_gpu"},
    )
    assert (row.cpu_cases, row.untestable_cpu) == (21, 2), "the GPU case counts in neither"
    assert round(row.untestable_pct, 2) == 9.52
    assert len(row.gaps) == 2 and not row.meets_goal, "unjudged, every untestable case is a gap"
    assert row.problems == [{"case_id": "config_validation::x", "verdict": "fail", "message": "expected rejected"}]
    at_goal = cases[:18] + [CaseResult("packing_algorithms::c18", "packing_algorithms", Verdict.PASS), cases[18]]
    good = matrix.row_from_run("s", "sample", main[6], "2026-03-01", _run(at_goal), tmp_path / "r.json", set())
    assert good.untestable_pct == 5.0 and good.meets_goal, "1 of 20: exactly at the goal"

    # the ledger says in-batch packing came with main[4]: an era gap at main[2], a harness gap at main[6]
    ledger = {"inb": Feature("inb", "in-batch packing", main[4][:9], "2026-01-29", "p.py", "x")}
    judge = EraJudge(open_repo(repo), ledger)
    row.judge_untestable(judge)
    good.judge_untestable(judge)
    assert (row.era_gap_cpu, row.gaps, row.applicable_cpu) == (2, [], 19)
    assert row.gap_pct == 0.0 and row.meets_goal and round(row.untestable_pct, 2) == 9.52
    assert good.era_gap_cpu == 0 and [g["case_id"] for g in good.gaps] == ["in_batch_packing::a"]
    assert "exists here" in good.gaps[0]["why"] and good.gap_pct == 5.0

    summary = matrix.reason_summary([row, good])
    assert summary[0]["cases"] == 3 and summary[0]["refs"] == ["v0.2.0", "s"], "same gap, however tried"
    assert summary[0]["reason"] == (
        "operation 'pack_in_batch' not found in this Megatron-Bridge (in-batch packing does not exist before X)"
    ), "tried lists dropped, parentheses kept whole; a tag outside the ledger is not repeated"
    tagged = "untestable: op (tried a: no module a) " + features.tag("in-batch-packing")
    assert matrix.reason_key(tagged) == "op " + features.tag("in-batch-packing"), "a ledger tag is kept"
    assert (
        matrix.reason_key("untestable: operation 'x' not found in this Megatron-Bridge (tried a: no module a)")
        == "operation 'x' not found in this Megatron-Bridge"
    )
    path = tmp_path / "matrix.json"
    matrix.save(path, "/repo", "/mlm", [row, good])
    doc, rows = matrix.load(path)
    assert doc["schema_version"] == matrix.MATRIX_SCHEMA and doc["rows"][0]["untestable_pct"] == 9.52
    assert doc["rows"][1]["gap_pct"] == 5.0 and doc["rows"][1]["gaps"][0]["why"] == good.gaps[0]["why"]
    assert rows[0] == row and rows[1] == good
    html = render_matrix_report(rows, tmp_path / "matrix.html", repo="/repo", megatron_lm="/mlm").read_text()
    assert 'data-ref="v0.2.0"' in html and "9.5" in html and "in-batch packing does not exist before X" in html
    assert "Harness gaps: untestable where the feature exists or is not named (1)" in html
    import io

    buf = io.StringIO()
    print_table(rows, buf)
    lines = buf.getvalue().splitlines()
    coverage = lines[lines.index(next(ln for ln in lines if ln.startswith("harness coverage"))) :]
    assert any(line.startswith("v0.2.0") and line.split()[1:6] == ["21", "2", "9.5", "2", "0"] for line in coverage)
    assert any(line.startswith("s ") and line.split()[1:7] == ["20", "1", "5.0", "0", "1", "5.0"] for line in coverage)
    assert any("gaps above 5% of the CPU cases whose features exist there" in line for line in lines)
    # issue 24: MB's health first, fail / known / changed apart; no line past 120 columns
    assert lines[1].startswith("MB's health") and "fail" in lines[2] and "known" in lines[2] and "changed" in lines[2]
    assert max(len(line) for line in lines) <= 120


@pytest.mark.slow
def test_matrix_sample_end_to_end(tmp_path):
    """Three commits of the installed MB (a tagged release, two later ones): --sample 2 runs the
    tag and two first-parent commits, writes typed JSON and HTML and prints the table."""
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron.bridge is not installed")
    repo = tmp_path / "Megatron-Bridge"
    shutil.copytree(
        Path(next(iter(spec.submodule_search_locations))),
        repo / "src" / "megatron" / "bridge",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    shas = [commit(repo, f"c{i}") for i in range(3)]
    git(repo, "tag", "v0.2.0", shas[0])
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "matrix",
            "--repo",
            str(repo),
            "--sample",
            "2",
            "--suite",
            "packed_seq_params",
            "--out",
            str(out),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **GIT_ENV},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads((out / "matrix.json").read_text())
    assert doc["kind"] == matrix.MATRIX_KIND and doc["schema_version"] == matrix.MATRIX_SCHEMA
    assert [(r["kind"], r["commit"]) for r in doc["rows"]] == [("release", shas[0]), ("sample", shas[2])], (
        "the sampled first commit is the release tag itself: run once"
    )
    assert all(r["cpu_cases"] > 0 and r["meets_goal"] for r in doc["rows"])
    assert (out / "matrix.html").exists() and "v0.2.0" in proc.stdout
    # issue 24: inside a ref the log says what ran (per suite, in verdict letters), not only "[1/2]"
    inside = [line for line in proc.stderr.splitlines() if line.startswith("v0.2.0: packed_seq_params")]
    assert len(inside) == 1 and set(inside[0].split()[-1]) <= set(".Ck"), proc.stderr
    assert proc.stderr.count("verdicts: . pass") == 1, "the legend once per matrix"
