"""The fork server (how bisect runs light-import cases): same verdicts, no state between targets."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.paths import mb_location
from harness.records.verdict import Verdict
from harness.suiterun import runner
from harness.target import Target
from tests import faults

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(mb_location() is None, reason="no megatron.bridge installed (run scripts/setup.sh)"),
]

SUITES = ["packed_seq_params", "packing_algorithms"]


def _copy_mb(dest: Path) -> Path:
    spec = importlib.util.find_spec("megatron.bridge")
    pkg = dest / "src" / "megatron" / "bridge"
    shutil.copytree(next(iter(spec.submodule_search_locations)), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return pkg


def _verdicts(
    tgt: Target, out: Path, fork_server: bool, suites: list[str] = SUITES, mode: str = "light"
) -> dict[str, str]:
    opts = runner.RunOptions(suites=suites, import_mode=mode, fork_servers=2 if fork_server else 0)
    result = runner.run_suites(tgt, opts, out, progress=None)
    assert not [n for n in result.notes if "fork server" in n], result.notes
    return {c.case_id: c.verdict.value for c in result.cases}


def test_forked_runs_match_subprocess_runs_and_do_not_leak_between_targets(tmp_path: Path) -> None:
    clean = _copy_mb(tmp_path / "clean")
    faulty = _copy_mb(tmp_path / "faulty")
    faults.CU_SEQLENS_OFF_BY_ONE.apply_to(faulty)
    clean_t = Target(src=clean.parent.parent, commit="clean")
    faulty_t = Target(src=faulty.parent.parent, commit="faulty")

    plain = _verdicts(clean_t, tmp_path / "plain", fork_server=False)
    forked_clean = _verdicts(clean_t, tmp_path / "f1", fork_server=True)
    forked_faulty = _verdicts(faulty_t, tmp_path / "f2", fork_server=True)  # same server, other target
    forked_clean_again = _verdicts(clean_t, tmp_path / "f3", fork_server=True)

    assert plain and set(plain.values()) <= {"pass", "known-fail"} and "pass" in plain.values()
    assert forked_clean == plain, "a forked run gives the verdicts of a fresh process"
    caught = {c for c, v in forked_faulty.items() if v == "fail"}
    assert caught and all(faults.CU_SEQLENS_OFF_BY_ONE.caught_by(c) for c in caught), forked_faulty
    assert forked_clean_again == plain, "nothing of the faulty target's import survives into the next run"


def test_full_import_cases_run_in_a_server_of_their_own_with_a_fresh_processs_verdicts(tmp_path: Path) -> None:
    """Issue 26: a probe whose open case imports MB's whole package paid that import (about 15 s)
    every time. A full-import server holds MB's third-party dependencies too (never MB): same
    verdicts as a fresh process, a rule broken in one target caught, nothing carried to the next."""
    from harness.suiterun.forkserver import POOL

    clean = _copy_mb(tmp_path / "clean")
    faulty = _copy_mb(tmp_path / "faulty")
    faults.PAD_CU_SEQLENS_RULE_DROPPED.apply_to(faulty)
    clean_t = Target(src=clean.parent.parent, commit="clean")
    faulty_t = Target(src=faulty.parent.parent, commit="faulty")
    suites = ["config_validation"]
    plain = _verdicts(clean_t, tmp_path / "plain", False, suites, "auto")
    plain_faulty = _verdicts(faulty_t, tmp_path / "p1", False, suites, "auto")
    forked_faulty = _verdicts(faulty_t, tmp_path / "f1", True, suites, "auto")
    forked_clean = _verdicts(clean_t, tmp_path / "f2", True, suites, "auto")
    assert plain and set(plain.values()) <= {"pass", "known-fail"} and "pass" in plain.values()
    assert forked_clean == plain, "a forked full-import run gives the verdicts of a fresh process"
    # the dropped rule is still enforced by the packed dataset's own assertion: CHANGED, not FAIL
    seen = {c for c, v in forked_faulty.items() if v != plain[c]}
    assert seen and all(faults.PAD_CU_SEQLENS_RULE_DROPPED.caught_by(c) for c in seen), forked_faulty
    assert forked_faulty == plain_faulty, "the faulty target's own verdicts, forked or not"
    assert any(k.endswith("(full import)") for k in POOL.keys()), POOL.keys()  # noqa: SIM118 (a pool)


def test_a_full_import_server_forks_from_the_warm_light_one_with_a_fresh_processs_verdicts(
    tmp_path: Path, monkeypatch
) -> None:
    """A run whose light group warmed the light server gets its full-import server forked from it
    (only what a full import adds is imported again), with a fresh process's verdicts; it outlives
    the light server (the pool may stop that one first) and ends when closed."""
    from harness.suiterun import forkserver

    monkeypatch.setattr(forkserver, "POOL", forkserver.ServerPool())
    pick = "test_legacy_npy_padding_rows or test_dataset_drop_last_through_mb_loader"  # one light, one full

    def verdicts(forked: bool, out: Path) -> dict[str, str]:
        opts = runner.RunOptions(suites=["padding_loss_masks"], keyword=pick, fork_servers=4 if forked else 0)
        result = runner.run_suites(Target(), opts, out, progress=None)
        assert not [n for n in result.notes if "fork server" in n], result.notes
        return {c.case_id: c.verdict.value for c in result.cases}

    plain = verdicts(False, tmp_path / "plain")
    forked = verdicts(True, tmp_path / "forked")
    assert len(plain) >= 2 and "pass" in plain.values()
    assert forked == plain, "a full-import server forked from the light one gives a fresh process's verdicts"
    servers = {k: e.server for k, e in forkserver.POOL._entries.items()}
    (full,) = [s for k, s in servers.items() if k.endswith("(full import)")]
    (light,) = [s for k, s in servers.items() if k.endswith("(light import)")]
    assert full is not None and full.proc is None, "forked from the warm light server, not started from scratch"
    assert light is not None
    light.close()
    assert full.alive(), "the full server outlives the light one it was forked from"
    forkserver.POOL.close()
    assert not full.alive()


def test_fork_server_failure_falls_back_to_a_plain_subprocess_in_one_line(tmp_path: Path, monkeypatch) -> None:
    from harness.suiterun import forkserver

    def cannot_start(self, env, cwd):
        raise forkserver.ForkServerError("simulated: the fork server did not start")

    monkeypatch.setattr(forkserver.ForkServer, "__init__", cannot_start)
    monkeypatch.setattr(forkserver, "POOL", forkserver.ServerPool())  # no warm server from an earlier test
    opts = runner.RunOptions(suites=["packed_seq_params"], import_mode="light", fork_servers=2)
    result = runner.run_suites(Target(), opts, tmp_path / "run", progress=None)
    seen = {c.verdict.value for c in result.cases}
    assert result.cases and "pass" in seen and seen <= {"pass", "known-fail"}, "the plain subprocess ran them"
    (note,) = [n for n in result.notes if "fork server" in n]
    assert note == (
        "[light import] fork server unavailable (simulated: the fork server did not start): ran as a plain subprocess"
    )


def _git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
        "PATH": "/usr/bin:/bin",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_pinned_evaluations_go_through_the_fork_server_of_their_tree(tmp_path: Path) -> None:
    """--megatron-lm: a Megatron-LM repo whose commit holds (a copy of) the installed megatron-core,
    an MB repo pinning it; the evaluation runs its light cases in that tree's fork server."""
    from harness.bisect.evaluator import MBEvaluator
    from harness.repository.pins import SUBMODULE
    from harness.suiterun.forkserver import POOL

    core_spec = importlib.util.find_spec("megatron.core")
    mlm, mb = tmp_path / "mlm", tmp_path / "mb"
    shutil.copytree(
        next(iter(core_spec.submodule_search_locations)),
        mlm / "megatron" / "core",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    _git(tmp_path, "init", "-q", "-b", "main", str(mlm))
    _git(mlm, "add", "-A")
    _git(mlm, "commit", "-q", "-m", "core")
    pin = _git(mlm, "rev-parse", "HEAD")
    _copy_mb(mb)
    _git(tmp_path, "init", "-q", "-b", "main", str(mb))
    _git(mb, "add", "-A")
    _git(mb, "update-index", "--add", "--cacheinfo", f"160000,{pin},{SUBMODULE}")
    _git(mb, "commit", "-q", "-m", "MB pinning the core")
    sha = _git(mb, "rev-parse", "HEAD")

    ev = MBEvaluator(
        mb, tmp_path / "cache" / "ws", tmp_path / "cache" / "runs", suites=("packed_seq_params",), megatron_lm=mlm
    )
    outcome = ev(sha)
    seen = set(outcome.verdicts.values())
    assert outcome.verdicts and Verdict.PASS in seen and seen <= {Verdict.PASS, Verdict.KNOWN_FAIL}, outcome.note
    assert "fork server" not in outcome.note, outcome.note
    pinned_keys = [k for k in POOL.keys() if str(tmp_path / "cache") in k]  # noqa: SIM118 (a pool, not a dict)
    assert len(pinned_keys) == 1 and pin in pinned_keys[0] and "(light import)" in pinned_keys[0], POOL.keys()


def test_preload_failure_rolls_back_only_the_failing_package(tmp_path: Path) -> None:
    """A pinned megatron-core that does not import is rolled back out of the server, so each run
    imports it afresh and fails as a fresh process would; the third-party modules it pulled in
    stay loaded (torch registers operator libraries at import and cannot be imported twice)."""
    pkg = tmp_path / "harness_fake_ns" / "broken"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import colorsys\nraise RuntimeError('does not import')\n")
    code = (
        "import sys; from harness.suite import preload as f; f.PRELOAD = ('harness_fake_ns.broken',); "
        "assert 'colorsys' not in sys.modules; f.preload(); "
        "print(sorted(m for m in sys.modules if m == 'colorsys' or m.startswith('harness_fake_ns')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(runner.__file__).parents[2])])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["['colorsys']"]
