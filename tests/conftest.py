"""Fixtures several test modules share."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import paths
from tests.test_bisect_command import GIT_ENV, mb_repo  # noqa: F401  (the generated MB history, once per module)

ROOT = Path(__file__).resolve().parent.parent
FAKE = "harness_fake_mb"  # package name of the throwaway fake MB modules


@pytest.fixture(autouse=True)
def _golden_roots_do_not_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands export --suites-dir/--fixtures to the environment (paths.use_roots) so that the
    processes they start see them; a command run in-process by one test must not move the
    goldens of the next. Recording the variables as absent makes monkeypatch restore that."""
    for name in (paths.SUITES_ENV, paths.FIXTURES_ENV):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture
def job_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Cluster jobs are other processes: they import tests.scripted_eval from the repository root,
    and commit with the tests' git identity.

    A test run started in the background by a non-interactive shell (``cmd &``, ``nohup``) has
    SIGINT ignored, and an ignored signal is inherited by every process it starts. The executor
    gives its job controllers SIGINT back itself (``jobstate.cancellable_children``, tested with
    SIGINT ignored on purpose); the driver processes the tests start and Ctrl-C would ignore it,
    so while a test runs SIGINT is handled here (the processes it starts get the default back,
    as in a foreground run)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    previous = signal.getsignal(signal.SIGINT)
    restore = False
    if previous is signal.SIG_IGN:
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            restore = True
        except ValueError:  # not the main thread: leave it
            pass
    try:
        yield
    finally:
        if restore:
            signal.signal(signal.SIGINT, previous)


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
