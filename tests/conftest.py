"""Shared test set-up for the harness's own tests."""

from __future__ import annotations

import pytest

from harness import paths


@pytest.fixture(autouse=True)
def _golden_roots_do_not_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands export --suites-dir/--fixtures to the environment (paths.use_roots) so that the
    processes they start see them; a command run in-process by one test must not move the
    goldens of the next. Recording the variables as absent makes monkeypatch restore that."""
    for name in (paths.SUITES_ENV, paths.FIXTURES_ENV):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
