"""The names of a pytest item in the harness's terms: its suite, case, case id and tier.

Why a module: the plugin (verdicts), the golden fixture (:mod:`harness.suite.goldenfixture`) and the
light-import selection name a case the same way, by :func:`harness.contract.case_id`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import contract


def suite_of(item: pytest.Item) -> str:
    name = Path(str(item.fspath)).stem
    return name[5:] if name.startswith("test_") else name


def tier_of(item: pytest.Item) -> str:
    """``hypothetical`` for a case whose input no MB producer emits (``@pytest.mark.hypothetical``):
    run and reported apart, it never fails a run or a nightly; ``documented`` for every other."""
    return HYPOTHETICAL if item.get_closest_marker("hypothetical") is not None else DOCUMENTED


HYPOTHETICAL, DOCUMENTED = "hypothetical", "documented"


def case_of(item: pytest.Item) -> str:
    owner = getattr(item, "cls", None)
    return (owner.__name__ + "." if owner else "") + item.name


def item_case_id(item: pytest.Item) -> str:
    return contract.case_id(suite_of(item), case_of(item))
