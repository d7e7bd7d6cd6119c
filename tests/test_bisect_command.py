"""``harness bisect`` end to end against a real git repository built from the installed MB.

The repository is built once per module: the installed ``megatron/bridge`` package becomes
``src/megatron/bridge`` of the first commit, then noise commits, commits that break and fix
the import of the in-batch packing module, and commits that inject faults from
tests/faults.py (each checked to be caught by the golden suites). Every MB evaluation costs
~15 s (MB import), so the slow tests share the repository and one verdict cache, select two
light suites, and keep the range at 11 commits.

The fast tests at the end drive :func:`run_bisection` with a fake evaluator over small
generated histories (scheduling, retries, resume bookkeeping, nothing-to-bisect).
"""

from __future__ import annotations

import hashlib
import importlib.util
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
from harness.gitrepo import open_repo
from harness.report.terminal import bisect_summary_lines
from harness.verdict import Verdict
from harness.workspaces import workspace_dir_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
import faults  # noqa: E402

HARNESS = [sys.executable, "-m", "harness"]
SUITES = ["--suite", "packed_seq_params", "--suite", "in_batch_packing"]
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Ada Tester",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Tester",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
}


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV, **(env or {})},
    ).stdout.strip()


def commit_all(repo: Path, msg: str, n: int) -> str:
    stamp = f"2026-01-{1 + n:02d}T12:00:00+00:00"
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg, env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
    return git(repo, "rev-parse", "HEAD")


def tree_digest(root: Path) -> str:
    """Hash of every file and directory under ``root`` (including .git): names, modes, bytes."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        h.update(f"D {rel}\n".encode())
        for name in sorted(filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"F {rel}/{name} {st.st_mode:o} {st.st_size}\n".encode())
            h.update(os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
    return h.hexdigest()


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
    ("Refactor in-batch packing helpers (WIP)", faults.IN_BATCH_SYNTAX_ERROR),  # in-batch cases: skip
    ("Simplify cu_seqlens sentinel stripping", faults.CU_SEQLENS_OFF_BY_ONE),  # culprit A, right after a skip
    ("Fix in-batch packing refactor", faults.IN_BATCH_SYNTAX_ERROR.reverse()),
    ("Add docs for packing", "noise"),
    ("Pad aligned tokens consistently", faults.ALIGNMENT_PAD_LOSS_MASK_ONE),  # culprit B, right before a skip
    ("Refactor in-batch packing helpers again", faults.IN_BATCH_SYNTAX_ERROR),
    ("Fix in-batch packing refactor again", faults.IN_BATCH_SYNTAX_ERROR.reverse()),
    ("Update README again", "noise"),
    ("Bump changelog", "noise"),
]


@pytest.fixture(scope="module")
def mb_repo(tmp_path_factory: pytest.TempPathFactory) -> MBRepo:
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron.bridge is not installed")
    installed = Path(list(spec.submodule_search_locations)[0])
    repo = tmp_path_factory.mktemp("mbrepo") / "Megatron-Bridge"
    pkg = repo / "src" / "megatron" / "bridge"
    shutil.copytree(installed, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (repo / "README.md").write_text("Megatron-Bridge (test copy)\n")
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    shas, culprit = [], {}
    for i, (msg, change) in enumerate(HISTORY):
        if change == "noise":
            with open(repo / ("README.md" if "README" in msg else "CHANGELOG.md"), "a") as fh:
                fh.write(f"{msg} ({i})\n")
            if "docs" in msg:
                (repo / "docs").mkdir(exist_ok=True)
                (repo / "docs" / "packing.md").write_text("# Packing\n")
        elif change is not None:
            change.apply_to(pkg)
            if change.suite:
                culprit[change.name] = i
        shas.append(commit_all(repo, msg, i))
    git(repo, "tag", "good", shas[0])
    git(repo, "tag", "bad", shas[-1])
    return MBRepo(repo, shas, culprit, tree_digest(repo))


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
    """-j 3, two faults in one range; the cu_seqlens culprit comes right after a commit where
    the in-batch module cannot be imported, the in-batch culprit right before one."""
    proc = bisect(mb_repo, "good..bad", *SUITES, "-j", "3", out=tmp_path, cache=shared_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load(tmp_path)
    assert doc["kind"] == "harness-bisect" and doc["schema_version"] == 1
    assert_culprits(doc, mb_repo, "cu_seqlens_off_by_one", "alignment_pad_loss_mask_one")
    assert {c["status"] for c in doc["cases"]} == {"found"}
    # the import-broken commits were skips for the in-batch cases only
    for idx in (2, 7):
        probe = doc["probes"].get(mb_repo.shas[idx])
        if probe:
            assert all(v == "untestable" for k, v in probe.items() if k.startswith("in_batch_packing::"))
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
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


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


# --------------------------------------------------------------------------- fast: fake evaluator


def _fake_history(
    root: Path,
    n: int,
    faults_at: dict[str, int],
    broken: set[int] = frozenset(),
    no_src: set[int] = frozenset(),
    fixed_at: dict[str, int] | None = None,
) -> tuple[Path, list[str]]:
    """A git history of ``n`` commits; ``state.json`` says which cases fail/are broken there."""
    repo = root / "repo"
    git(root, "init", "-q", "-b", "main", str(repo))
    shas = []
    for i in range(n):
        failing = {c for c, at in faults_at.items() if i >= at} | {c for c, at in (fixed_at or {}).items() if i < at}
        state = {"fail": sorted(failing), "broken": i in broken}
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
        from harness.workspaces import WorkspaceCache

        if self.counter:
            with open(self.counter, "a") as fh:
                fh.write(sha + "\n")
        tree = WorkspaceCache(self.workspace_dir, self.repo).materialize(sha)
        state_file = tree / "src" / "megatron" / "bridge" / "state.json"
        if not state_file.exists():
            return EvalOutcome({}, note="no src/megatron/bridge")
        state = json.loads(state_file.read_text())
        if state["broken"]:
            return EvalOutcome({c: Verdict.UNTESTABLE for c in self.cases}, note="import error")
        out = {c: Verdict.FAIL if c in state["fail"] else Verdict.PASS for c in self.cases}
        for c in self.flaky:
            n = len(self.counter.read_text().split()) if self.counter else 0
            out[c] = Verdict.FAIL if n % 2 else Verdict.PASS
        return EvalOutcome(out, {c: f"{c} {v.value}" for c, v in out.items()})


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
