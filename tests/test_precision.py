"""Precision at MB's moving head (issue 44): each false-red class, built from real material.

* the environment is the harness's: a Megatron-LM tree without its compiled dataset helpers is an
  environment ERROR (never MB's ``broken:``) until the harness builds it the way MB's
  ``initialize`` does, and then the import works; an MB copy whose MIMO entry point fills a
  config field the loader needs passes, because the adapter runs that entry point's update;
* a refusal is a decision: MB's explicit check refusing up front (a gate, or a generator before
  its first yield) is told apart from MB crashing mid-computation; a refusal where a known bug
  used to crash later is FIXED with the check named;
* known bugs follow their code: an entry's code decides where it applies, release or not; the
  code gone and every invariant holding is FIXED, the code gone and the case failing alike is a
  FAIL that says the bug moved.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.records import known as known_file
from harness.records import knowncode
from harness.records.verdict import Verdict
from harness.suite import known, knownscope
from harness.suite.adapters.refusal import PREFIX, is_refusal, up_front_check

EOS = {"invariant": "loss-mask-equals-unpacked", "tags": ["input:eos"], "impact": "drops-trained-token"}
CASE = "offline::test[prompt-mult1]"


def _entry(code: list[dict[str, str]], **kw: object) -> known_file.KnownFailure:
    doc = {
        "id": "eos-masked",
        "cases": [CASE],
        "invariants": ["loss-mask-equals-unpacked"],
        "tags": ["input:eos"],
        "reason": "r",
        "upstream": "u",
        "mb_versions": "==0.6.2",
        "impact": "drops-trained-token",
        "fixed_in": "x",
        "code": code,
        **kw,
    }
    return known_file.KnownFailure.from_json(doc)


def _package(tmp_path: Path, name: str, body: str) -> dict[str, Path]:
    pkg = tmp_path / name / "bridge"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "collate.py").write_text(textwrap.dedent(body), encoding="utf-8")
    return {"bridge": pkg}


BUGGY = """
    class Packed:
        def mask(self, tokens, loss_mask):
            # drop eos from the loss
            loss_mask[tokens == self.tokenizer.eos_id] = 0
            return loss_mask
"""
REWRAPPED = """
    class Packed:
        def mask(self, tokens, loss_mask):
            '''A docstring and a comment do not change the code.'''
            loss_mask[
                tokens == self.tokenizer.eos_id
            ] = 0  # still the bug
            return loss_mask
"""
FIXED = """
    class Packed:
        def mask(self, tokens, loss_mask):
            return loss_mask
"""


def test_a_known_bug_applies_where_its_code_is_whatever_the_version(tmp_path):
    sig = {"file": "bridge/data/collate.py", "contains": "loss_mask[tokens == self.tokenizer.eos_id] = 0"}
    entry = _entry([sig])
    buggy, rewrapped, fixed = (_package(tmp_path, n, b) for n, b in (("a", BUGGY), ("b", REWRAPPED), ("c", FIXED)))
    # main's version is past the releases the entry names: the code decides
    assert entry.applies("0.7.0", None, None, buggy) and entry.applies("0.7.0", None, None, rewrapped)
    assert not entry.applies("0.7.0", None, None, fixed)
    assert entry.applies("0.6.2", None, None, fixed)  # a release it names: reviewed there, as before
    assert not entry.applies("0.5.1", None, None, buggy)  # before its releases: the versions decide
    assert entry.era("0.5.1") == "before" and entry.era("0.6.2") == "in" and entry.era("0.7.0rc0") == "after"
    assert not entry.applies("0.7.0", None, None, {})  # no source to read: the versions decide, as before
    moved = _package(tmp_path, "d", FIXED)
    (moved["bridge"] / "data" / "elsewhere.py").write_text(textwrap.dedent(BUGGY), encoding="utf-8")
    assert entry.applies("0.7.0", None, None, moved)  # moved to another file: still found

    # applying: the failure is known
    got = known.against_known_bugs(CASE, Verdict.FAIL, [EOS], [entry], roots=buggy)
    assert got is not None and got.verdict is Verdict.KNOWN_FAIL
    # code gone, invariants hold: fixed here, and the advice does not ask to drop an entry other MBs need
    book = knownscope.Book.split([entry], "0.7.0", None, None, fixed)
    assert book.gone == {"eos-masked"} and not book.applying
    got = known.against_known_bugs(CASE, Verdict.PASS, [], [], others=book.others, gone=book.gone)
    assert got is not None and got.verdict is Verdict.FIXED and "code is gone" in got.message
    # code gone, the case fails as the bug made it fail: the bug moved, a regression
    got = known.against_known_bugs(CASE, Verdict.FAIL, [EOS], [], others=book.others, gone=book.gone)
    assert got is not None and got.verdict is Verdict.FAIL and "bug moved" in got.message and not got.entries
    # an older release without the code: not "gone", nothing is said
    older = knownscope.Book.split([entry], "0.5.1", None, None, fixed)
    assert not older.gone
    assert known.against_known_bugs(CASE, Verdict.PASS, [], [], others=older.others, gone=older.gone) is None
    # code still here while a listed case passes: the case goes, not the entry
    got = known.against_known_bugs(CASE, Verdict.PASS, [], [entry], roots=buggy)
    assert got is not None and got.verdict is Verdict.FIXED and "drop the case" in got.message


def test_a_function_fingerprint_ignores_layout_and_sees_the_body(tmp_path):
    buggy, rewrapped, fixed = (_package(tmp_path, n, b) for n, b in (("a", BUGGY), ("b", REWRAPPED), ("c", FIXED)))
    fp = knowncode.fingerprint_of(buggy["bridge"] / "data" / "collate.py", "Packed.mask")
    assert fp == knowncode.fingerprint_of(rewrapped["bridge"] / "data" / "collate.py", "Packed.mask")
    entry = _entry([{"file": "bridge/data/collate.py", "function": "Packed.mask", "fingerprint": fp}])
    assert entry.code_here(buggy) and entry.code_here(rewrapped)
    assert entry.code_here(fixed) is False
    with pytest.raises(ValueError, match="contains, or function with fingerprint"):
        knowncode.CodeSignature.from_json({"file": "bridge/x.py", "function": "f"})


GATES = """
    def validate(cfg):
        if cfg.micro_batch_size != 1:
            raise ValueError("native packing requires micro_batch_size=1.")

    def sampler(n, drop_last):
        if not drop_last and n % 2:
            raise ValueError("drop_last=False is unsupported for a partial distributed batch")
        for i in range(n):
            yield i

    def late_sampler(n):
        for i in range(n):
            yield i
        raise ValueError("ran out")

    def collate(rows, width):
        if max(len(r) for r in rows) > width:
            raise ValueError("row exceeds configured sequence_length")

    def finalize(cfg):
        return cfg.seq_length + None
"""


def _raised(call):
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("did not raise")


def test_an_up_front_refusal_is_told_from_a_crash(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from harness.owners import encode_roots
    from harness.suite import outcome

    root = tmp_path / "megatron" / "bridge"
    root.mkdir(parents=True)
    (root / "gates.py").write_text(textwrap.dedent(GATES), encoding="utf-8")
    monkeypatch.setenv("HARNESS_MB_ROOTS", encode_roots([root]))
    monkeypatch.syspath_prepend(str(tmp_path / "megatron"))
    import importlib

    gates = importlib.import_module("bridge.gates")
    refused = _raised(lambda: gates.validate(SimpleNamespace(micro_batch_size=2)))
    assert up_front_check(refused).endswith("in validate")
    assert up_front_check(_raised(lambda: list(gates.sampler(3, False)))).endswith("in sampler")
    assert up_front_check(_raised(lambda: list(gates.late_sampler(2)))) is None  # after batches were made
    assert up_front_check(_raised(lambda: gates.collate([[1, 2, 3]], 2))) is None  # mid-computation: a crash
    assert up_front_check(_raised(lambda: gates.finalize(SimpleNamespace(seq_length=1)))) is None  # not a check

    info = pytest.ExceptionInfo.from_exception(refused)
    verdict, refusal, _ = outcome.verdict_of(info, False, None)
    assert verdict is Verdict.FAIL and refusal.startswith(PREFIX) and "gates.py" in refusal
    assert outcome.case_impacts(verdict, refusal, info, []) == ["refuses-valid-config"]
    crash = pytest.ExceptionInfo.from_exception(_raised(lambda: gates.collate([[1, 2, 3]], 2)))
    verdict, message, _ = outcome.verdict_of(crash, False, None)
    assert message.startswith("Megatron raised") and outcome.case_impacts(verdict, message, crash, []) == ["crash"]

    # a known bug recorded the configuration misbehaving later: refused up front now is FIXED
    entry = _entry([], message="a micro-batch of 0 rows", invariants=["rule"], tags=[])
    got = known.against_known_bugs(CASE, Verdict.FAIL, [], [], refusal, others=[entry])
    assert got is not None and got.verdict is Verdict.FIXED and "refused up front" in got.message
    assert known.against_known_bugs(CASE, Verdict.FAIL, [], [], message, others=[entry]) is None  # a crash stays a fail
    assert is_refusal(f"assertion failed: {refusal}") and not is_refusal(message)


# --- slow: a real Megatron-LM build artifact, real MB copies -------------------------------------

GENERIC_MAKEFILE = (
    "# the harness's own rule (not Megatron-LM's file): a pybind11 module from helpers.cpp\n"
    "helpers_cpp$(shell python3-config --extension-suffix): helpers.cpp\n"
    "\t$(CXX) -O1 -shared -std=c++17 -fPIC $(shell python3 -m pybind11 --includes) $< -o $@\n"
)


def _core_tree(tmp_path: Path) -> Path:
    """A source tree of the installed megatron-core without its compiled helpers, and a Makefile."""
    from harness.paths import package_dir

    core = package_dir("megatron.core")
    if core is None or not (core / "datasets" / "helpers.cpp").is_file():
        pytest.skip("no installed megatron-core with its helpers.cpp")
    tree = tmp_path / "mlm"
    shutil.copytree(core, tree / "megatron" / "core", ignore=shutil.ignore_patterns("__pycache__", "helpers_cpp*.so"))
    return tree


CLASSIFY = """
import pytest
from harness.suite.outcome import verdict_of
try:
    from megatron.core.datasets import helpers
    print("IMPORTED", helpers.build_sample_idx_int32 is not None)
except Exception:
    verdict, message, _ = verdict_of(pytest.ExceptionInfo.from_current(), False, None)
    print(verdict.value, message)
"""


def _classified(tree: Path) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
        "HARNESS_MB_ROOTS": str(tree / "megatron"),
    }
    proc = subprocess.run([sys.executable, "-c", CLASSIFY], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_an_unbuilt_megatron_lm_extension_is_an_environment_error_until_built(tmp_path):
    from harness.repository.corebuild import LOG, ensure_helpers, helpers_built

    tree = _core_tree(tmp_path)
    datasets = tree / "megatron" / "core" / "datasets"
    (datasets / "Makefile").write_text("helpers_cpp:\n\texit 1\n", encoding="utf-8")  # a build that fails
    assert not helpers_built(tree)
    reason = ensure_helpers(tree)
    assert reason and "compile_helpers()" in reason and (datasets / LOG).is_file()
    line = _classified(tree)
    assert line.startswith("error environment:"), line
    assert "build artifact" in line and "compile_helpers()" in line, line  # the cause is named

    (datasets / "Makefile").write_text(GENERIC_MAKEFILE, encoding="utf-8")
    assert ensure_helpers(tree) is None, (datasets / LOG).read_text()[-2000:]
    assert helpers_built(tree) and not (datasets / LOG).exists()
    assert _classified(tree) == "IMPORTED True"


def _copy_run(tmp_path: Path, name: str, edits: list[dict[str, str]], suite: str, keyword: str):
    from harness.commands import mutate
    from harness.mutations import Fault, installed_package_dir

    try:
        pkg = installed_package_dir()
    except RuntimeError:
        pytest.skip("megatron.bridge is not installed here")
    fault = Fault.from_json({"id": name, "kind": "fix", "edits": edits, "suites": [suite], "description": name})
    result = mutate.run_copy(fault, tmp_path / name, [suite], timeout=600, pkg=pkg, keyword=keyword)
    assert result is not None, f"{name} does not apply to the installed MB"
    return {c.case_id: c for c in result.cases}


LOADER_NEEDS_EVAL_MBS = {
    "file": "data/megatron_mimo/loaders.py",
    "search": "    # Use cached grids from build_model()\n",
    "replace": "    if cfg.train.micro_batch_size % cfg.validation.eval_micro_batch_size:  # None: TypeError\n"
    "        raise ValueError('eval micro-batch must divide the micro-batch')\n"
    "    # Use cached grids from build_model()\n",
}
UPDATE_FILLS_EVAL_MBS = {
    "file": "training/config.py",
    "search": "    cfg.checkpoint.finalize()\n    if cfg.profiling is not None:\n",
    "replace": "    cfg.checkpoint.finalize()\n"
    "    if cfg.validation.eval_micro_batch_size is None:\n"
    "        cfg.validation.eval_micro_batch_size = cfg.train.micro_batch_size\n"
    "    if cfg.profiling is not None:\n",
}


@pytest.mark.slow
def test_the_mimo_adapter_runs_what_mbs_entry_point_updates_before_the_loaders(tmp_path):
    """As on MB main: the MIMO loader divides by ``validation.eval_micro_batch_size``, which MB's
    MIMO entry point fills in ``megatron_mimo_runtime_config_update``. The adapter runs that update,
    so the case passes; where the update does not fill it, the same case is MB crashing."""
    keyword = "test_drop_last_through_mb_mimo_loader and mock"
    with_update = _copy_run(
        tmp_path, "entry_point_fills", [LOADER_NEEDS_EVAL_MBS, UPDATE_FILLS_EVAL_MBS], "mimo_dataset", keyword
    )
    assert with_update and all(c.verdict is Verdict.PASS for c in with_update.values()), {
        k: (c.verdict, c.message[:300]) for k, c in with_update.items()
    }
    without = _copy_run(tmp_path, "entry_point_leaves_it", [LOADER_NEEDS_EVAL_MBS], "mimo_dataset", keyword)
    assert without and all(c.verdict is Verdict.FAIL and "crash" in c.impacts for c in without.values()), {
        k: (c.verdict, c.message[:300]) for k, c in without.items()
    }


SAMPLER_REFUSES_PARTIAL_TAIL = {
    "file": "data/samplers.py",
    "search": '        """Yields lists of indices for each microbatch assigned to this rank."""\n        batch = []\n',
    "replace": '        """Yields lists of indices for each microbatch assigned to this rank."""\n'
    "        remaining = self.total_samples - self.consumed_samples\n"
    "        partial = remaining % self.micro_batch_times_data_parallel_size\n"
    "        if not self.drop_last and self.micro_batch_times_data_parallel_size > self.micro_batch_size and partial:\n"
    '            raise ValueError("drop_last=False is unsupported for a partial distributed batch")\n'
    "        batch = []\n",
}


@pytest.mark.slow
def test_a_refusal_up_front_where_a_known_bug_crashed_later_is_fixed(tmp_path):
    """MB's sampler refusing a partial distributed tail up front (as main does) turns the cases of
    known bug single-sampler-empty-tail-micro-batch (an empty micro-batch crashing the last step)
    into FIXED, the sampler's check named; never a crash."""
    cases = _copy_run(
        tmp_path, "sampler_refuses_tail", [SAMPLER_REFUSES_PARTIAL_TAIL], "data_loaders", "single and keep"
    )
    assert cases
    for case in cases.values():
        assert case.verdict is Verdict.FIXED, (case.case_id, case.verdict, case.message[:400])
        assert case.known == ["single-sampler-empty-tail-micro-batch"]
        assert "refused up front" in case.message and "data/samplers.py" in case.message


VERSION_070 = {"file": "package_info.py", "search": "MINOR = 6\nPATCH = 2\n", "replace": "MINOR = 7\nPATCH = 0\n"}


@pytest.mark.slow
def test_a_known_bug_follows_its_code_past_its_versions(tmp_path):
    """A copy of 0.6.2 that calls itself 0.7.0 (a source checkout of main): the EOS-masking code is
    still there, so its cases are known-fail, not fail; with the code removed by its fix, they are
    FIXED, saying the code is gone."""
    catalogue = json.loads((Path(known.__file__).parents[1] / "mutations" / "catalogue.json").read_text())
    fix = next(f for f in catalogue["faults"] if f["id"] == "fix_eos_kept_padding_masked")
    keyword = "test_packed_equals_unpacked and prompt and mult1 and not full and not eod and not pad"
    still = _copy_run(tmp_path, "version_070", [VERSION_070], "offline_packed_dataset", keyword)
    case = still["offline_packed_dataset::test_packed_equals_unpacked[prompt-mult1]"]
    assert case.verdict is Verdict.KNOWN_FAIL and "packed-collate-masks-eos-inputs@0.6.2" in case.known, case.message
    gone = _copy_run(tmp_path, "version_070_fixed", [VERSION_070, *fix["edits"]], "offline_packed_dataset", keyword)
    case = gone["offline_packed_dataset::test_packed_equals_unpacked[prompt-mult1]"]
    assert case.verdict is Verdict.FIXED and "code is gone" in case.message, (case.verdict, case.message[:400])


def test_only_a_module_its_makefile_builds_is_a_build_artifact(tmp_path, monkeypatch):
    """``pkg.ext_cpp`` (the Makefile's LIBNAME) missing is the environment's; ``pkg.ext`` (a prefix
    of the Makefile's ``ext.cpp`` source, a Python module that should exist) missing is not."""
    import types

    from harness.errors import EnvironmentProblem
    from harness.suite.adapters.failures import _unbuilt_artifact

    (tmp_path / "Makefile").write_text("LIBNAME = ext_cpp\nSRC = ext.cpp\n", encoding="utf-8")
    package = types.ModuleType("harnesstestpkg")
    package.__path__ = [str(tmp_path)]
    monkeypatch.setitem(sys.modules, "harnesstestpkg", package)
    built = _unbuilt_artifact(ModuleNotFoundError("no ext_cpp", name="harnesstestpkg.ext_cpp"))
    assert isinstance(built, EnvironmentProblem) and "build artifact" in str(built)
    assert _unbuilt_artifact(ModuleNotFoundError("no ext", name="harnesstestpkg.ext")) is None
