"""``harness bisect`` end to end against a real git repository built from the installed MB.

The repositories are built once per module: the installed ``megatron/bridge`` package becomes
``src/megatron/bridge`` of the first commit, then noise commits and commits that inject faults
from the catalogue in tests/faults/__init__.py (each checked to be caught by the golden suites): behaviour faults, MB
raising, breaks (a syntax error, a hang) and a module deleted outright. Every MB evaluation
costs seconds to tens of seconds (MB import), so the slow tests share the repositories and
one verdict cache, select light suites where they can, and keep the ranges short.

The fast tests at the end drive :func:`run_bisection` with a fake evaluator over small
generated histories (scheduling, retries, resume bookkeeping, nothing-to-bisect).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.bisect.document import BisectDoc, NotBisected
from harness.bisect.driver import BisectOptions, run_bisection
from harness.bisect.evaluator import EvalOutcome, MBEvaluator
from harness.errors import UsageError
from harness.records.verdict import Verdict
from harness.report.terminal import bisect_summary_lines
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import workspace_dir_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

import faults
from gitrepos import GIT_ENV, commit_all, git, installed, tree_digest

HARNESS = [sys.executable, "-m", "harness"]
SUITES = ["--suite", "packed_seq_params", "--suite", "in_batch_packing"]


@dataclass
class MBRepo:
    path: Path
    shas: list[str]  # index = position in the range
    culprit: dict[str, int]  # fault name -> index of the injecting commit
    digest: str


# index: what the commit does
HISTORY = [
    ("Import Megatron-Bridge sources", None),
    ("Update README", "noise"),
    ("Add a packing FAQ", "noise"),
    ("Simplify cu_seqlens sentinel stripping", faults.CU_SEQLENS_OFF_BY_ONE),  # culprit A
    ("Reword the FAQ", "noise"),
    ("Add docs for packing", "noise"),
    ("Pad aligned tokens consistently", faults.ALIGNMENT_PAD_LOSS_MASK_ONE),  # culprit B, right before a break
    ("Refactor in-batch packing helpers", faults.IN_BATCH_SYNTAX_ERROR),  # in-batch cases: FAIL (broken)
    ("Fix in-batch packing refactor", faults.IN_BATCH_SYNTAX_ERROR.reverse()),
    ("Update README again", "noise"),
    ("Bump changelog", "noise"),
]

REMOVE_ALGORITHMS = ("rm", "data/packing/algorithms.py")  # an operation absent in an era: untestable
RESTORE_ALGORITHMS = ("restore", "data/packing/algorithms.py")

# index: breaks, MB raising and an absent module (ranges: 0..3 gpt_sft break, 4..6 MB raising,
# 6..8 hang, 9 absent, 9..12 a case GOOD cannot run that breaks after it runs again)
BREAKS = [
    ("Import Megatron-Bridge sources", None),
    ("Update README", "noise"),
    ("Tidy the packed SFT dataset", faults.GPT_SFT_SYNTAX_ERROR),  # broken import: FAIL, culprit
    ("Update README (2)", "noise"),
    ("Fix the packed SFT dataset", faults.GPT_SFT_SYNTAX_ERROR.reverse()),
    ("Validate packed batch boundaries", faults.TORCH_RAISES_IN_MB),  # MB raises (through torch): culprit
    ("Bump changelog", "noise"),
    ("Cache packed-seq metadata", faults.PACKED_SEQ_UTILS_HANG),  # hangs at import: FAIL at --timeout, culprit
    ("Bump changelog (2)", "noise"),
    ("Drop the legacy packing algorithms module", REMOVE_ALGORITHMS),
    ("Bring the packing algorithms back", RESTORE_ALGORITHMS),  # packing_algorithms cases run again
    ("Speed up first fit", faults.FIRST_FIT_NEEDS_ONE_MORE),  # culprit, for cases GOOD (9) cannot run
    ("Bump changelog (3)", "noise"),
]


def build_repo(root: Path, history: list) -> MBRepo:
    """A git repository of MB's installed sources with one commit per ``history`` entry."""
    mb = installed("megatron.bridge")
    repo = root / "Megatron-Bridge"
    pkg = repo / "src" / "megatron" / "bridge"
    shutil.copytree(mb, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (repo / "README.md").write_text("Megatron-Bridge (test copy)\n")
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    shas, culprit = [], {}
    for i, (msg, change) in enumerate(history):
        if change == "noise":
            with open(repo / ("README.md" if "README" in msg else "CHANGELOG.md"), "a") as fh:
                fh.write(f"{msg} ({i})\n")
            if "docs" in msg or "FAQ" in msg:
                (repo / "docs").mkdir(exist_ok=True)
                with open(repo / "docs" / "packing.md", "a") as fh:
                    fh.write(f"# {msg}\n")
        elif isinstance(change, tuple) and change[0] == "rm":
            (pkg / change[1]).unlink()
        elif isinstance(change, tuple) and change[0] == "restore":
            shutil.copy2(mb / change[1], pkg / change[1])
        elif change is not None:
            change.apply_to(pkg)
            if change.suite:
                culprit[change.name] = i
        shas.append(commit_all(repo, msg, i))
    git(repo, "tag", "good", shas[0])
    git(repo, "tag", "bad", shas[-1])
    return MBRepo(repo, shas, culprit, tree_digest(repo))


@pytest.fixture(scope="module")
def mb_repo(tmp_path_factory: pytest.TempPathFactory) -> MBRepo:
    return build_repo(tmp_path_factory.mktemp("mbrepo"), HISTORY)


@pytest.fixture(scope="module")
def mb_breaks(tmp_path_factory: pytest.TempPathFactory) -> MBRepo:
    return build_repo(tmp_path_factory.mktemp("mbbreaks"), BREAKS)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bisect-cache")


def bisect(repo: MBRepo, *args: str, out: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    cmd = [*HARNESS, "bisect", *args, "--repo", str(repo.path), "--cache-dir", str(cache), "--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **GIT_ENV}, timeout=900)


def load(out: Path) -> dict:
    return json.loads((out / "bisect.json").read_text())


def cache_rows(cache: Path) -> list[tuple[str, int]]:
    db = cache / "verdicts.sqlite"
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return sorted(con.execute("SELECT commit_sha, attempt FROM evaluations").fetchall())
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        con.close()


def culprits(doc: dict | BisectDoc) -> dict[str, str | None]:
    if isinstance(doc, BisectDoc):
        return {c.case_id: c.culprit.sha if c.culprit else None for c in doc.cases}
    return {c["case_id"]: (c["culprit"] or {}).get("sha") for c in doc["cases"]}


def assert_culprits(doc: dict, repo: MBRepo, *names: str) -> None:
    """Every bisected case is caught by one of the faults and blamed on its injecting commit;
    every fault has at least one bisected case."""
    found = culprits(doc)
    for name in names:
        fault = faults.FAULTS[name]
        mine = {c: sha for c, sha in found.items() if fault.caught_by(c)}
        assert mine, f"no case of fault {name} was bisected: {sorted(found)}"
        want = repo.shas[repo.culprit[name]]
        assert all(sha == want for sha in mine.values()), (name, mine, want)
    stray = [c for c in found if not any(faults.FAULTS[n].caught_by(c) for n in names)]
    assert not stray, f"cases bisected that no injected fault explains: {stray}"


# --------------------------------------------------------------------------- slow: real MB


@pytest.mark.slow
def test_two_faults_parallel_names_each_injecting_commit(mb_repo: MBRepo, shared_cache: Path, tmp_path: Path) -> None:
    """-j 3, two faults in one range; the in-batch culprit comes right before a commit where the
    in-batch module cannot be imported (a break: bad too, so the culprit stays the first bad)."""
    proc = bisect(mb_repo, "good..bad", *SUITES, "-j", "3", out=tmp_path, cache=shared_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load(tmp_path)
    assert doc["kind"] == "harness-bisect" and doc["schema_version"] == 4
    assert_culprits(doc, mb_repo, "cu_seqlens_off_by_one", "alignment_pad_loss_mask_one")
    assert {c["status"] for c in doc["cases"]} == {"found"}
    # the import-broken commit FAILs the in-batch cases only (a break, never an era gap)
    probe = doc["probes"].get(mb_repo.shas[7])
    if probe:
        assert all(v == "fail" for k, v in probe.items() if k.startswith("in_batch_packing::"))
        assert all(
            v in ("pass", "fail", "known-fail", "changed")
            for k, v in probe.items()
            if k.startswith("packed_seq_params::")
        )
    a = mb_repo.shas[mb_repo.culprit["cu_seqlens_off_by_one"]]
    culprit = next(c["culprit"] for c in doc["cases"] if c["culprit"]["sha"] == a)
    assert culprit["subject"] == "Simplify cu_seqlens sentinel stripping"
    assert culprit["files"] == ["src/megatron/bridge/training/utils/packed_seq_utils.py"]
    assert "torch.argmin(cu_seqlens_padded) + 1" in culprit["diff"]
    assert culprit["author"] == "Ada Tester" and culprit["date"].startswith("2026-01-04")
    assert doc["range"]["n_commits"] == len(HISTORY)
    assert [c["sha"] for c in doc["commits"]] == mb_repo.shas
    assert (tmp_path / "report.html").stat().st_size > 1000
    assert a[:12] in proc.stdout and "Simplify cu_seqlens sentinel stripping" in proc.stdout
    assert "packed_seq_utils.py" in proc.stdout
    assert tree_digest(mb_repo.path) == mb_repo.digest


@pytest.mark.slow
def test_rerun_reuses_every_cached_verdict(mb_repo: MBRepo, shared_cache: Path, tmp_path: Path) -> None:
    before = cache_rows(shared_cache)
    if not before:  # run on its own (-k, xdist): fill the shared cache first
        assert (
            bisect(mb_repo, "good..bad", *SUITES, "-j", "3", out=tmp_path / "first", cache=shared_cache).returncode == 0
        )
        before = cache_rows(shared_cache)
    proc = bisect(mb_repo, f"{mb_repo.shas[0][:10]}..bad", *SUITES, "-j", "2", out=tmp_path, cache=shared_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load(tmp_path)
    assert doc["new_evaluations"] == 0 and doc["cached_evaluations"] == len(before)
    assert_culprits(doc, mb_repo, "cu_seqlens_off_by_one", "alignment_pad_loss_mask_one")
    assert cache_rows(shared_cache) == before
    assert tree_digest(mb_repo.path) == mb_repo.digest


@pytest.mark.slow
def test_a_verdict_walks_from_the_suite_process_through_the_cache_to_the_bisect_document(
    mb_repo: MBRepo, shared_cache: Path, tmp_path: Path
) -> None:
    """Issue 46's walk of one verdict: the culprit commit run by ``harness run`` (what the suite
    process writes, a ``CaseResult``), the verdict cache's record of that commit and case, and the
    bisect document's case. The cache holds the suite process's record itself, equal to the
    independent run's but for its duration; the document shows that record's diff or message, the
    invariants that broke, their impacts and the first violation."""
    import dataclasses

    from harness.bisect.findings import broken_line, violation_of
    from harness.records.results import CaseResult, RunResult

    proc = bisect(mb_repo, "good..bad", *SUITES, "-j", "3", out=tmp_path / "bisect", cache=shared_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = BisectDoc.load(tmp_path / "bisect" / "bisect.json")
    sha = mb_repo.shas[mb_repo.culprit["cu_seqlens_off_by_one"]]
    walked = [c for c in doc.cases if c.culprit is not None and c.culprit.sha == sha]
    assert walked, culprits(doc)

    tree = tmp_path / "tree"  # the culprit's tree, outside the repository (never a checkout of it)
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(mb_repo.path), "archive", sha], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    suites = [s for s in SUITES if s != "--suite"]
    run = subprocess.run(
        [*HARNESS, "run", "--mb-src", str(tree), *SUITES, "--out", str(tmp_path / "run"), "-q"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 1, run.stdout + run.stderr  # the culprit fails its cases
    written = {c.case_id: c for c in RunResult.load(tmp_path / "run" / "results.json").cases}

    con = sqlite3.connect(f"file:{shared_cache / 'verdicts.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        stored = {
            case: CaseResult.from_json(json.loads(doc_json))
            for case, doc_json in con.execute(
                "SELECT v.case_id, v.result FROM case_verdicts v"
                " JOIN evaluations e ON e.id = v.evaluation_id WHERE e.commit_sha = ?",
                (sha,),
            )
        }
    finally:
        con.close()

    def timeless(case: CaseResult) -> CaseResult:
        return dataclasses.replace(case, duration_s=0.0)

    for case in walked:
        assert case.case_id.split("::")[0] in suites
        result = written[case.case_id]
        assert result.verdict is Verdict.FAIL
        assert timeless(stored[case.case_id]) == timeless(result)
        shown = (case.golden_diff, case.broken, case.violation, case.impacts)
        assert shown == (result.diff or result.message, broken_line(result), violation_of(result), result.impacts)
    assert any(case.impacts and case.violation for case in walked), "no walked case carried an invariant's impact"
    assert tree_digest(mb_repo.path) == mb_repo.digest


@pytest.mark.slow
def test_kill9_then_resume_loses_and_repeats_nothing(mb_repo: MBRepo, tmp_path: Path) -> None:
    """-j 1 from an empty cache, killed with SIGKILL after three evaluations, then rerun."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    args = ["good..bad", "--suite", "packed_seq_params", "-j", "1", "--quiet"]
    cmd = [*HARNESS, "bisect", *args, "--repo", str(mb_repo.path), "--cache-dir", str(cache), "--out", str(out)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **GIT_ENV}
    )
    deadline = time.monotonic() + 400
    try:
        while len(cache_rows(cache)) < 3:
            assert proc.poll() is None, "bisect finished before it could be killed"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _kill_orphans(str(cache))
    done = cache_rows(cache)
    assert len(done) >= 3 and not (out / "bisect.json").exists()
    proc2 = bisect(mb_repo, *args, out=out, cache=cache)
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr
    doc = load(out)
    assert_culprits(doc, mb_repo, "cu_seqlens_off_by_one")
    after = cache_rows(cache)
    assert set(done) <= set(after), "a completed evaluation was lost"
    assert all(attempt == 1 for _, attempt in after), f"an evaluation was repeated: {after}"
    assert doc["cached_evaluations"] == len(done)
    assert doc["new_evaluations"] == len(after) - len(done)
    assert tree_digest(mb_repo.path) == mb_repo.digest


def _kill_orphans(marker: str) -> None:
    """The suite subprocess runs in its own session; end the ones this test started (by pid:
    their command line names this test's private cache directory)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


@pytest.mark.slow
def test_bad_ranges_fail_in_one_line(mb_repo: MBRepo, shared_cache: Path, tmp_path: Path) -> None:
    cases = {
        "nosuchref..bad": "unknown ref 'nosuchref'",
        "bad..good": "is not an ancestor of bad",
        "good..good": "empty range",
        "good": "must be GOOD..BAD",
    }
    for rng, words in cases.items():
        proc = bisect(mb_repo, rng, out=tmp_path / "o", cache=shared_cache)
        assert proc.returncode == 2, (rng, proc.stderr)
        assert proc.stderr.count("\n") == 1 and words in proc.stderr, (rng, proc.stderr)
        assert proc.stderr.startswith("harness: error: ")
    proc = bisect(mb_repo, "good..bad", "--suite", "nope", out=tmp_path / "o", cache=shared_cache)
    assert proc.returncode == 2 and "unknown suite" in proc.stderr
    assert not (tmp_path / "o").exists()
    assert tree_digest(mb_repo.path) == mb_repo.digest


# --------------------------------------------------------------------------- slow: breaks, MB raising


def _bisect_env(repo: MBRepo, rng: str, *args: str, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``harness bisect`` without --cache-dir: the cache is wherever ``env`` puts the default."""
    full_env = {k: v for k, v in os.environ.items() if k != "HARNESS_CACHE"}
    cmd = [*HARNESS, "bisect", rng, *args, "--repo", str(repo.path), "--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, env={**full_env, **GIT_ENV, **env}, timeout=900)


def _case_messages(doc: dict, sha: str) -> dict[str, str]:
    """case -> message of the case at ``sha`` (from the case documents of bisected cases)."""
    return {c["case_id"]: c["golden_diff"] for c in doc["cases"] if (c["culprit"] or {}).get("sha") == sha}


@pytest.mark.slow
def test_mb_raising_is_fail_through_run_and_bisect_wherever_the_cache_lives(mb_breaks: MBRepo, tmp_path: Path) -> None:
    """The same injected fault (torch raising inside MB) is FAIL through ``harness run --mb-src``,
    through ``harness bisect`` with the default cache (``~/.cache/harness``) and with
    HARNESS_CACHE under a directory named ``harness``, and the bisection names its commit."""
    fault = faults.TORCH_RAISES_IN_MB
    at = mb_breaks.culprit[fault.name]
    culprit = mb_breaks.shas[at]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(mb_breaks.path), "archive", culprit, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive, check=True)
    run = subprocess.run(
        [
            *HARNESS,
            "run",
            "--mb-src",
            str(checkout),
            "--suite",
            "packed_seq_params",
            "--quiet",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    cases = json.loads((tmp_path / "run" / "results.json").read_text())["cases"]
    failed = {c["case_id"]: c["message"] for c in cases if c["verdict"] == "fail"}
    assert failed and all(fault.caught_by(c) for c in failed), failed
    assert all(m.startswith("Megatron raised RuntimeError") for m in failed.values()), failed
    assert not [c for c in cases if c["verdict"] == "error"]

    rng = f"{mb_breaks.shas[at - 1][:10]}..{mb_breaks.shas[at + 1][:10]}"
    home = tmp_path / "home"
    named_harness = tmp_path / "work" / "harness" / "cache"
    for env, cache in (
        ({"HOME": str(home)}, home / ".cache" / "harness"),
        ({"HARNESS_CACHE": str(named_harness)}, named_harness),
    ):
        out = tmp_path / f"bisect-{cache.parent.name}"
        proc = _bisect_env(mb_breaks, rng, "--suite", "packed_seq_params", out=out, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = load(out)
        found = culprits(doc)
        # cases already failing at GOOD (the installed MB's known bugs) have nothing to bisect
        at_good = doc["probes"].get(mb_breaks.shas[at - 1], {})
        bisectable = {c for c in failed if at_good.get(c) == "pass"}
        assert bisectable and set(found) == bisectable and set(found.values()) == {culprit}, (env, found)
        messages = _case_messages(doc, culprit)
        assert all(m.startswith("Megatron raised RuntimeError") for m in messages.values()), messages
        assert (cache / "verdicts.sqlite").is_file(), f"the cache went elsewhere than {cache}"
    assert tree_digest(mb_breaks.path) == mb_breaks.digest


@pytest.mark.slow
def test_broken_packing_module_is_fail_and_bisect_names_it(
    mb_breaks: MBRepo, shared_cache: Path, tmp_path: Path
) -> None:
    """A syntax error in data/packing/gpt_sft.py: the packed-dataset cases FAIL ("broken: ...")
    instead of being skipped, so the bisection names the commit that broke the import."""
    fault = faults.GPT_SFT_SYNTAX_ERROR
    at = mb_breaks.culprit[fault.name]
    proc = bisect(
        mb_breaks,
        f"{mb_breaks.shas[0][:10]}..{mb_breaks.shas[at + 1][:10]}",
        "--suite",
        fault.suite,
        "-k",
        "test_samples_mapping_follows_seed",  # passes on the installed MB (no known bug in it)
        out=tmp_path,
        cache=shared_cache,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load(tmp_path)
    assert_culprits(doc, mb_breaks, fault.name)
    messages = _case_messages(doc, mb_breaks.shas[at])
    assert messages and all(
        m.startswith("broken: import of ") and "SyntaxError" in m and "gpt_sft.py" in m for m in messages.values()
    ), messages


@pytest.mark.slow
def test_hang_is_fail_at_the_timeout_and_the_bisection_does_not_hang(
    mb_breaks: MBRepo, shared_cache: Path, tmp_path: Path
) -> None:
    """Importing packed_seq_utils never returns from commit 7 on: the case running when the suite
    process is killed at --timeout FAILs ("broken: timeout"), and the bisection names the commit."""
    at = mb_breaks.culprit[faults.PACKED_SEQ_UTILS_HANG.name]
    rng = f"{mb_breaks.shas[at - 1][:10]}..{mb_breaks.shas[at + 1][:10]}"
    # -k argmin: cases the earlier MB-raising fault does not touch (they pass before the hang)
    proc = bisect(
        mb_breaks,
        rng,
        "--suite",
        "packed_seq_params",
        "-k",
        "argmin",
        "--timeout",
        "25",
        out=tmp_path,
        cache=shared_cache,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load(tmp_path)
    found = culprits(doc)
    assert found and set(found.values()) == {mb_breaks.shas[at]}, found
    messages = _case_messages(doc, mb_breaks.shas[at])
    assert all(m.startswith("broken: timeout:") for m in messages.values()), messages
    bad = doc["probes"][mb_breaks.shas[at + 1]]
    assert set(bad.values()) <= {"fail", "untestable"} and "fail" in bad.values(), bad


@pytest.mark.slow
def test_module_deleted_outright_stays_untestable(mb_breaks: MBRepo, tmp_path: Path) -> None:
    """An era without the operation (its module deleted, nothing else importing it) is untestable."""
    cache = tmp_path / "cache"
    ev = MBEvaluator(
        mb_breaks.path,
        workspace_dir_for(cache, open_repo(mb_breaks.path)),
        cache / "runs",
        suites=("packing_algorithms",),
    )
    outcome = ev(mb_breaks.shas[BREAKS.index(("Drop the legacy packing algorithms module", REMOVE_ALGORITHMS))])
    assert outcome.verdicts and set(outcome.verdicts.values()) == {Verdict.UNTESTABLE}, outcome.messages
    assert all("not found in this Megatron-Bridge" in m for m in outcome.messages.values()), outcome.messages


@pytest.mark.slow
def test_good_that_cannot_run_the_cases_is_bisected_from_where_they_run(
    mb_breaks: MBRepo, shared_cache: Path, tmp_path: Path
) -> None:
    """GOOD has no packing algorithms module (the cases are untestable there), BAD breaks first fit:
    the cases are bisected from the commit that brought the module back, and the culprit is
    named; with --strict-good that commit is named instead."""
    gone = BREAKS.index(("Drop the legacy packing algorithms module", REMOVE_ALGORITHMS))
    back, fault = gone + 1, mb_breaks.culprit[faults.FIRST_FIT_NEEDS_ONE_MORE.name]
    rng = f"{mb_breaks.shas[gone][:10]}..{mb_breaks.shas[-1][:10]}"
    proc = bisect(mb_breaks, rng, "--suite", "packing_algorithms", out=tmp_path / "late", cache=shared_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load(tmp_path / "late")
    assert_culprits(doc, mb_breaks, faults.FIRST_FIT_NEEDS_ONE_MORE.name)
    assert fault == back + 1
    starts = doc["late_starts"]
    assert starts and {s["runs_from"] for s in starts} == {mb_breaks.shas[back]}
    assert all(s["at_good"] == "untestable" and s["bisected"] for s in starts)
    assert f"the oldest commit where it runs is {mb_breaks.shas[back][:12]}" in proc.stdout
    strict = bisect(
        mb_breaks, rng, "--suite", "packing_algorithms", "--strict-good", out=tmp_path / "strict", cache=shared_cache
    )
    assert strict.returncode == 1 and "nothing to bisect" in strict.stdout
    assert f"use {mb_breaks.shas[back][:12]} as GOOD" in strict.stdout
    assert tree_digest(mb_breaks.path) == mb_breaks.digest


@pytest.mark.slow
def test_confirm_reverts_each_culprit_on_bad_and_its_cases_pass(
    mb_repo: MBRepo, shared_cache: Path, tmp_path: Path
) -> None:
    proc = bisect(mb_repo, "good..bad", *SUITES, "-j", "2", "--confirm", out=tmp_path, cache=shared_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load(tmp_path)
    assert_culprits(doc, mb_repo, "cu_seqlens_off_by_one", "alignment_pad_loss_mask_one")
    checks = {c["culprit"]: c for c in doc["confirmations"]}
    assert set(checks) == {
        mb_repo.shas[mb_repo.culprit[n]] for n in ("cu_seqlens_off_by_one", "alignment_pad_loss_mask_one")
    }
    for check in checks.values():
        assert check["status"] == "confirmed", check
        assert check["seen"] and set(check["seen"].values()) == {"pass"}, check
    assert proc.stdout.count("  confirmed: reverting it on") == 2
    assert tree_digest(mb_repo.path) == mb_repo.digest


# --------------------------------------------------------------------------- fast: fake evaluator


def _fake_history(
    root: Path,
    n: int,
    faults_at: dict[str, int],
    broken: set[int] = frozenset(),
    no_src: set[int] = frozenset(),
    fixed_at: dict[str, int] | None = None,
    gone_at: dict[str, int] | None = None,
    born_at: dict[str, int] | None = None,
) -> tuple[Path, list[str]]:
    """A git history of ``n`` commits; ``state.json`` says which cases fail, cannot run (gone) or
    are unevaluable (broken: every case untestable) there."""
    repo = root / "repo"
    git(root, "init", "-q", "-b", "main", str(repo))
    shas = []
    for i in range(n):
        failing = {c for c, at in faults_at.items() if i >= at} | {c for c, at in (fixed_at or {}).items() if i < at}
        gone = sorted(
            {c for c, at in (gone_at or {}).items() if i >= at} | {c for c, at in (born_at or {}).items() if i < at}
        )
        state = {"fail": sorted(failing), "broken": i in broken, "gone": gone}
        src = repo / "src" / "megatron" / "bridge"
        if i in no_src:
            shutil.rmtree(repo / "src", ignore_errors=True)
            (repo / "tests").mkdir(exist_ok=True)
            (repo / "tests" / "state.json").write_text(json.dumps(state))
        else:
            src.mkdir(parents=True, exist_ok=True)
            (src / "state.json").write_text(json.dumps(state))
        (repo / "README").write_text(f"rev {i}\n")
        shas.append(commit_all(repo, f"commit {i}", i % 28))
    return repo, shas


@dataclass(frozen=True)
class StateEvaluator:
    """Reads ``state.json`` from the materialised tree; optionally flaky for one case."""

    repo: Path
    workspace_dir: Path
    cases: tuple[str, ...] = ("s::a", "s::b", "s::c")
    flaky: tuple[str, ...] = ()
    counter: Path | None = None

    def cache_namespace(self) -> tuple[str, str]:
        return "state-suite", "state-env"

    def __call__(self, sha: str) -> EvalOutcome:
        from harness.repository.workspaces import WorkspaceCache

        if self.counter:
            with open(self.counter, "a") as fh:
                fh.write(sha + "\n")
        tree = WorkspaceCache(self.workspace_dir, self.repo).materialize(sha)
        state_file = tree / "src" / "megatron" / "bridge" / "state.json"
        if not state_file.exists():
            return EvalOutcome.of({}, note="no src/megatron/bridge")
        state = json.loads(state_file.read_text())
        if state["broken"]:
            return EvalOutcome.of(dict.fromkeys(self.cases, Verdict.UNTESTABLE), note="import error")
        out = {c: Verdict.FAIL if c in state["fail"] else Verdict.PASS for c in self.cases}
        out.update(dict.fromkeys(state.get("gone", []), Verdict.UNTESTABLE))
        for c in self.flaky:
            n = len(self.counter.read_text().split()) if self.counter else 0
            out[c] = Verdict.FAIL if n % 2 else Verdict.PASS
        return EvalOutcome.of(out, {c: f"{c} {v.value}" for c, v in out.items()})


def _run(repo: Path, good: str, bad: str, cache: Path, **kw):
    ev_kw = {k: kw.pop(k) for k in ("flaky", "counter") if k in kw}
    ev = StateEvaluator(repo, workspace_dir_for(cache, open_repo(repo)), **ev_kw)
    return run_bisection(
        BisectOptions(repo=repo, good=good, bad=bad, cache_dir=cache, **kw), evaluator=ev, progress=None
    )


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_fake_two_faults_skips_and_parallelism(tmp_path: Path, jobs: int) -> None:
    repo, shas = _fake_history(tmp_path, 24, {"s::a": 9, "s::b": 17}, broken={7, 18})
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache", jobs=jobs)
    assert run.exit_code == 0
    assert culprits(run.doc) == {"s::a": shas[9], "s::b": shas[17]}
    assert run.doc.rounds <= run.doc.evaluations
    assert len(cache_rows(tmp_path / "cache")) == run.doc.new_evaluations == run.doc.evaluations


def test_fake_skip_right_before_culprit_is_ambiguous(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 12, {"s::a": 6}, broken={5})
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache")
    assert run.exit_code == 1
    (case,) = run.doc.cases
    assert case.status.value == "ambiguous" and case.candidates == [shas[5], shas[6]]


def test_fake_commit_without_mb_is_skipped(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 10, {"s::a": 5}, no_src={3})
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache")
    assert culprits(run.doc) == {"s::a": shas[5]}
    cache = tmp_path / "mbcache"
    ev = MBEvaluator(repo, workspace_dir_for(cache, open_repo(repo)), cache / "runs")
    outcome = ev(shas[3])  # the real evaluator: no src/megatron/bridge -> no verdicts, no suite run
    assert outcome.verdicts == {} and "no src/megatron/bridge" in outcome.note


def test_fake_nothing_to_bisect(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 6, {"s::a": 0})
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache")
    assert run.exit_code == 1 and "nothing to bisect" in run.message
    assert run.doc.cases == [] and run.doc.not_bisected == [NotBisected("s::a", "fails at good too")]


def test_fake_find_fix_names_the_fixing_commit(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 20, {"s::b": 3}, fixed_at={"s::a": 13}, broken={6})
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache", find_fix=True)
    assert run.doc.mode == "find-fix"
    assert culprits(run.doc) == {"s::a": shas[13]}, "the first commit where the failing case passes"
    assert "s::b" not in culprits(run.doc), "a regression is not a fix"
    assert any("first fixed" in line for line in bisect_summary_lines(run.doc))
    normal = _run(repo, shas[0], shas[-1], tmp_path / "cache2")
    assert culprits(normal.doc) == {"s::b": shas[3]}


def test_fake_retries_detect_flaky_and_cache_every_attempt(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 16, {"s::a": 7})
    counter = tmp_path / "calls.txt"
    counter.write_text("")
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache", retries=2, jobs=2, flaky=("s::c",), counter=counter)
    by_case = {c.case_id: c for c in run.doc.cases}
    assert by_case["s::a"].culprit is not None and by_case["s::a"].culprit.sha == shas[7]
    assert "s::c" not in by_case or by_case["s::c"].status.value == "flaky"
    rows = cache_rows(tmp_path / "cache")
    per_commit: dict[str, int] = {}
    for sha, attempt in rows:
        per_commit[sha] = max(per_commit.get(sha, 0), attempt)
    assert set(per_commit.values()) == {3}
    assert len(counter.read_text().split()) == len(rows)


def test_fake_resume_and_wider_range_reuse_cache(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 40, {"s::a": 25})
    counter = tmp_path / "calls.txt"
    counter.write_text("")
    cache = tmp_path / "cache"
    first = _run(repo, shas[10], shas[-1], cache, counter=counter)
    calls = len(counter.read_text().split())
    again = _run(repo, shas[10], shas[-1], cache, counter=counter)
    assert len(counter.read_text().split()) == calls and again.doc.new_evaluations == 0
    wider = _run(repo, shas[0], shas[-1], cache, counter=counter)
    assert culprits(first.doc) == culprits(again.doc) == culprits(wider.doc) == {"s::a": shas[25]}
    assert wider.doc.cached_evaluations == calls
    assert wider.doc.new_evaluations <= 2  # the new good endpoint, maybe one probe
    assert all(a == 1 for _, a in cache_rows(cache))
    fresh = _run(repo, shas[10], shas[-1], cache, counter=counter, use_cache=False, out_dir=tmp_path / "nc")
    assert fresh.doc.cached_evaluations == 0 and fresh.doc.new_evaluations == first.doc.new_evaluations
    assert all(a == 1 for _, a in cache_rows(cache)), "--no-cache must not write the shared cache"


def test_fake_bisect_untestable_names_the_commit_where_a_case_stopped_running(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 16, {"s::a": 4}, gone_at={"s::b": 11})
    plain = _run(repo, shas[0], shas[-1], tmp_path / "cache")
    assert culprits(plain.doc) == {"s::a": shas[4]}, "without the option an untestable case is not bisected"
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache", bisect_untestable=True)
    assert culprits(run.doc) == {"s::a": shas[4], "s::b": shas[11]}
    assert run.exit_code == 0
    with pytest.raises(UsageError, match="--find-fix"):
        _run(repo, shas[0], shas[-1], tmp_path / "cache", bisect_untestable=True, find_fix=True)


def test_fake_good_cannot_run_a_case_bisects_from_where_it_starts_running(tmp_path: Path) -> None:
    """s::a cannot run before commit 8 (untestable) and breaks at 19; s::c only runs from 15 and
    fails from there; s::b is an ordinary regression at 12."""
    repo, shas = _fake_history(tmp_path, 30, {"s::a": 19, "s::b": 12, "s::c": 15}, born_at={"s::a": 8, "s::c": 15})
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache")
    assert culprits(run.doc) == {"s::a": shas[19], "s::b": shas[12]}
    assert run.exit_code == 0
    starts = {s.case_id: s for s in run.doc.late_starts}
    assert set(starts) == {"s::a", "s::c"}
    a, c = starts["s::a"], starts["s::c"]
    assert (a.at_good, a.runs_from, a.verdict_there, a.bisected) == ("untestable", shas[8], "pass", True)
    assert (c.runs_from, c.verdict_there, c.bisected) == (shas[15], "fail", False)
    case_a = next(x for x in run.doc.cases if x.case_id == "s::a")
    assert any(shas[8][:12] in n and "bisected from there" in n for n in case_a.notes), case_a.notes
    # issue 24: failing from the oldest commit where it runs is no "nothing to bisect": that commit is its origin
    assert [
        (n.case_id, f"born failing: it fails from the oldest commit where it runs, {shas[15][:12]}" in n.reason)
        for n in run.doc.not_bisected
    ] == [("s::c", True)]
    lines = "\n".join(bisect_summary_lines(run.doc))
    assert f"oldest commit where it runs is {shas[8][:12]}" in lines and "s::c" in lines
    again = BisectDoc.from_json(run.doc.to_json())
    assert again.late_starts == run.doc.late_starts, "the record keeps what was found"


def test_fake_strict_good_names_the_commit_to_use_instead(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 20, {"s::a": 14}, born_at={"s::a": 6})
    run = _run(repo, shas[0], shas[-1], tmp_path / "cache", strict_good=True)
    assert run.exit_code == 1 and culprits(run.doc) == {}
    (nb,) = run.doc.not_bisected
    assert nb.case_id == "s::a" and f"use {shas[6][:12]} as GOOD" in nb.reason
    assert "nothing to bisect" in run.message
