"""bisect.json through the typed record: what is written is what is read, and older schemas still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bisect.algorithm import CaseStatus
from harness.bisect.document import (
    BisectDoc,
    CaseDoc,
    CommitMeta,
    Culprit,
    Descent,
    HeldMB,
    NotBisected,
    PinCheck,
    PinStatus,
    RangeDoc,
)
from harness.errors import CorruptFile

SCHEMA_1_KEYS = {
    "kind",
    "schema_version",
    "mode",
    "range",
    "repo",
    "commits",
    "probes",
    "attempts",
    "cases",
    "not_bisected",
    "notes",
    "duration_s",
    "evaluations",
    "new_evaluations",
    "cached_evaluations",
    "rounds",
    "jobs",
    "retries",
    "selection",
    "cache",
    "finished",
}
SCHEMA_2_KEYS = SCHEMA_1_KEYS | {"late_starts", "confirmations"}
SCHEMA_3_KEYS = SCHEMA_2_KEYS | {"held", "pin_change", "descents"}
SCHEMA_4_KEYS = SCHEMA_3_KEYS | {"partial", "probe_costs", "hint_flags"}


def _doc() -> BisectDoc:
    shas = [c * 40 for c in "abcd"]
    culprit = Culprit(shas[2], "break it", "Ada", "ada@example.com", "2026-01-02T00:00:00+00:00", ["src/x.py"], "diff")
    return BisectDoc(
        range=RangeDoc(shas[0], shas[3], 4, "v1..main", False),
        repo="/repo",
        commits=[CommitMeta(s, f"commit {s[0]}") for s in shas],
        probes={shas[0]: {"s::a": "pass", "s::b": "pass"}, shas[2]: {"s::a": "fail", "s::b": "fail"}},
        attempts={shas[0]: [{"s::a": "pass", "s::b": "pass"}]},
        cases=[
            CaseDoc("s::a", CaseStatus.FOUND, culprit, shas[1], [shas[2]], evaluations=3),
            CaseDoc("s::b", CaseStatus.FOUND, culprit, shas[1], [shas[2]], evaluations=3, source="upstream"),
            CaseDoc("s::c", CaseStatus.AMBIGUOUS, None, shas[0], shas[1:3], evaluations=4),
        ],
        not_bisected=[NotBisected("s::d", "fails at good too")],
        evaluations=5,
    )


def test_round_trip_through_the_file(tmp_path: Path) -> None:
    doc = _doc()
    doc.save(tmp_path / "bisect.json")
    on_disk = json.loads((tmp_path / "bisect.json").read_text())
    assert set(on_disk) == SCHEMA_4_KEYS
    assert on_disk["kind"] == "harness-bisect" and on_disk["schema_version"] == 4
    assert on_disk["cases"][0]["culprit"]["files"] == ["src/x.py"] and on_disk["cases"][2]["culprit"] is None
    assert BisectDoc.load(tmp_path / "bisect.json") == doc


def test_culprit_groups_name_each_commit_once_with_its_sources() -> None:
    (group,) = _doc().culprit_groups()
    assert [c.case_id for c in group.cases] == ["s::a", "s::b"]
    assert group.blamed_by == "harness suites and MB's upstream tests"


def test_a_schema_1_file_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "bisect.json"
    old = {k: v for k, v in _doc().to_json().items() if k not in SCHEMA_4_KEYS - SCHEMA_1_KEYS}
    path.write_text(json.dumps({"kind": "harness-bisect", "schema_version": 1, **old}))
    loaded = BisectDoc.load(path)
    assert loaded == _doc() and loaded.late_starts == [] and loaded.confirmations == []


def test_a_schema_2_file_reads_as_a_first_level_that_did_not_descend(tmp_path: Path) -> None:
    path = tmp_path / "bisect.json"
    old = {k: v for k, v in _doc().to_json().items() if k not in SCHEMA_4_KEYS - SCHEMA_2_KEYS}
    path.write_text(json.dumps({"kind": "harness-bisect", "schema_version": 2, **old}))
    loaded = BisectDoc.load(path)
    assert loaded == _doc() and loaded.descents == [] and loaded.held is None and loaded.pin_change is None


def test_both_levels_round_trip_with_the_second_nested_in_the_first(tmp_path: Path) -> None:
    """A first-level record with one descent (the second level's record inside) and one bump that
    was not descended: what is written is what is read."""
    second = _doc()
    second.repo = "/megatron-lm"
    second.held = HeldMB("e" * 40, repo="/mb", subject="Bump Megatron-LM")
    second.pin_change = PinCheck(PinStatus.CONFIRMED, "the change alone reproduces 2 case(s)")
    first = _doc()
    first.descents = [
        Descent("c" * 40, ["s::a", "s::b"], "1" * 40, "2" * 40, True, "4 Megatron-LM commits walked", second),
        Descent("d" * 40, ["s::c"], None, "3" * 40, False, "the commit adds the submodule"),
    ]
    first.save(tmp_path / "bisect.json")
    on_disk = json.loads((tmp_path / "bisect.json").read_text())
    assert set(on_disk["descents"][0]["doc"]) == SCHEMA_4_KEYS - {"kind", "schema_version"}
    loaded = BisectDoc.load(tmp_path / "bisect.json")
    assert loaded == first
    assert loaded.descents[0].doc is not None and loaded.descents[0].doc.held == second.held


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bisect.json"
    path.write_text(json.dumps({"kind": "harness-bisect", "schema_version": 5, **_doc().to_json()}))
    with pytest.raises(CorruptFile, match="newer"):
        BisectDoc.load(path)


def test_repo_url_is_written_only_when_known(tmp_path: Path) -> None:
    doc = _doc()
    doc.repo_url = "https://github.com/NVIDIA-NeMo/Megatron-Bridge"
    doc.save(tmp_path / "bisect.json")
    assert json.loads((tmp_path / "bisect.json").read_text())["repo_url"] == doc.repo_url
    assert BisectDoc.load(tmp_path / "bisect.json") == doc
