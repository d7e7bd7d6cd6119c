"""Versioned atomic files: migration, refusal of newer versions, no torn writes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.atomicio import atomic_write_text, read_versioned_json, write_versioned_json
from harness.errors import CorruptFile


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


def test_written_files_honour_the_umask(tmp_path):
    """mkstemp creates 0600; reports and records must be as readable as any file the user writes."""
    code = (
        "import os, sys; os.umask(0o027); from pathlib import Path; from harness.atomicio import atomic_write_text; "
        "p = Path(sys.argv[1]); atomic_write_text(p, 'x'); print(oct(p.stat().st_mode & 0o777))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f.txt")], capture_output=True, text=True)
    assert out.stdout.strip() == "0o640", out.stderr
