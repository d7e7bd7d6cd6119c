"""pytest plugin: golden checks, verdict classification and result collection.

Installed as a ``pytest11`` entry point (named ``harness.suite.plugin``, so ``-p harness.suite.plugin``
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
:func:`harness.suite.outcome.verdict_of`; a case may leave a note (``record_property("harness_note", text)``),
kept as the message of a passing case and appended to any other.
Then known MB bugs (:mod:`harness.suite.known`): a FAIL whose violations are all explained by
applicable reviewed entries becomes KNOWN_FAIL; a listed case that passes becomes FIXED.

In the setup phase an assertion or golden mismatch is a fixture's (ERROR); MB raising or a
break found while a fixture builds something from MB is still MB's (FAIL).

With ``--harness-events FILE`` the plugin also keeps the live event log of
:mod:`harness.caselog`, so the runner can tell which case a killed process was running.

One module because pytest loads it as one ``pytest11`` entry point whose hooks share the
session's state (:class:`SessionState`, in ``config.stash``: its presence is the active flag; the
collected cases, the event log, the known-bug book); the verdict decision itself is
:mod:`harness.suite.outcome`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness import caselog, contract
from harness.contract import INI_SUITES, CasesFile, Env, Flag
from harness.errors import Broken, Untestable
from harness.records.results import CaseResult
from harness.records.verdict import Verdict
from harness.suite.goldenfixture import GoldenChecker, fixtures_root, golden
from harness.suite.items import DOCUMENTED, HYPOTHETICAL, case_of, item_case_id, suite_of, tier_of
from harness.suite.outcome import GoldenMismatch, case_impacts, structured_violations, verdict_of
from harness.suite.ownership import add_harness_root
from harness.suite.session import PROP, SessionState

if TYPE_CHECKING:
    from pluggy import Result

    from harness.suite.knownscope import Book

NOTE = "harness_note"


OPTIONS = tuple(f for f in Flag if f is not Flag.CASES)  # any of these makes a session a harness session


_STATE = pytest.StashKey[SessionState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        INI_SUITES,
        type="bool",
        default=False,
        help="the tests here are harness golden suites: classify verdicts, register their markers",
    )
    group = parser.getgroup("harness")
    group.addoption(Flag.RESULTS, default=None, help="write case verdicts (JSON) to this file")
    group.addoption(
        Flag.FIXTURES, default=None, help="golden root (default: the harness's fixtures, see harness.paths)"
    )
    group.addoption(
        Flag.OBTAINED,
        default=None,
        help="where obtained values go on mismatch (default: reports/obtained under the current directory)",
    )
    group.addoption(
        Flag.RECORD, action="store_true", help="write obtained values for every case; never fail on goldens"
    )
    group.addoption(
        Flag.REGEN,
        action="store_true",
        help="rewrite goldens in place where the obtained value differs (or none exists); such cases fail "
        "once with the diff. 'harness fixtures record' is the reviewed way",
    )
    group.addoption(
        Flag.KNOWN_FAILURES,
        default=None,
        help="reviewed known MB bugs (default: <fixtures>/known_failures.json)",
    )
    group.addoption(Flag.EVENTS, default=None, help="append the live case event log (harness.caselog) to this file")
    group.addoption(
        Flag.CASES,
        default=None,
        help="a JSON list of case ids (suite::test[param]): run only these (a bisection re-running its cases)",
    )


def active(config: pytest.Config) -> bool:
    """Whether this session runs harness suites (see the module docstring)."""
    return _STATE in config.stash


def _state(config: pytest.Config) -> SessionState:
    return config.stash[_STATE]


def pytest_configure(config: pytest.Config) -> None:
    asked = any(config.getoption(opt) for opt in OPTIONS)
    if not (asked or config.getini(INI_SUITES)):
        return
    events = config.getoption(Flag.EVENTS)
    state = SessionState(events=Path(events) if events else None)
    config.stash[_STATE] = state
    config.pluginmanager.register(state, "harness-session-state")
    if not hasattr(config, "workerinput"):  # what this process imports, for the driver (no second process asks)
        from harness.versions import versions

        contract.write_versions(versions())
    from harness.suite.standins import te

    te.install()  # what harness run's sitecustomize does, for a plain `pytest suites/` on a CPU machine
    if os.environ.get(contract.Env.KNOBS_LOG):  # which knob values the cases call MB with (harness coverage)
        from harness.suite.knobs import spy

        spy.install()
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA GPU (and Transformer Engine); skipped with a reason elsewhere"
    )
    config.addinivalue_line("markers", "import_group(name): which MB import the case needs: 'light' or 'full'")
    config.addinivalue_line(
        "markers", "hypothetical(reason): an input no MB producer emits; reported apart, never failing a run"
    )
    config.addinivalue_line(
        "markers", "drawn: its inputs are drawn (exploration): a pass never reads as a known bug FIXED"
    )
    if state.events is not None and not hasattr(config, "workerinput"):
        caselog.start_log(state.events)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--harness-cases``: keep exactly the listed cases (ids, unlike ``-k``, match whole names)."""
    listed = config.getoption(Flag.CASES)
    if not listed:
        return
    import json

    wanted = set(json.loads(Path(listed).read_text(encoding="utf-8")))
    keep = [i for i in items if item_case_id(i) in wanted]
    drop = [i for i in items if item_case_id(i) not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    if not active(session.config):
        return
    for item in session.items:  # the suite files are the harness's code, wherever they live
        add_harness_root(Path(str(item.fspath)).parent)
    if session.items:
        _state(session.config).emit(ev="collected", cases=[[item_case_id(i), suite_of(i)] for i in session.items])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if active(item.config):
        _state(item.config).emit(ev="start", case_id=item_case_id(item))
        from harness.suite.knobs import spy

        spy.CURRENT["suite"] = suite_of(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    outcome = yield
    if not active(item.config):
        return
    report = outcome.get_result()
    decisive = call.when == "call" or report.failed or report.skipped
    if not decisive or any(k == PROP for k, _ in report.user_properties):
        return
    excinfo = call.excinfo if report.failed or (call.excinfo and call.excinfo.errisinstance(Untestable)) else None
    verdict, message, diff_data = verdict_of(excinfo, report.skipped, report.longrepr)
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
    case_id = item_case_id(item)
    violations = structured_violations(excinfo)
    known_ids: list[str] = []
    if verdict in (Verdict.FAIL, Verdict.PASS, Verdict.CHANGED) and call.when == "call":
        from harness.suite import known

        drawn = item.get_closest_marker("drawn") is not None
        book = _known_book(item.config)
        found = known.against_known_bugs(
            case_id,
            verdict,
            violations,
            book.applying,
            message,
            drawn=drawn,
            others=book.others,
            roots=book.roots,
            gone=book.gone,
        )
        if found is not None:
            verdict, known_ids = found.verdict, list(found.entries)
            message = f"{found.message}\n{message}".rstrip()
    impacts = case_impacts(Verdict.FAIL if verdict is Verdict.KNOWN_FAIL else verdict, message, excinfo, violations)
    if verdict is Verdict.KNOWN_FAIL and not impacts:  # a known rule or MB raise: the entry names its cost
        by_id = {e.id: e for e in _known_book(item.config).applying}
        impacts = sorted({by_id[k].impact for k in known_ids if k in by_id and by_id[k].impact})
    notes = [str(v) for k, v in report.user_properties if k == NOTE]
    if notes:
        message = "\n".join(([message] if message else []) + notes)
    record = CaseResult(
        case_id=case_id,
        suite=suite_of(item),
        verdict=verdict,
        message=message[:20000],
        diff=message if diff_data else "",
        diff_data=diff_data,
        source="golden",
        violations=violations,
        known=known_ids,
        impacts=impacts,
        tier=tier_of(item),
    )
    report.user_properties.append((PROP, record.to_json()))  # plain data: it crosses xdist workers


@pytest.fixture
def known_bug(request: pytest.FixtureRequest) -> object:
    """``explain(exc) -> ids``: the known MB bugs (applying to this MB) that would make ``exc``, raised
    by the requesting case, a KNOWN_FAIL; () when none would.

    For a case that checks many inputs in one verdict (the exploration): a known bug met on one
    input must not end the search before a new bug is found on another.
    """

    def explain(exc: BaseException) -> tuple[str, ...]:
        if not active(request.config):
            return ()
        from harness.suite import known

        info = pytest.ExceptionInfo.from_exception(exc)
        verdict, message, _ = verdict_of(info, False, None)
        if verdict is not Verdict.FAIL:
            return ()
        book = _known_book(request.config)
        found = known.against_known_bugs(
            item_case_id(request.node),
            verdict,
            structured_violations(info),
            book.applying,
            message,
            others=book.others,
            roots=book.roots,
            gone=book.gone,
        )
        return found.entries if found is not None and found.verdict is Verdict.KNOWN_FAIL else ()

    return explain


def _known_book(config: pytest.Config) -> Book:
    """The known-bug file split for the MB this process imports (loaded once per process): the
    entries that apply (their code is here, else their versions or commits say so), the others,
    and the MB package their code was looked for in."""
    state = _state(config)
    if state.known is not None:
        return state.known
    from harness.paths import mb_location, package_dir
    from harness.records import known
    from harness.suite import knownscope
    from harness.versions import mb_version

    path = config.getoption(Flag.KNOWN_FAILURES)
    path = Path(path) if path else fixtures_root(config) / known.FILENAME
    package = mb_location()
    version = mb_version(package)
    roots = {"bridge": package} if package else {}
    if (core := package_dir("megatron.core")) is not None:
        roots["core"] = core
    found = contract.target_commit()
    commit = found.sha if found else None
    repo = os.environ.get(Env.MB_REPO)
    in_range = knownscope.git_in_range(Path(repo)) if repo else None
    book = knownscope.Book.split(known.load(path), version, commit, in_range, roots)
    state.known = book
    return book


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not active(session.config):
        return
    from harness.suite.knobs import spy

    spy.write()  # every process, xdist workers too: each appends what it saw
    path = session.config.getoption(Flag.RESULTS)
    if not path or hasattr(session.config, "workerinput"):
        return
    state = _state(session.config)
    seen: dict[str, CaseResult] = {}
    for doc in state.cases:  # a setup error and a teardown error for one case: keep the worst
        case = CaseResult.from_json(doc)
        prev = seen.get(case.case_id)
        if prev is None or case.verdict.severity > prev.verdict.severity:
            seen[case.case_id] = case
    from harness.versions import versions

    CasesFile(
        cases=list(seen.values()),
        collection_errors=list(state.collection_errors),
        versions=versions(),
        finished=time.time(),
        pid=os.getpid(),
    ).save(Path(path))


__all__ = [
    "DOCUMENTED",
    "HYPOTHETICAL",
    "Broken",
    "GoldenChecker",
    "GoldenMismatch",
    "Untestable",
    "case_of",
    "golden",  # the fixture: registered by being in this plugin's namespace
    "suite_of",
    "tier_of",
    "verdict_of",
]
