"""A run's import groups: a probe of a few cases starts only the groups those cases are in."""

from __future__ import annotations

import re
from pathlib import Path

from harness import paths
from harness.suiterun.plan import case_groups, plan_groups

MIXED = """
import pytest

pytestmark = pytest.mark.import_group("light")


def test_light_by_module(x):
    pass


@pytest.mark.import_group("full")  # MB's loader builder
@pytest.mark.parametrize("x", [1, 2])
def test_full_by_its_own_mark(x):
    pass


@pytest.mark.import_group("full")
class TestWorlds:
    def test_in_a_full_class(self):
        pass


if SAVED:

    @pytest.mark.import_group("full")
    def test_saved_layout():
        pass


def helper():
    pass
"""


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"test_{name}.py"
    path.write_text(text)
    return path


def test_case_groups_resolve_as_the_closest_marker_does(tmp_path: Path) -> None:
    groups = case_groups(_file(tmp_path, "mixed", MIXED))
    assert groups == {
        "test_light_by_module": "light",
        "test_full_by_its_own_mark": "full",
        "test_in_a_full_class": "full",
        "test_saved_layout": "full",
    }
    assert case_groups(_file(tmp_path, "plain", "def test_unmarked():\n    pass\n")) == {"test_unmarked": "full"}
    assert case_groups(_file(tmp_path, "broken", "def test_(:\n")) == {}


def _names(plan) -> list[tuple[str | None, list[str]]]:
    return [(g.name, [f.stem for f in g.files]) for g in plan]


def test_selected_cases_start_only_their_groups(tmp_path: Path) -> None:
    mixed = _file(tmp_path, "mixed", MIXED)
    light_only = ["mixed::test_light_by_module"]
    full_only = ["mixed::test_full_by_its_own_mark[1]", "mixed::TestWorlds::test_in_a_full_class"]
    assert _names(plan_groups([mixed], "auto")) == [("light", ["test_mixed"]), ("full", ["test_mixed"])]
    assert _names(plan_groups([mixed], "auto", light_only)) == [("light", ["test_mixed"]), ("full", [])]
    assert _names(plan_groups([mixed], "auto", full_only)) == [("light", []), ("full", ["test_mixed"])]
    assert _names(plan_groups([mixed], "auto", light_only + full_only)) == _names(plan_groups([mixed], "auto"))
    # a name the text does not define (a case imported from a helper module): both groups, as before
    unknown = ["mixed::test_from_elsewhere[a]"]
    assert _names(plan_groups([mixed], "auto", unknown)) == _names(plan_groups([mixed], "auto"))
    assert _names(plan_groups([mixed], "full", light_only)) == [(None, ["test_mixed"])]


def test_every_suite_test_resolves_to_a_group_its_file_mentions() -> None:
    """The real suites: every test function has a group, and it is one the file's markers name."""
    for path in sorted(paths.suites_dir().glob("test_*.py")):
        defined = set(re.findall(r"^\s*(?:async\s+)?def (test\w*)\(", path.read_text(), re.M))
        groups = case_groups(path)
        assert defined and defined <= set(groups), (path.name, defined - set(groups))
        marked = set(re.findall(r"import_group\(\s*['\"](\w+)['\"]", path.read_text())) or {"full"}
        assert set(groups.values()) <= marked, path.name
