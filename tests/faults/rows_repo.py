"""Rows of the matrix for repositories as users have them, and for bad configuration.

The repository rows bisect the generated 12-commit history (culprit: commit 7) through a clone
of a particular shape; the user's repository must come out byte-identical.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from tests.faults.lab import HARNESS, ROOT, Lab, Observed, Outcome, Proc
from tests.faults.rows_driver import RANGE, _clean_error, _setup
from tests.test_bisect_command import commit_all, git, tree_digest


def _bisect_ok(lab: Lab, repo: Path, shas: list[str], cache: Path, out: Path, rng: str = RANGE) -> Observed:
    digest = tree_digest(repo)
    proc = lab.bisect(repo, rng, cache, out, "-q")
    if proc.rc != 0 or "Traceback" in proc.err or lab.culprit(out) != shas[7]:
        return Observed(Outcome.LOST, proc.wall_s, f"rc={proc.rc}: {proc.err[-400:]}")
    if tree_digest(repo) != digest:
        return Observed(Outcome.LOST, proc.wall_s, "the user's repository changed")
    return Observed(Outcome.UNAFFECTED, 0.0, f"culprit found in {proc.wall_s:.1f} s, repository untouched")


def no_checkout_clone(lab: Lab) -> Observed:
    origin, shas, cache, out = _setup(lab, "no-checkout")
    clone = out.parent / "clone"
    git(out.parent, "clone", "-q", "--no-checkout", str(origin), str(clone))
    return _bisect_ok(lab, clone, shas, cache, out)


def worktree_checkout(lab: Lab) -> Observed:
    origin, shas, cache, out = _setup(lab, "worktree")
    linked = out.parent / "linked"
    git(origin, "worktree", "add", "-q", str(linked), shas[3])
    return _bisect_ok(lab, linked, shas, cache, out, f"{shas[0]}..{shas[-1]}")


def shallow_clone(lab: Lab) -> Observed:
    origin, shas, cache, out = _setup(lab, "shallow")
    clone = out.parent / "clone"
    git(out.parent, "clone", "-q", "--depth", "3", f"file://{origin}", str(clone))
    got = _clean_error(lab.bisect(clone, f"{shas[0]}..main", cache, out, "-q"), "fetch --unshallow")
    if got.outcome is Outcome.CLEAN_ERROR:  # the advice works
        git(clone, "fetch", "-q", "--unshallow")
        fixed = _bisect_ok(lab, clone, shas, cache, out, f"{shas[0]}..main")
        if fixed.outcome is not Outcome.UNAFFECTED:
            return fixed
        got.recover_s = float(fixed.detail.split(" in ")[1].split(" s")[0])
    return got


def missing_blobs_outside_src(lab: Lab) -> Observed:
    """Like the real MB mirror: some blobs outside ``src/`` are gone from the object store."""
    origin, shas, cache, out = _setup(lab, "missing-blobs")
    clone = out.parent / "clone"
    subprocess.run(["cp", "-a", str(origin), str(clone)], check=True)
    gone = []
    for sha in shas[:6]:
        blob = git(clone, "rev-parse", f"{sha}:README")
        loose = clone / ".git" / "objects" / blob[:2] / blob[2:]
        if loose.exists():
            loose.unlink()
            gone.append(blob)
    if not gone:
        return Observed(Outcome.LOST, 0.0, "no loose README blob to remove")
    return _bisect_ok(lab, clone, shas, cache, out)


def fetch_during_bisect(lab: Lab) -> Observed:
    """``git fetch`` keeps writing the user's repository (new objects, refs) while the bisect runs."""
    origin, shas, cache, out = _setup(lab, "fetch-during")
    upstream = out.parent / "upstream"
    git(out.parent, "clone", "-q", str(origin), str(upstream))
    stop = threading.Event()

    def keep_fetching() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            (upstream / "NEWS").write_text(f"news {n}\n")
            commit_all(upstream, f"news {n}", n % 28)
            git(origin, "fetch", "-q", str(upstream), "main:refs/remotes/up/main")

    writer = threading.Thread(target=keep_fetching, daemon=True)
    writer.start()
    try:
        proc = lab.bisect(origin, f"{shas[0]}..{shas[-1]}", cache, out, "-q", env={"FAULTS_EVAL_SLEEP": "0.2"})
    finally:
        stop.set()
        writer.join(timeout=60)
    if proc.rc != 0 or "Traceback" in proc.err or lab.culprit(out) != shas[7]:
        return Observed(Outcome.LOST, proc.wall_s, f"rc={proc.rc}: {proc.err[-400:]}")
    return Observed(Outcome.UNAFFECTED, 0.0, "culprit found while fetches landed")


# ---------------------------------------------------------------- configuration


def _harness_in(cwd: Path, *args: str) -> Proc:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.monotonic()
    p = subprocess.run([*HARNESS, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return Proc(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)


def unknown_config_keys(lab: Lab) -> Observed:
    """A misspelt ``[tool.harness.slrum]`` table in pyproject.toml: refused, never ignored."""
    repo, _shas, cache, out = _setup(lab, "config-keys")
    project = out.parent / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.harness.slrum]\npartition = "batch"\n')
    args = ["bisect", RANGE, "--repo", str(repo), "--cache-dir", str(cache), "--out", str(out), "-q"]
    return _clean_error(_harness_in(project, *args, "--executor", "slurm"), "slrum")


def missing_fixtures_root(lab: Lab) -> Observed:
    where = lab.fresh("fixtures-missing")
    proc = _harness_in(where, "run", "--fixtures", str(where / "nowhere"), "--out", str(where / "out"), "-q")
    return _clean_error(proc, "nowhere")


def missing_suites_root(lab: Lab) -> Observed:
    where = lab.fresh("suites-missing")
    proc = _harness_in(where, "run", "--suites-dir", str(where / "nowhere"), "--out", str(where / "out"), "-q")
    return _clean_error(proc, "nowhere")


def uncreatable_run_out(lab: Lab) -> Observed:
    where = lab.fresh("run-out-uncreatable")
    (where / "a-file").write_text("x\n")
    args = ["run", "--suite", "cp_constraints", "--import", "light", "--out", str(where / "a-file" / "out"), "-q"]
    return _clean_error(_harness_in(where, *args), "a-file")
