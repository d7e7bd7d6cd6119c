"""Shared fixtures of the harness's own tests."""

from __future__ import annotations

import sys
import textwrap

import pytest

FAKE = "harness_fake_mb"  # package name of the throwaway fake MB modules


@pytest.fixture
def fake_pkg(tmp_path, monkeypatch):
    """A throwaway package tree on sys.path; returns a writer(relpath, source)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / FAKE).mkdir()
    (tmp_path / FAKE / "__init__.py").write_text("")

    def write(rel: str, source: str) -> None:
        path = tmp_path / FAKE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))

    yield write
    for name in [m for m in sys.modules if m == FAKE or m.startswith(FAKE + ".")]:
        del sys.modules[name]
