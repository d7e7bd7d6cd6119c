"""The fault-injection matrix as CI tests: each row fails when its outcome gets worse than the
matrix says (tests/faults/matrix.py lists the rows; bench/bench_faults.py prints the table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.lab import Lab
from tests.faults.matrix import ROWS, Row


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return Lab(tmp_path_factory.mktemp("faults"))


@pytest.mark.parametrize("row", [r for r in ROWS if not r.covered_by], ids=lambda r: r.key)
def test_fault_outcome_is_no_worse_than_the_matrix(row: Row, lab: Lab) -> None:
    if row.untestable:
        pytest.skip(row.untestable)
    assert row.run is not None
    got = row.run(lab)
    assert got.outcome <= row.expected, (
        f"{row.fault}: {got.outcome.label} (expected {row.expected.label}): {got.detail}"
    )


def test_rows_covered_elsewhere_name_existing_tests() -> None:
    root = Path(__file__).resolve().parents[2]
    for row in ROWS:
        if row.covered_by:
            path, _, name = row.covered_by.partition("::")
            assert name and f"def {name.split('[')[0]}(" in (root / path).read_text(), row.covered_by
