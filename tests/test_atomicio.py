"""Versioned atomic files: migration, refusal of newer versions, no torn writes."""

from __future__ import annotations

import json

import pytest

from harness.errors import CorruptFile
from harness.records.atomicio import atomic_write_text, read_versioned_json, write_versioned_json


def test_round_trip_and_migration(tmp_path):
    p = tmp_path / "f.json"
    write_versioned_json(p, "k", 1, {"a": 1})
    doc = read_versioned_json(p, "k", 2, {1: lambda d: {**d, "b": d["a"] * 2}})
    assert doc["schema_version"] == 2 and doc["b"] == 2


def test_old_version_without_migration_is_refused(tmp_path):
    p = tmp_path / "f.json"
    write_versioned_json(p, "k", 1, {})
    with pytest.raises(CorruptFile, match="too old"):
        read_versioned_json(p, "k", 3)


def test_failed_write_keeps_old_content(tmp_path, monkeypatch):
    p = tmp_path / "f.txt"
    atomic_write_text(p, "old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(p, "new")
    assert p.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["f.txt"]


def test_missing_header_is_corrupt(tmp_path):
    p = tmp_path / "f.json"
    p.write_text(json.dumps({"kind": "k"}))
    with pytest.raises(CorruptFile, match="schema_version"):
        read_versioned_json(p, "k", 1)


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600), (0o027, 0o640)])
def test_written_files_honour_the_umask(tmp_path, umask, mode):
    """Reports, histories and JUnit files get the mode open(path, "w") would give them, not
    mkstemp's 0o600 (teammates and web servers must be able to read them)."""
    import os
    import stat

    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "report.html", "<html></html>")
        write_versioned_json(tmp_path / "results.json", "k", 1, {})
        (tmp_path / "plain.txt").write_text("x")  # the reference: what a plain write gives
    finally:
        os.umask(old)
    for name in ("report.html", "results.json", "plain.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_a_record_reads_the_fields_its_class_has_and_decodes_the_others() -> None:
    import dataclasses

    from harness.records.atomicio import record_from

    @dataclasses.dataclass
    class Rec:
        name: str
        size: int = 0
        kind: str = "plain"

    # a newer writer's extra key is dropped, an absent field takes its default, decoded wins
    got = record_from(Rec, {"name": "a", "extra": 1, "kind": "raw"}, kind="decoded")
    assert got == Rec("a", 0, "decoded")
    assert record_from(Rec, None, name="b") == Rec("b")


def test_a_field_of_the_wrong_shape_is_a_type_error_never_a_misread() -> None:
    from harness.records import fields

    doc = {"files": "a.py", "n": [1], "seen": ["x"], "ok": ["a", 2], "count": "3", "none": None}
    with pytest.raises(TypeError, match="'files': expected a list"):
        fields.texts(doc, "files")  # a string would read as its characters
    with pytest.raises(TypeError, match="'n': expected a number"):
        fields.whole(doc, "n")
    with pytest.raises(TypeError, match="'seen': expected an object"):
        fields.text_map(doc, "seen")
    assert fields.texts(doc, "ok") == ["a", "2"]
    assert fields.whole(doc, "count") == 3 and fields.whole(doc, "none", 7) == 7
    assert fields.number(doc, "absent", 1.5) == 1.5
    assert fields.optional_text(doc, "none") is None and fields.text(doc, "none", "d") == "d"
