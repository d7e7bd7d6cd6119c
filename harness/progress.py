"""Live progress of the long commands (run, nightly, bisect, matrix, mutate) on stderr.

On a terminal: one ``rich`` progress line redrawn in place (what, i/N, elapsed, time left,
status), with log lines printed above it; ``NO_COLOR`` is honoured (rich reads it) and
``TERM=dumb`` counts as no terminal. Anywhere else (CI logs, pipes, files): plain lines, one
per finished step (``[i/N] ... , about 3 min left``), no control characters, nothing redrawn.
``rich`` is imported only when a terminal is there to draw on (the CLI's start-up stays light).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TextIO, cast

from harness.caselog import CaseLog, read_log

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import ProgressColumn, TaskID

    from harness.records.results import CaseResult


def _terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def duration(seconds: float) -> str:
    """ "45 s", "3 min", "2 h 05 min": what a person reads at a glance."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class Progress:
    """``with Progress(sys.stderr, "bisect") as p: p.step("...", done=3, total=10)``.

    ``stream`` None: silent (``-q``). ``total`` None: no count, only the status (a bisection's
    remaining steps are an estimate, given in the status text). ``live`` forces the terminal
    rendering on or off (tests); by default it follows the stream.
    """

    def __init__(
        self,
        stream: TextIO | None,
        label: str,
        total: int | None = None,
        *,
        live: bool | None = None,
        counted: bool = False,
    ) -> None:
        self.stream = stream
        self.counted = counted or total is not None  # draw i/N and time left (total may come later)
        self.label = label
        self.total = total
        self.done = 0
        self.status = ""
        self.t0 = time.monotonic()
        self.live = stream is not None and (live if live is not None else _terminal(stream))
        self._bar: RichProgress | None = None
        self._status_width = 80  # set from the console when the bar starts
        self._task = cast("TaskID", 0)  # the bar's one task, set when the bar starts
        self._lock = threading.RLock()  # steps may finish on several threads (mutate -j)
        self.legend_shown = False  # the verdict letters' legend (CaseFeed), printed once
        self._eta_given: float | None = None  # an estimate from the caller, and when it was given
        self._eta_at = 0.0

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Progress:
        if self.live:
            self._start_bar(force_terminal=True)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def _start_bar(self, force_terminal: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar

        console = Console(file=self.stream, force_terminal=force_terminal, highlight=False)
        narrow = console.width < 100  # an 80-column terminal: a short bar, the status cut, never wrapped
        columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn("[bold]{task.description}")]
        if self.counted:
            columns += [BarColumn(bar_width=10 if narrow else 24), MofNCompleteColumn()]
        columns += [TimeElapsedColumn()]
        if self.counted:
            columns += [TextColumn("elapsed, {task.fields[left]} left")]
        columns += [TextColumn("{task.fields[status]}")]
        fixed = len(self.label) + (61 if narrow else 75)  # spinner, label, bar, i/N, elapsed, left, spaces
        self._status_width = max(10, console.width - fixed)
        self._bar = Bar(*columns, console=console, transient=True, refresh_per_second=4)
        self._task = self._bar.add_task(self.label, total=self.total, status="", left="?")
        self._bar.start()

    # ------------------------------------------------------------ reporting

    def eta_s(self) -> float | None:
        """Seconds left: the caller's estimate when it gave one (a run's measured case times),
        else the pace so far (None before the first step or without a total)."""
        if self._eta_given is not None:
            return max(self._eta_given - (time.monotonic() - self._eta_at), 0.0)
        if not self.total or not self.done:
            return None
        elapsed = time.monotonic() - self.t0
        return elapsed / self.done * max(self.total - self.done, 0)

    def update(
        self,
        done: int | None = None,
        total: int | None = None,
        status: str | None = None,
        *,
        eta_s: float | None = None,
    ) -> None:
        """New counts, status or time left; redrawn on a terminal, silent in plain mode (see :meth:`step`)."""
        with self._lock:
            if done is not None:
                self.done = done
            if total is not None:
                self.total = total
            if status is not None:
                self.status = status
            if eta_s is not None:
                self._eta_given, self._eta_at = eta_s, time.monotonic()
            if self._bar is not None:
                status = self.status
                if len(status) > self._status_width:  # cut here: rich would drop the columns before it
                    status = status[: self._status_width - 1] + "…"
                eta = self.eta_s()
                left = "?" if eta is None else duration(eta)
                self._bar.update(self._task, completed=self.done, total=self.total, status=status, left=left)

    def log(self, text: str) -> None:
        """A line of its own: above the progress line on a terminal, as is elsewhere."""
        if self.stream is None:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.console.print(text, markup=False, highlight=False)
            else:
                print(text, file=self.stream, flush=True)

    def step(self, text: str, done: int | None = None, total: int | None = None, status: str | None = None) -> None:
        """A finished step: its line (with ``[i/N]`` and the time left in plain mode), then the update."""
        with self._lock:
            self.update(self.done + 1 if done is None else done, total, status)
            if self.stream is None:
                return
            if self._bar is not None:
                self.log(text)
                return
            count = f"[{self.done}/{self.total}] " if self.total else ""
            eta = self.eta_s()
            tail = [self.status] if self.status else []
            if eta is not None and self.done < (self.total or 0):
                tail.append(f"about {duration(eta)} left")
            line = f"{self.label}: {count}{text}" + (f"  ({'; '.join(tail)})" if tail else "")
            print(line, file=self.stream, flush=True)


#: One letter per verdict in the per-suite lines of a non-terminal run (a legend is printed once).
LETTERS = {
    "pass": ".",
    "fail": "F",
    "changed": "C",
    "known-fail": "k",
    "fixed": "X",
    "untestable": "u",
    "error": "E",
}
LEGEND = "verdicts: . pass, F fail, C changed, k known MB bug, X known bug fixed, u untestable, E error"


class CaseFeed:
    """Progress of suite processes, read from their live event logs (:mod:`harness.caselog`):
    cases finished out of cases collected, and the case running.

    One voice: pytest's own progress and totals never reach the user (they count known MB bugs
    as ``F`` and name no verdict of the harness's). Not on a terminal (a CI log, a pipe), each
    suite process's cases come out as one line per suite in the harness's verdict letters
    (:data:`LETTERS`) when the process ends; on a terminal the progress line stands instead.
    With ``verbose`` pytest's lines are shown too (above the bar on a terminal), for debugging.
    """

    def __init__(self, stream: TextIO | Progress | None, verbose: bool = False, *, prefix: str = "") -> None:
        # Inside another command's progress (a matrix ref): its line carries this run's count and
        # case in its status, and its own steps keep counting refs; the suite lines are its log lines.
        self.outer = stream if isinstance(stream, Progress) else None
        self.prefix = prefix
        if isinstance(stream, Progress):
            self.progress: Progress = stream
            self.stream: TextIO | None = stream.stream
        else:
            self.progress = Progress(stream, "cases", counted=True)
            self.stream = stream
        self.verbose = verbose
        self._base = (0, 0)  # (done, collected) of the groups finished before this one
        self._next_poll = 0.0
        self._partial = ""
        self._expected: list[dict[str, float]] = []  # per import group: case id -> remembered seconds
        self._group = 0  # the import group running now
        self._pace = [0.0, 0.0]  # measured and remembered seconds of the finished groups' cases
        self._estimated_at = (-1, -1)  # (done, total) when the time left was last estimated

    def expect(self, groups: list[dict[str, float]]) -> None:
        """The cases each import group of the plan ran last time (:mod:`harness.records.casetimes`),
        in plan order: the line then counts every group from the start and its time left is what
        is still to run at the pace of this run's finished cases against their remembered times."""
        self._expected = groups

    def group_start(self, index: int) -> None:
        self._group = index
        self._estimated_at = (-1, -1)  # a new group: estimate afresh

    def __enter__(self) -> CaseFeed:
        if self.outer is None:
            self.progress.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.outer is None:
            self.progress.__exit__(kind, exc, tb)

    @property
    def sink(self) -> TextIO | CaseFeed | None:
        """Where the suite process's output goes (nowhere unless ``verbose``)."""
        if not self.verbose:
            return None
        return self if self.progress.live else self.stream

    def group_result(self, cases: Iterable[CaseResult]) -> None:
        """Not on a terminal: one line per suite of a finished suite process, in verdict letters."""
        if self.progress.live or self.stream is None:
            return
        if not self.progress.legend_shown:  # once per command: a matrix runs many feeds in one line
            self._line(LEGEND)
            self.progress.legend_shown = True
        by_suite: dict[str, list[str]] = {}
        hypothetical: dict[str, int] = {}
        for c in cases:
            by_suite.setdefault(c.suite, [])
            if getattr(c, "hypothetical", False):  # reported apart, never failing
                hypothetical[c.suite] = hypothetical.get(c.suite, 0) + 1
            else:
                by_suite[c.suite].append(LETTERS.get(c.verdict.value, "?"))
        for suite, letters in by_suite.items():
            extra = f"  (+{hypothetical[suite]} hypothetical)" if suite in hypothetical else ""
            self._line(f"{self.prefix}{suite:<26} {''.join(letters)}{extra}")

    def _line(self, text: str) -> None:
        if self.outer is not None:
            self.outer.log(text)
        else:
            print(text, file=self.stream, flush=True)

    def write(self, text: str) -> None:  # the sink on a terminal with verbose: whole lines above the bar
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self.progress.log(line)

    def flush(self) -> None:
        pass

    def poll(self, events: Path, force: bool = False) -> tuple[int, int]:
        """Read the event log (at most twice a second unless forced); (done, collected) so far."""
        if not self.progress.live or (not force and time.monotonic() < self._next_poll):
            return self._base
        self._next_poll = time.monotonic() + 0.5
        log = read_log(events)
        done, total = self._base[0] + len(log.done), self._base[1] + len(log.collected)
        shown, eta = self._estimate(log, total)
        running = log.in_flight
        if self.outer is not None:  # the outer line keeps its own count; ours goes in its status
            case = f", {running[-1]}" if running else ""
            self.outer.update(status=f"{self.prefix}cases {done}/{shown or '?'}{case}")
        else:
            if (done, shown) == self._estimated_at:  # nothing new: let the last estimate count down
                eta = None
            else:
                self._estimated_at = (done, shown)
            self.progress.update(done=done, total=shown or None, status=running[-1] if running else "", eta_s=eta)
        return done, total

    def _here(self) -> dict[str, float]:
        """The remembered cases of the import group running now."""
        return self._expected[self._group] if self._group < len(self._expected) else {}

    def _timed(self, log: CaseLog) -> tuple[float, float]:
        """Measured and remembered seconds of this group's finished cases that were remembered."""
        here = self._here()
        pairs = [(float(r[-1].get("duration_s") or 0.0), here[cid]) for cid, r in log.done.items() if cid in here]
        return sum(m for m, _ in pairs), sum(r for _, r in pairs)

    def _estimate(self, log: CaseLog, total: int) -> tuple[int, float | None]:
        """(total to show, seconds left): with remembered groups, this group's collected cases (or
        what it ran last time, before it collects) and the later groups' remembered cases."""
        if not any(self._expected):  # nothing remembered: count what has been collected
            return total, None
        here, later = self._here(), self._expected[self._group + 1 :]
        known = [t for g in self._expected for t in g.values()]
        mean = sum(known) / len(known) if known else 0.0
        measured, remembered = (a + b for a, b in zip(self._pace, self._timed(log), strict=True))
        pace = min(max(measured / remembered, 0.5), 3.0) if measured > 0 and remembered > 0 else 1.0
        if log.collected:
            left = sum(here.get(c, mean) for c in log.collected if c not in log.done)
        else:
            left, total = sum(here.values()), total + len(here)
        left += sum(sum(g.values()) for g in later)
        return total + sum(len(g) for g in later), left * pace

    def group_done(self, events: Path) -> None:
        """A suite process ended: its counts become the base of the next one's."""
        self._base = self.poll(events, force=True)
        if self._here():
            measured, remembered = self._timed(read_log(events))
            self._pace = [self._pace[0] + measured, self._pace[1] + remembered]
