"""The mutation catalogue is well-formed and applies to the installed Megatron-Bridge.

Fast checks read files only (no MB import, no subprocess). One end-to-end mutant run (marked
slow) injects one fault into a temporary copy of MB and checks the suites catch it.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from harness import runner
from harness.errors import EnvironmentProblem
from harness.mutations import CATALOGUE, Fault, installed_package_dir, load_catalogue

FAULTS = load_catalogue()


def _pkg() -> Path:
    try:
        return installed_package_dir()
    except EnvironmentProblem:
        pytest.skip("megatron.bridge is not installed here")


def test_catalogue_well_formed():
    assert CATALOGUE.is_file()
    assert len(FAULTS) >= 15
    ids = [f.id for f in FAULTS]
    assert len(ids) == len(set(ids)), "fault ids are unique"
    known = set(runner.available_suites())
    for f in FAULTS:
        assert f.id and f.id.replace("_", "").isalnum(), f.id
        assert f.search and f.search != f.replace, f.id
        assert f.description, f.id
        assert f.suites and set(f.suites) <= known, f"{f.id}: unknown suites {set(f.suites) - known}"
        assert not Path(f.file).is_absolute() and ".." not in Path(f.file).parts
    assert {s for f in FAULTS for s in f.suites} >= {
        "offline_packed_dataset",
        "padding_loss_masks",
        "cp_constraints",
        "forward_cpu",
        "packing_algorithms",
    }


@pytest.mark.parametrize("fault", FAULTS, ids=[f.id for f in FAULTS])
def test_fault_applies_to_installed_mb(fault: Fault, tmp_path):
    pkg = _pkg()
    assert fault.occurrences(pkg) == 1, f"{fault.id}: search text must occur exactly once in {fault.file}"
    dest = tmp_path / fault.file
    dest.parent.mkdir(parents=True)
    shutil.copy(pkg / fault.file, dest)
    assert fault.apply(tmp_path)
    text = dest.read_text()
    assert fault.replace in text and text.count(fault.search) == 0 or fault.search in fault.replace
    ast.parse(text)  # the mutant still compiles: a fault is a behaviour change, not a syntax error


def test_missing_search_text_is_not_applicable(tmp_path):
    f = Fault("x", "a.py", "needle", "pin", ("cp_constraints",), "d")
    (tmp_path / "a.py").write_text("hay\n")
    assert not f.apply(tmp_path) and (tmp_path / "a.py").read_text() == "hay\n"
    from harness.commands.mutate import score

    assert score([{"status": "not applicable"}, {"status": "caught"}, {"status": "escaped"}]) == (1, 2, 0.5)


@pytest.mark.slow
def test_end_to_end_single_mutant(tmp_path):
    from harness.commands.mutate import run_fault

    fault = next(f for f in FAULTS if f.id == "in_batch_pad_loss_one")
    fault = type(fault)(fault.id, fault.file, fault.search, fault.replace, ("in_batch_packing",), fault.description)
    row = run_fault(fault, tmp_path, all_suites=False, timeout=600, pkg=_pkg())
    assert row["status"] == "caught", row
    assert all(c.startswith("in_batch_packing::test_pack_right_padded") for c in row["caught_by"]), row
