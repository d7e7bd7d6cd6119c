"""The child side of the ``upstream`` suite: a pytest plugin loaded into MB's own pytest run.

Loaded with ``-p harness.suite.upstream_plugin`` (see :mod:`harness.suiterun.upstream.run`). It applies
each selection entry's ``-k`` to its own file only (one pytest ``-k`` would apply to every file)
and writes one JSON line per event (session start, selection, collection errors, each test
phase with its verdict, finish) to the events file, flushed at once, so a run killed at its
time limit still reports the outcomes it reached. Verdicts are decided here, where the
exception is at hand: a limit of this environment (no CUDA, a missing third-party package) is
UNTESTABLE, anything else that fails is FAIL.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from harness.contract import MESSAGE_LIMIT, crash_line
from harness.records.verdict import Verdict


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness-upstream")
    group.addoption("--harness-upstream-spec", default=None, help="JSON: entries (name, file, k) to select")
    group.addoption("--harness-upstream-events", default=None, help="append one JSON line per event here")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # what MB's own test run imports, for the driver
        from harness import contract
        from harness.versions import versions

        contract.write_versions(versions())
    spec = config.getoption("--harness-upstream-spec")
    events = config.getoption("--harness-upstream-events")
    if spec and events and not config.pluginmanager.has_plugin("harness-upstream-events"):
        config.pluginmanager.register(_EventsPlugin(Path(spec), Path(events)), "harness-upstream-events")


_CUDA_MARKERS = (
    "Found no NVIDIA driver",
    "Torch not compiled with CUDA enabled",
    "No CUDA GPUs are available",
    "CUDA driver initialization failed",
    "libcudart functions unavailable",
)


def _environment_reason(exc: BaseException) -> str | None:
    """The reason when ``exc`` is a limit of this environment (no CUDA, missing package), not MB's."""
    text = str(exc)
    if isinstance(exc, (RuntimeError, AssertionError)) and any(m in text for m in _CUDA_MARKERS):
        return f"needs CUDA: {text.splitlines()[0] if text else type(exc).__name__}"
    return _third_party_import_error(exc)


def _third_party_import_error(exc: BaseException) -> str | None:
    """The reason when ``exc`` is an import failure of this environment, not of MB's code."""
    if not isinstance(exc, ImportError):
        return None
    name = getattr(exc, "name", None) or ""
    top = name.split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and top and top not in ("megatron", "tests"):
        return f"needs {name}, not installed here"
    if name.startswith("megatron.core") or "megatron.core" in str(exc) or top not in ("megatron", "tests", ""):
        return f"import failure in this environment (megatron-core or a dependency differs): {exc}"
    return None


class _EventsPlugin:
    """Selects each entry's tests (its own ``-k`` on its own file) and streams outcomes."""

    def __init__(self, spec: Path, events: Path) -> None:
        self.entries = json.loads(spec.read_text(encoding="utf-8"))["entries"]
        self.path = events
        self.fh = events.open("a", encoding="utf-8")

    def emit(self, **event: object) -> None:
        self.fh.write(json.dumps(event) + "\n")
        self.fh.flush()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.emit(ev="session_start", pid=os.getpid(), rootdir=str(session.config.rootpath))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.emit(ev="collect_error", nodeid=report.nodeid, message=str(report.longreprtext)[-MESSAGE_LIMIT:])

    def pytest_collection_modifyitems(self, session: object, config: pytest.Config, items: list[pytest.Item]) -> None:
        from _pytest.mark import KeywordMatcher
        from _pytest.mark.expression import Expression

        compiled = [(e, Expression.compile(e["k"]) if e.get("k") else None) for e in self.entries]
        keep, drop = [], []
        for item in items:
            path = item.nodeid.split("::")[0]
            hits = [
                e["name"]
                for e, expr in compiled
                if e["file"] == path and (expr is None or expr.evaluate(KeywordMatcher.from_item(item)))
            ]
            if hits:
                keep.append(item)
                for name in hits:
                    self.emit(ev="selected", entry=name, nodeid=item.nodeid)
            else:
                drop.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
        self.emit(ev="collected", selected=len(keep), deselected=len(drop))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: object) -> object:  # a pluggy wrapper (a generator)
        """``.cuda()`` as a CPU no-op while MB's test body runs (MB moves batches to the GPU)."""
        if "torch" not in sys.modules:  # a test module without torch: nothing to patch, no torch import
            return (yield)
        from harness.suite.standins.cuda import cpu_cuda_calls

        with cpu_cuda_calls():
            return (yield)

    def pytest_runtest_makereport(self, item: object, call: object) -> None:
        self._call = call  # read in logreport: the exception is still at hand here

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        call = getattr(self, "_call", None)
        exc = call.excinfo.value if call is not None and call.excinfo is not None and call.when == report.when else None
        if report.passed:
            if report.when != "call":
                return
            verdict, message = Verdict.PASS, ("xpass (MB marked it xfail)" if hasattr(report, "wasxfail") else "")
        elif report.skipped:
            if hasattr(report, "wasxfail"):
                verdict, message = Verdict.UNTESTABLE, f"xfail by MB: {report.wasxfail}"
            else:
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                verdict, message = Verdict.UNTESTABLE, f"skipped by MB: {reason.removeprefix('Skipped: ')}"
        else:
            text = str(report.longreprtext)
            env_reason = _environment_reason(exc) if exc is not None else None
            if env_reason:
                verdict, message = Verdict.UNTESTABLE, f"{env_reason} ({report.when})"
            else:
                where = "" if report.when == "call" else f" (in {report.when})"
                verdict, message = Verdict.FAIL, f"{crash_line(text)}{where}\n\n{text[-MESSAGE_LIMIT:]}"
        self.emit(
            ev="phase",
            nodeid=report.nodeid,
            when=report.when,
            outcome=report.outcome,
            verdict=verdict.value,
            message=message,
            duration=round(report.duration, 4),
        )

    def pytest_sessionfinish(self, session: object, exitstatus: int) -> None:
        self.emit(ev="finished", exitstatus=int(exitstatus))
        self.fh.close()
