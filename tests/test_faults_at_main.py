"""Catalogue faults in code newer than the installed MB, each turning a case red at MB main.

Why: a check of a packing path that only MB main has (its feature ledger entry newer than the
installed release) must be proven by breaking MB too, and the installed MB cannot be broken
there. The catalogue names such a fault's feature (``since``); here, where the mirrors are (not on
CI: skipped), a plain clone of MB main with only ``src/`` materialised gets the fault's edits and
the fault's suites run against it with the Megatron-LM it pins: some case must fail that does not
fail on the unmutated clone. The user's mirrors are only read (``git clone --shared``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.mutations import Fault, load_catalogue

MB_MIRROR = Path(os.environ.get("HARNESS_MB_MIRROR", "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"))
MLM_MIRROR = Path(os.environ.get("HARNESS_MLM_MIRROR", "/work/.mirror/NVIDIA+Megatron-LM/repo"))
FAULTS = [f for f in load_catalogue() if f.since and not f.is_fix]
FIXES = [f for f in load_catalogue() if f.since and f.is_fix]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (MB_MIRROR.is_dir() and MLM_MIRROR.is_dir()),
        reason="no Megatron-Bridge and Megatron-LM mirrors (set HARNESS_MB_MIRROR, HARNESS_MLM_MIRROR)",
    ),
]


def _clone(dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(MB_MIRROR), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", "HEAD", "--", "src", "pyproject.toml"], check=True)
    return dest


def _verdicts(src: Path, suites: tuple[str, ...], out: Path) -> dict[str, str]:
    cmd = [sys.executable, "-m", "harness", "run", "--mb-src", str(src), "--megatron-lm", str(MLM_MIRROR)]
    for suite in suites:
        cmd += ["--suite", suite]
    proc = subprocess.run([*cmd, "--out", str(out), "-q"], capture_output=True, text=True, timeout=1800)
    results = out / "results.json"
    assert results.is_file(), proc.stderr[-2000:]
    return {c["case_id"]: c["verdict"] for c in json.loads(results.read_text())["cases"]}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The verdicts of every suite a fault here names, on MB main unmutated."""
    work = tmp_path_factory.mktemp("main-baseline")
    suites = tuple(sorted({s for f in FAULTS + FIXES for s in f.suites}))
    return _verdicts(_clone(work / "mb"), suites, work / "out")


def test_every_fault_in_newer_code_names_a_ledger_feature_main_has():
    """The faults this module runs exist, and each names the feature whose code it edits."""
    from harness import features

    assert FAULTS, "no catalogue fault edits code newer than the installed MB"
    assert all(f.since in features.FEATURES for f in FAULTS)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.id for f in FAULTS])
def test_fault_in_newer_code_turns_a_case_red_at_main(fault: Fault, baseline: dict[str, str], tmp_path: Path):
    clone = _clone(tmp_path / "mb")
    assert fault.apply(clone / "src" / "megatron" / "bridge"), f"{fault.id} does not apply to MB main"
    verdicts = _verdicts(clone, fault.suites, tmp_path / "out")
    red = sorted(c for c, v in verdicts.items() if v == "fail" and baseline.get(c) != "fail")
    assert red, f"{fault.id}: no case of {fault.suites} turns red at MB main"


@pytest.mark.parametrize("fix", FIXES, ids=[f.id for f in FIXES])
def test_fix_in_newer_code_turns_a_red_case_green_at_main(fix: Fault, baseline: dict[str, str], tmp_path: Path):
    """A fix mutant of a bug in newer code (a known entry's ``fix_mutant``) makes some case that fails, or is
    known-failing, on MB main pass, and turns nothing red."""
    clone = _clone(tmp_path / "mb")
    assert fix.apply(clone / "src" / "megatron" / "bridge"), f"{fix.id} does not apply to MB main"
    verdicts = _verdicts(clone, fix.suites, tmp_path / "out")
    # "fixed": the case passes where its known entry still applies (the entry's code is still there)
    healed = sorted(
        c for c, v in verdicts.items() if v in ("pass", "fixed") and baseline.get(c) in ("fail", "known-fail")
    )
    broken = sorted(c for c, v in verdicts.items() if v == "fail" and baseline.get(c) != "fail")
    assert healed, f"{fix.id}: no failing case of {fix.suites} passes with the fix at MB main"
    assert not broken, f"{fix.id}: turns red at MB main: {broken}"
