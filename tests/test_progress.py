"""Live progress: a redrawn line on a terminal (colour only without NO_COLOR), plain lines in
CI logs and pipes, nothing with -q; the bisection says how many commits and steps are left."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

from harness import caselog
from harness.bisect.algorithm import Bisection, max_steps
from harness.bisect.driver import BisectOptions, run_bisection
from harness.progress import CaseFeed, Progress, duration
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import workspace_dir_for
from tests.test_bisect_command import StateEvaluator, _fake_history

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COLOUR = re.compile(r"\x1b\[(3[0-7]|9[0-7])m")


def test_plain_lines_count_steps_and_time_left() -> None:
    out = io.StringIO()
    with Progress(out, "matrix", total=3) as progress:
        assert not progress.live, "a StringIO is no terminal"
        progress.step("v0.4.0: 12 pass")
        progress.step("v0.5.1: 11 pass, 1 fail")
        progress.step("HEAD: 12 pass")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("matrix: [1/3] v0.4.0: 12 pass  (about ") and lines[0].endswith(" left)")
    assert lines[1].startswith("matrix: [2/3] v0.5.1: 11 pass, 1 fail  (about ")
    assert lines[2] == "matrix: [3/3] HEAD: 12 pass", "nothing left to estimate"
    assert not ESCAPE.search(out.getvalue()), "no control characters in a CI log"


def test_quiet_prints_nothing() -> None:
    with Progress(None, "mutate", total=2) as progress:
        progress.step("one")
        progress.log("a line")
    assert progress.done == 1 and not progress.live


@pytest.mark.parametrize("no_color", [False, True])
def test_terminal_redraws_and_honours_no_color(monkeypatch, no_color: bool) -> None:
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    out = io.StringIO()
    with Progress(out, "matrix", total=2, live=True) as progress:
        progress.step("v0.4.0: 12 pass")
        time.sleep(0.3)
    text = out.getvalue()
    assert "\r" in text and "\x1b[2K" in text, "the line is redrawn in place"
    assert "v0.4.0: 12 pass\n" in text and "1/2" in text
    assert bool(COLOUR.search(text)) is not no_color


def test_eta_and_durations() -> None:
    progress = Progress(None, "x", total=4)
    progress.t0 -= 30  # 30 s for the first of four steps
    progress.update(done=1)
    assert 85 <= (progress.eta_s() or 0) <= 95
    assert [duration(s) for s in (12, 300, 7500)] == ["12 s", "5 min", "2 h 05 min"]


def test_case_feed_speaks_in_verdicts_never_in_pytests_totals_when_not_on_a_terminal(tmp_path: Path) -> None:
    """Issue 23: in a pipe pytest's ``....F...FFFF 40 failed, 38 passed`` (known MB bugs as F) sat
    above the harness's table saying 0 fail. Now pytest's output goes nowhere (unless verbose)
    and each suite process's cases come out as harness verdict letters, one line per suite."""
    from harness.records.results import CaseResult
    from harness.records.verdict import Verdict

    out = io.StringIO()
    feed = CaseFeed(out)
    assert feed.sink is None, "pytest's own lines never reach a CI log"
    assert CaseFeed(out, verbose=True).sink is out
    assert feed.poll(tmp_path / "none.jsonl", force=True) == (0, 0)
    feed.group_result(
        [
            CaseResult("s::a", "s", Verdict.PASS),
            CaseResult("s::b", "s", Verdict.KNOWN_FAIL),
            CaseResult("t::c", "t", Verdict.FAIL),
        ]
    )
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("verdicts: . pass, F fail")
    assert lines[1].split() == ["s", ".k"] and lines[2].split() == ["t", "F"]
    assert "passed" not in out.getvalue() and "failed" not in out.getvalue()


def test_case_feed_counts_cases_from_the_event_log(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    caselog.start_log(events)
    caselog.emit(events, ev="collected", cases=[["s::a", "s"], ["s::b", "s"], ["s::c", "s"]])
    caselog.emit(events, ev="start", case_id="s::a")
    caselog.emit(events, ev="done", case={"case_id": "s::a", "verdict": "pass"})
    caselog.emit(events, ev="start", case_id="s::b")
    feed = CaseFeed(io.StringIO(), verbose=True)
    feed.progress.live = True  # as on a terminal (no drawing: the bar is not started)
    assert feed.sink is feed
    assert feed.poll(events, force=True) == (1, 3) and feed.progress.status == "s::b"
    feed.group_done(events)
    caselog.start_log(events)  # the next import group's process
    caselog.emit(events, ev="collected", cases=[["t::x", "t"]])
    assert feed.poll(events, force=True) == (1, 4)


def test_a_run_inside_a_matrix_shows_its_cases_on_the_matrix_line(tmp_path: Path) -> None:
    """Issue 24: ``matrix`` showed ``0/2`` for minutes. A run given the matrix's progress puts its
    own count and running case in that line's status; the matrix keeps counting refs."""
    from harness.records.results import CaseResult
    from harness.records.verdict import Verdict

    events = tmp_path / "events.jsonl"
    caselog.start_log(events)
    caselog.emit(events, ev="collected", cases=[["s::a", "s"], ["s::b", "s"], ["s::c", "s"]])
    caselog.emit(events, ev="done", case={"case_id": "s::a", "verdict": "pass"})
    caselog.emit(events, ev="start", case_id="s::b")
    matrix = Progress(io.StringIO(), "matrix", total=2)
    matrix.live = True  # as on a terminal (no drawing: the bar is not started)
    with CaseFeed(matrix, prefix="v0.5.1: ") as feed:
        assert feed.poll(events, force=True) == (1, 3)
    assert matrix.status == "v0.5.1: cases 1/3, s::b" and matrix.done == 0 and matrix.total == 2
    out = io.StringIO()  # in a CI log: each ref's suite lines, the legend once for the whole matrix
    matrix = Progress(out, "matrix", total=2)
    for ref in ("v0.4.0", "v0.5.1"):
        CaseFeed(matrix, prefix=f"{ref}: ").group_result([CaseResult("s::a", "s", Verdict.PASS)])
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("verdicts:") and [line.split() for line in lines[1:]] == [
        ["v0.4.0:", "s", "."],
        ["v0.5.1:", "s", "."],
    ]


def test_one_count_over_all_import_groups_and_time_left_from_measured_case_times(tmp_path: Path) -> None:
    """Issue 24: the bar reached 78/78, restarted, ended at 138/138, and its time left was wrong
    across import groups. With the last run's case times the total covers every group from the
    start and the time left is what is still to run at this run's measured pace."""
    events = tmp_path / "events.jsonl"
    caselog.start_log(events)
    caselog.emit(events, ev="collected", cases=[["s::a", "s"], ["s::b", "s"]])
    caselog.emit(events, ev="done", case={"case_id": "s::a", "verdict": "pass", "duration_s": 2.0})
    feed = CaseFeed(io.StringIO())
    feed.progress.live = True  # as on a terminal (no drawing: the bar is not started)
    feed.expect([{"s::a": 1.0, "s::b": 1.0}, {"t::x": 2.0, "t::y": 2.0}])
    feed.group_start(0)
    feed.poll(events, force=True)
    eta = feed.progress.eta_s()
    assert feed.progress.total == 4, "the full group's two cases counted before it collects"
    assert eta is not None and 9.5 < eta <= 10.0, "(1 + 2 + 2 s remembered) x 2 (a took 2 s, 1 s last time)"
    feed.group_done(events)
    feed.group_start(1)
    caselog.start_log(events)  # the full group's process, not collected yet
    feed.poll(events, force=True)
    eta = feed.progress.eta_s()
    assert feed.progress.total == 4 and feed.progress.done == 1 and eta is not None and 7.5 < eta <= 8.0
    caselog.emit(events, ev="collected", cases=[["t::x", "t"]])  # t::y is gone: the count follows
    feed.poll(events, force=True)
    assert feed.progress.total == 3


def test_case_times_round_trip_and_a_corrupt_file_is_no_estimate(tmp_path: Path) -> None:
    from harness.records import casetimes
    from harness.suiterun.plan import Group, RunOptions
    from harness.suiterun.runner import _expected

    path = tmp_path / casetimes.FILE
    casetimes.remember(
        path, [("s::a", casetimes.CaseTime("s", "light", 1.5)), ("t::x", casetimes.CaseTime("t", "", 3.0))]
    )
    casetimes.remember(path, [("s::a", casetimes.CaseTime("s", "light", 0.5))])
    times = casetimes.load(path)
    assert times == {"s::a": casetimes.CaseTime("s", "light", 0.5), "t::x": casetimes.CaseTime("t", "", 3.0)}
    plan = [Group("light", "light", [Path("test_s.py")]), Group(None, "full", [Path("test_t.py")])]
    assert _expected(plan, RunOptions(case_times=path)) == [{"s::a": 0.5}, {"t::x": 3.0}]
    assert _expected(plan, RunOptions(case_times=path, keyword="a")) == [{}, {}], "-k: pytest decides"
    assert _expected(plan, RunOptions(case_times=path, cases=["t::x"])) == [{}, {"t::x": 3.0}]
    path.write_text("{not json")
    assert casetimes.load(path) == {} and casetimes.load(None) == {}


def test_bisection_remaining_commits() -> None:
    commits = [f"c{i}" for i in range(33)]
    bisection = Bisection(commits, ["s::a", "s::b"])
    assert bisection.remaining() == (32, 32)
    from harness.bisect.status import Mark

    bisection.record("c0", {"s::a": Mark.GOOD, "s::b": Mark.GOOD})
    bisection.record("c32", {"s::a": Mark.BAD, "s::b": Mark.BAD})
    bisection.record("c16", {"s::a": Mark.BAD, "s::b": Mark.GOOD})
    assert bisection.remaining() == (32, 16), "a in c1..c16, b in c17..c32"
    assert max_steps(16 + 1, 1) == 4


def test_bisect_says_how_many_commits_and_steps_are_left(tmp_path: Path) -> None:
    repo, shas = _fake_history(tmp_path, 33, {"s::a": 20})
    cache = tmp_path / "cache"
    ev = StateEvaluator(repo, workspace_dir_for(cache, open_repo(repo)), cases=("s::a",))
    out = io.StringIO()
    run = run_bisection(
        BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=cache), evaluator=ev, progress=out
    )
    assert run.exit_code == 0
    text = out.getvalue()
    assert "1 case(s) to bisect: 32 commits left, about 5 steps (with 1 evaluation(s) at a time)" in text
    left = [int(m) for m in re.findall(r"\((\d+) commits? left, about \d+ steps?\)", text)]
    assert left and left == sorted(left, reverse=True) and left[-1] <= 2, text
    assert "no commit left to probe" in text.splitlines()[-1]
    assert not ESCAPE.search(text)


def test_an_80_column_terminal_keeps_the_counts_and_cuts_the_status(monkeypatch) -> None:
    """Issue 24: at 80 columns the line collapsed to ``cases elapse… left offline_packed_...``."""
    import io

    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    with Progress(buf, "cases", total=138, live=True) as p:
        p.update(done=40, status="running offline_packed_dataset::test_packed_rows_match_unpacked[chat-64-eod]" * 2)
        p._bar.refresh()
    drawn = [ln for ln in buf.getvalue().replace("\r", "\n").splitlines() if "40/138" in ln]
    assert drawn, buf.getvalue()[-500:]
    import re

    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn[-1])
    assert len(plain) <= 80 and "40/138" in plain and "elapsed" in plain and "…" in plain, plain
