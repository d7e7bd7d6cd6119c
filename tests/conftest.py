"""Fixtures several test modules share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_bisect_command import GIT_ENV, mb_repo  # noqa: F401  (the generated MB history, once per module)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def job_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cluster jobs are other processes: they import tests.scripted_eval from the repository root,
    and commit with the tests' git identity."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
