"""pytest plugin: golden checks, verdict classification and result collection.

Installed as a ``pytest11`` entry point (named ``harness.suiterun.plugin``, so ``-p harness.suiterun.plugin``
from ``harness run`` and ``suites/conftest.py`` find it already registered), hence loaded by
every pytest in the environment. It is therefore inert unless asked for: its hooks act only in
a session given a ``--harness-*`` option or configured by a suites ``pytest.ini`` that says
``harness_suites = true``; elsewhere (the project's own ``pytest``, any other project) it adds
its options and the ``golden`` fixture and nothing else. Verdicts are decided where the
exception is still at hand (the worker, with pytest-xdist) and travel to the controller in
``report.user_properties``, so results are read back as data, never by parsing pytest's text.

``pytest suites/ --harness-regen`` rewrites every golden whose case now produces another value
in place (like pytest-regressions' ``--force-regen``): such a case fails once, showing the
diff, and passes on the next run. ``harness fixtures record`` is the reviewed path (it shows
every change first and also removes goldens of deleted cases).

Classification of a failing case (suites check invariants first, the golden last) is
:func:`harness.suiterun.outcome.classify`; a case may leave a note (``record_property("harness_note", text)``),
kept as the message of a passing case and appended to any other.
Then known MB bugs (:mod:`harness.suiterun.known`): a FAIL whose violations are all explained by
applicable reviewed entries becomes KNOWN_FAIL; a listed case that passes becomes FIXED.

In the setup phase an assertion or golden mismatch is a fixture's (ERROR); MB raising or a
break found while a fixture builds something from MB is still MB's (FAIL).

With ``--harness-events FILE`` the plugin also keeps the live event log of
:mod:`harness.suiterun.caselog`, so the runner can tell which case a killed process was running.

One module because pytest loads it as one ``pytest11`` entry point whose hooks share the
session's state (the active flag, the collected cases, the event log); the verdict decision
itself is :mod:`harness.suiterun.outcome`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from harness.errors import Broken, Untestable
from harness.records.verdict import Verdict
from harness.suiterun import caselog
from harness.suiterun.outcome import GoldenMismatch, case_impacts, classify, structured_violations
from harness.suiterun.ownership import add_harness_root

PROP = "harness_case"
NOTE = "harness_note"


def suite_of(item: pytest.Item) -> str:
    name = Path(str(item.fspath)).stem
    return name[5:] if name.startswith("test_") else name


def tier_of(item: pytest.Item) -> str:
    """``hypothetical`` for a case whose input no MB producer emits (``@pytest.mark.hypothetical``):
    run and reported apart, it never fails a run or a nightly; ``documented`` for every other."""
    return HYPOTHETICAL if item.get_closest_marker("hypothetical") is not None else DOCUMENTED


HYPOTHETICAL, DOCUMENTED = "hypothetical", "documented"


def case_of(item: pytest.Item) -> str:
    owner = getattr(item, "cls", None)
    return (owner.__name__ + "." if owner else "") + item.name


def _case_id(item: pytest.Item) -> str:
    return f"{suite_of(item)}::{case_of(item)}"


class GoldenChecker:
    """The ``golden`` fixture: one golden per case, compared with per-field tolerances."""

    def __init__(
        self, fixtures_root: Path, obtained_root: Path, suite: str, case: str, record: bool, provenance: dict[str, Any]
    ) -> None:
        self.fixtures_root = fixtures_root
        self.obtained_root = obtained_root
        self.suite = suite
        self.case = case
        self.record = record
        self.provenance = provenance
        self.regen = False  # --harness-regen: a differing or missing golden is rewritten in place
        self.checked = False

    def check(self, value: Any, tolerances: dict[str, tuple[float, float]] | None = None) -> None:
        """Compare ``value`` with the golden; raise :class:`GoldenMismatch` with a diff."""
        __tracebackhide__ = True  # pytest shows the case's line and the diff, not this method
        # numpy and the golden modules load here, not with the plugin: it is loaded by every pytest
        from harness.golden.compare import Comparator, Tolerance
        from harness.golden.serializer import encode
        from harness.golden.storage import Golden, golden_path, read_golden, write_golden

        if self.checked:
            raise RuntimeError("one golden check per case: put everything in one dict")
        self.checked = True
        tols = {k: Tolerance(*v) for k, v in (tolerances or {}).items()}
        sidecar: dict[str, Any] = {}
        encoded = encode(value, sidecar)
        obtained = Golden(self.suite, self.case, encoded, sidecar, tols, self.provenance)
        path = golden_path(self.fixtures_root, self.suite, self.case)
        if self.record:
            write_golden(golden_path(self.obtained_root, self.suite, self.case), obtained)
            return
        if not path.exists() and self.regen:
            write_golden(path, obtained)
            raise GoldenMismatch(f"new golden written (--harness-regen): {path}", None)
        if not path.exists():
            out = golden_path(self.obtained_root, self.suite, self.case)
            write_golden(out, obtained)
            raise GoldenMismatch(
                f"no golden at {path}; obtained value written to {out}; "
                "review and accept it with `harness fixtures record`",
                None,
            )
        golden = read_golden(path)
        merged = {**golden.tolerances, **tols}
        result = Comparator(merged).compare(golden.value, encoded, golden.sidecar, sidecar)
        if not result.ok:
            if self.regen:
                write_golden(path, obtained)
                raise GoldenMismatch(f"golden regenerated (--harness-regen): {path}\n{result.text()}", result.to_json())
            out = golden_path(self.obtained_root, self.suite, self.case)
            write_golden(out, obtained)
            raise GoldenMismatch(f"golden mismatch ({path}):\n{result.text()}", result.to_json())


OPTIONS = (
    "--harness-results",
    "--harness-fixtures",
    "--harness-obtained",
    "--harness-record",
    "--harness-regen",
    "--harness-known-failures",
    "--harness-events",
)
_ACTIVE = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "harness_suites",
        type="bool",
        default=False,
        help="the tests here are harness golden suites: classify verdicts, register their markers",
    )
    group = parser.getgroup("harness")
    group.addoption("--harness-results", default=None, help="write case verdicts (JSON) to this file")
    group.addoption(
        "--harness-fixtures", default=None, help="golden root (default: the harness's fixtures, see harness.paths)"
    )
    group.addoption(
        "--harness-obtained",
        default=None,
        help="where obtained values go on mismatch (default: reports/obtained under the current directory)",
    )
    group.addoption(
        "--harness-record", action="store_true", help="write obtained values for every case; never fail on goldens"
    )
    group.addoption(
        "--harness-regen",
        action="store_true",
        help="rewrite goldens in place where the obtained value differs (or none exists); such cases fail "
        "once with the diff. 'harness fixtures record' is the reviewed way",
    )
    group.addoption(
        "--harness-known-failures",
        default=None,
        help="reviewed known MB bugs (default: <fixtures>/known_failures.json)",
    )
    group.addoption(
        "--harness-events", default=None, help="append the live case event log (harness.suiterun.caselog) to this file"
    )
    group.addoption(
        "--harness-cases",
        default=None,
        help="a JSON list of case ids (suite::test[param]): run only these (a bisection re-running its cases)",
    )


def active(config: pytest.Config) -> bool:
    """Whether this session runs harness suites (see the module docstring)."""
    return config.stash.get(_ACTIVE, False)


def pytest_configure(config: pytest.Config) -> None:
    asked = any(config.getoption(opt) for opt in OPTIONS)
    config.stash[_ACTIVE] = bool(asked or config.getini("harness_suites"))
    if not active(config):
        return
    from harness.standins import te

    te.install()  # what harness run's sitecustomize does, for a plain `pytest suites/` on a CPU machine
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA GPU (and Transformer Engine); skipped with a reason elsewhere"
    )
    config.addinivalue_line("markers", "import_group(name): which MB import the case needs: 'light' or 'full'")
    config.addinivalue_line(
        "markers", "hypothetical(reason): an input no MB producer emits; reported apart, never failing a run"
    )
    config._harness_cases = []  # type: ignore[attr-defined]
    config._harness_known = None  # type: ignore[attr-defined]
    events = config.getoption("--harness-events")
    _EVENTS[:] = [Path(events)] if events else []
    if events and not hasattr(config, "workerinput"):
        caselog.start_log(Path(events))


_EVENTS: list[Path] = []  # the --harness-events file of this process, when given


def _emit(**event: Any) -> None:
    for path in _EVENTS:
        caselog.emit(path, **event)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--harness-cases``: keep exactly the listed cases (ids, unlike ``-k``, match whole names)."""
    listed = config.getoption("--harness-cases")
    if not listed:
        return
    import json

    wanted = set(json.loads(Path(listed).read_text(encoding="utf-8")))
    keep = [i for i in items if _case_id(i) in wanted]
    drop = [i for i in items if _case_id(i) not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    if not active(session.config):
        return
    for item in session.items:  # the suite files are the harness's code, wherever they live
        add_harness_root(Path(str(item.fspath)).parent)
    if session.items:
        _emit(ev="collected", cases=[[_case_id(i), suite_of(i)] for i in session.items])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if active(item.config):
        _emit(ev="start", case_id=_case_id(item))


def _root(config: pytest.Config, opt: str, default: Path) -> Path:
    value = config.getoption(opt)
    return Path(value) if value else default


def _fixtures_root(config: pytest.Config) -> Path:
    from harness import paths

    return _root(config, "--harness-fixtures", paths.fixtures_dir())


def _obtained_root(config: pytest.Config) -> Path:
    from harness import paths

    return _root(config, "--harness-obtained", paths.reports_dir() / "obtained")


def _provenance() -> dict[str, Any]:
    from harness.suiterun.target import describe_running_target

    return describe_running_target()


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """Compare a case's obtained value to its golden file (see :class:`GoldenChecker`)."""
    config = request.config
    checker = GoldenChecker(
        _fixtures_root(config),
        _obtained_root(config),
        suite_of(request.node),
        case_of(request.node),
        bool(config.getoption("--harness-record")),
        _provenance(),
    )
    checker.regen = bool(config.getoption("--harness-regen"))
    return checker


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    if not active(item.config):
        return
    report = outcome.get_result()
    decisive = call.when == "call" or report.failed or report.skipped
    if not decisive or any(k == PROP for k, _ in report.user_properties):
        return
    excinfo = call.excinfo if report.failed or (call.excinfo and call.excinfo.errisinstance(Untestable)) else None
    verdict, message, diff_data = classify(excinfo, report.skipped, report.longrepr)
    if excinfo is not None and excinfo.errisinstance(Untestable):
        report.outcome = "skipped"
        report.longrepr = (str(item.fspath), item.location[1] or 0, f"untestable: {excinfo.value}")
    if (
        call.when == "setup"
        and verdict is Verdict.FAIL
        and excinfo is not None
        and excinfo.errisinstance((AssertionError, pytest.fail.Exception))
    ):
        verdict = Verdict.ERROR  # a fixture's own check broke: the harness's problem, not MB's
    case_id = _case_id(item)
    violations = structured_violations(excinfo)
    known_ids: list[str] = []
    if verdict in (Verdict.FAIL, Verdict.PASS, Verdict.CHANGED) and call.when == "call":
        from harness.suiterun import known

        found = known.classify(case_id, verdict, violations, _known_entries(item.config), message)
        if found is not None:
            verdict, known_ids = found.verdict, list(found.entries)
            message = f"{found.message}\n{message}".rstrip()
    impacts = case_impacts(Verdict.FAIL if verdict is Verdict.KNOWN_FAIL else verdict, message, excinfo, violations)
    if verdict is Verdict.KNOWN_FAIL and not impacts:  # a known rule or MB raise: the entry names its cost
        by_id = {e.id: e for e in _known_entries(item.config)}
        impacts = sorted({by_id[k].impact for k in known_ids if k in by_id and by_id[k].impact})
    notes = [str(v) for k, v in report.user_properties if k == NOTE]
    if notes:
        message = "\n".join(([message] if message else []) + notes)
    report.user_properties.append(
        (
            PROP,
            {
                "case_id": case_id,
                "suite": suite_of(item),
                "verdict": verdict.value,
                "message": message[:20000],
                "diff": message if diff_data else "",
                "diff_data": diff_data,
                "source": "golden",
                "violations": violations,
                "known": known_ids,
                "impacts": impacts,
                "tier": tier_of(item),
            },
        )
    )


def _known_entries(config: pytest.Config) -> list[Any]:
    """Known MB bugs that apply to the MB this process imports (loaded once per process)."""
    cached = getattr(config, "_harness_known", None)
    if cached is not None:
        return cached
    from harness.suiterun import known
    from harness.suiterun.target import mb_location, mb_version

    path = config.getoption("--harness-known-failures")
    path = Path(path) if path else _fixtures_root(config) / known.FILENAME
    version = mb_version(mb_location())
    commit = (os.environ.get("HARNESS_TARGET_COMMIT") or "").removesuffix("-dirty") or None
    repo = os.environ.get("HARNESS_MB_REPO")
    in_range = known.git_in_range(Path(repo)) if repo else None
    entries = [e for e in known.load(path) if e.applies(version, commit, in_range)]
    config._harness_known = entries  # type: ignore[attr-defined]
    return entries


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == PROP:
            value = {**value, "duration_s": round(report.duration, 4)}  # type: ignore[dict-item]
            _CASES.append(value)
            _emit(ev="done", case=value)


_CASES: list[dict[str, Any]] = []
_COLLECTION_ERRORS: list[dict[str, str]] = []  # suite files that failed to collect, with MB's or Python's error


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        text = str(report.longreprtext or "").strip().splitlines()
        errors = [ln.lstrip("E ").strip() for ln in text if ln.startswith("E ")] or text[-1:]
        _COLLECTION_ERRORS.append({"nodeid": report.nodeid, "message": " | ".join(errors)[-1500:]})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--harness-results")
    if not path or hasattr(session.config, "workerinput"):
        return
    seen: dict[str, dict[str, Any]] = {}
    for case in _CASES:  # a setup error and a teardown error for one case: keep the worst
        prev = seen.get(case["case_id"])
        if prev is None or Verdict(case["verdict"]).severity > Verdict(prev["verdict"]).severity:
            seen[case["case_id"]] = case
    from harness.records.atomicio import write_versioned_json

    write_versioned_json(
        Path(path),
        "harness-cases",
        1,
        {
            "finished": time.time(),
            "pid": os.getpid(),
            "cases": list(seen.values()),
            "collection_errors": list(_COLLECTION_ERRORS),
        },
    )


__all__ = ["Broken", "GoldenMismatch", "Untestable", "GoldenChecker", "classify"]
