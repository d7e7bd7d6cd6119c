"""What a user can cause ends in one line on stderr and exit 2, never a traceback: a missing MB
for ``harness mutate``, a malformed fault catalogue or upstream selection; a fork server that
cannot start is no error at all (the run falls back to a plain subprocess, see
tests/test_forkserver.py for the note it leaves)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

from harness import cli, procs
from harness.errors import CorruptFile
from harness.mutations import load_catalogue
from harness.suiterun import forkserver
from harness.suiterun.upstream import selection


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), err
    return lines[0]


def test_mutate_without_an_installed_mb(capsys, monkeypatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec

    def no_mb(name: str, *args, **kwargs):
        return None if name.startswith("megatron.bridge") else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", no_mb)
    line = one_line_error(capsys, ["mutate", "--out", str(tmp_path / "out")])
    assert "megatron.bridge is not importable" in line


@pytest.mark.parametrize(
    "text",
    ["{not json", json.dumps({"faults": [{"id": "x"}]}), json.dumps({"nothing": []}), json.dumps([1, 2])],
    ids=["invalid-json", "fault-without-fields", "no-faults-key", "a-list"],
)
def test_malformed_mutation_catalogue(capsys, tmp_path: Path, text: str) -> None:
    bad = tmp_path / "catalogue.json"
    bad.write_text(text)
    with pytest.raises(CorruptFile, match="not a fault catalogue"):
        load_catalogue(bad)
    line = one_line_error(capsys, ["mutate", "--catalogue", str(bad), "--out", str(tmp_path / "out")])
    assert str(bad) in line


SELECTION_OK = {"kind": selection.SELECTION_KIND, "schema": 1, "entries": []}


@pytest.mark.parametrize(
    "doc",
    [
        "{",
        {**SELECTION_OK, "schema": 2},
        {**SELECTION_OK, "entries": [{"name": "x"}]},
        {**SELECTION_OK, "entries": [{"name": "x", "variants": [{"era": "e"}]}]},
        {**SELECTION_OK, "count_rule": "most"},
        {**SELECTION_OK, "entries": "abc"},
    ],
    ids=["invalid-json", "newer-schema", "no-variants", "variant-without-file", "unknown-rule", "entries-not-a-list"],
)
def test_malformed_upstream_selection(capsys, monkeypatch, tmp_path: Path, doc) -> None:
    bad = tmp_path / "selection.json"
    bad.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(CorruptFile, match=re.escape("selection.json: not a valid")):
        selection.load_selection(bad)
    # through the CLI: `harness run --suite upstream` on a checkout-shaped tree
    mb = tmp_path / "mb"
    (mb / "src" / "megatron" / "bridge").mkdir(parents=True)
    (mb / "tests").mkdir()
    monkeypatch.setattr(selection, "SELECTION_FILE", bad)
    line = one_line_error(capsys, ["run", "--suite", "upstream", "--mb-src", str(mb), "--out", str(tmp_path / "o")])
    assert str(bad) in line


def test_the_shipped_selection_and_catalogue_load() -> None:
    assert selection.load_selection().entries and load_catalogue()


def test_a_fork_server_that_cannot_be_spawned_is_a_fork_server_error(monkeypatch, tmp_path: Path) -> None:
    """The runner falls back to a plain subprocess on ForkServerError; an OSError from spawning
    the server (too many open files, no memory) escaped as a traceback."""

    def cannot_spawn(cmd, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(procs, "popen_owned", cannot_spawn)
    too_many = r"could not be started: .*Too many open files"
    with (
        pytest.raises(forkserver.ForkServerError, match=too_many),
        forkserver.ServerPool().lease("k", dict(os.environ), tmp_path, 1),
    ):
        pass


def test_a_fork_server_that_never_answers_is_a_fork_server_error(monkeypatch, tmp_path: Path) -> None:
    """A real server process that is not ready in time is stopped, and the caller told so."""
    monkeypatch.setattr(forkserver, "START_TIMEOUT_S", 0.01)
    pool = forkserver.ServerPool()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with pytest.raises(forkserver.ForkServerError, match="did not start"), pool.lease("k", env, tmp_path, 1):
        pass
    assert pool.keys() == [], "the failed server is not kept"
