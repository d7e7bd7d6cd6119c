"""Options several commands share, defined once so that they mean the same everywhere.

Modelled on asv's ``common_args``: each ``add_*`` adds one option (or a pair that belongs
together) with its help text and type; the matching helpers turn parsed values into what the
command needs (:func:`target_from_args`, :func:`cache_dir`, :func:`out_dir`). A command adds
only the options it honours.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from harness import paths
from harness.errors import UsageError
from harness.suiterun import runner
from harness.target import Target


def int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def positive_seconds(text: str) -> float:
    """argparse type: a duration in seconds, more than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


# ------------------------------------------------------------------------------ target


def add_target(p: argparse.ArgumentParser) -> None:
    """``--mb-src`` (the MB under test) and ``--megatron-lm`` (the megatron-core its checkout pins)."""
    p.add_argument("--mb-src", metavar="PATH", help="an MB checkout (or its src/) to test instead of the installed MB")
    add_megatron_lm(p)


def add_megatron_lm(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--megatron-lm",
        metavar="PATH",
        type=Path,
        help="a Megatron-LM repository: run MB against the megatron-core that the MB commit pins in "
        "3rdparty/Megatron-LM instead of the installed one (with --mb-src: the checkout's HEAD)",
    )


def target_from_args(args: argparse.Namespace, commit: str | None = None) -> Target:
    """The target of --mb-src (and --megatron-lm): a one-line error for what cannot work."""
    tgt = Target.from_args(args.mb_src, commit)
    mlm = getattr(args, "megatron_lm", None)
    if mlm is None:
        return tgt
    if tgt.src is None:
        raise UsageError("--megatron-lm needs --mb-src (an MB git checkout that pins Megatron-LM)")
    from harness.repository.gitrepo import open_repo
    from harness.repository.pins import pinned_core

    repo = open_repo(tgt.src)
    pinned = pinned_core(repo, "HEAD", mlm, cache_dir(args))
    if pinned is None:
        raise UsageError(
            f"{repo.path} pins no Megatron-LM at HEAD (no 3rdparty/Megatron-LM submodule, "
            "no megatron-core entry in uv.lock)"
        )
    return dataclasses.replace(tgt, core=pinned.path, core_pin=pinned.pin)


# ------------------------------------------------------------------------------ selection and running


def add_suites(p: argparse.ArgumentParser, *, keyword: bool = True) -> None:
    """``--suite NAME`` (repeatable) and, with ``keyword``, ``-k EXPR``."""
    p.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help=f"suite to run (repeatable; default every golden suite: {', '.join(runner.golden_suites())}; "
        f"also available: {runner.UPSTREAM}, MB's own packing tests, which need --mb-src)",
    )
    if keyword:
        p.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k expression to select cases")


def add_timeout(p: argparse.ArgumentParser, what: str, default: float = 1800.0) -> None:
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=default,
        metavar="S",
        help=f"seconds before {what} is killed (default {default:.0f})",
    )


def add_jobs(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-j", "--jobs", type=positive_int, default=1, metavar="N", help=f"{what} (default 1)")


def add_import_mode(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--import",
        dest="import_mode",
        choices=runner.IMPORT_MODES,
        default="auto",
        help="how MB is imported: auto (default) runs light-group cases without executing MB's package "
        "__init__ files and the others with the full import; full imports MB normally for every "
        "case; light runs only the light-group cases",
    )


def add_roots(p: argparse.ArgumentParser) -> None:
    """``--suites-dir`` and ``--fixtures``: the golden suites and goldens to use (see :mod:`harness.paths`)."""
    p.add_argument(
        "--suites-dir",
        type=Path,
        metavar="DIR",
        help=f"directory of the golden suites, test_<suite>.py (default ${paths.SUITES_ENV}, else the "
        "checkout's suites/ or the ones installed with the harness)",
    )
    p.add_argument(
        "--fixtures",
        type=Path,
        metavar="DIR",
        help=f"golden root, <suite>/<case>.json (default ${paths.FIXTURES_ENV}, else the checkout's fixtures/ "
        "or the ones installed with the harness)",
    )


def verdict_flags(args: argparse.Namespace) -> list[str]:
    """The options of ``args`` that decide a verdict, as flags a printed hint must repeat
    (``reproduce:``, ``accept:``): what MB, which megatron-core, which suites and goldens, which
    import. Paths are absolute, so the hint works from any directory."""
    out: list[str] = []
    for flag, attr in (
        ("--mb-src", "mb_src"),
        ("--megatron-lm", "megatron_lm"),
        ("--suites-dir", "suites_dir"),
        ("--fixtures", "fixtures"),
    ):
        value = getattr(args, attr, None)
        if value is not None:
            out += [flag, str(Path(value).expanduser().resolve())]
    mode = getattr(args, "import_mode", None)
    if mode not in (None, "auto"):
        out += ["--import", str(mode)]
    return out


def use_roots(args: argparse.Namespace) -> Path:
    """Make the command's ``--suites-dir`` / ``--fixtures`` those of every process it starts;
    returns the golden root."""
    paths.use_roots(getattr(args, "suites_dir", None), getattr(args, "fixtures", None))
    return paths.fixtures_dir()


def add_verbosity(p: argparse.ArgumentParser, *, verbose: bool = False) -> None:
    """``-q/--quiet`` (no live progress on stderr) and, where progress is the suites' own output,
    ``-v/--verbose`` (it names every case)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true", help="no live progress on stderr")
    if verbose:
        group.add_argument("-v", "--verbose", action="store_true", help="live progress names every case")


# ------------------------------------------------------------------------------ where things go


def add_summary_md(p: argparse.ArgumentParser, what: str) -> None:
    """``--summary-md FILE``: a short Markdown summary of ``what`` (a CI job summary, a PR comment)."""
    p.add_argument(
        "--summary-md",
        type=Path,
        metavar="FILE",
        help=f"also write a short Markdown summary ({what}); appended to $GITHUB_STEP_SUMMARY too when that is set",
    )


def add_out(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--out", type=Path, metavar="DIR", help=f"output directory (default {default})")


def out_dir(args: argparse.Namespace, name: str) -> Path:
    """``--out``, else ``reports/<name>`` under the current directory; absolute, because suite
    processes run in another directory (the suites' parent) and write there."""
    return Path(args.out).expanduser().resolve() if args.out else (paths.reports_dir() / name).resolve()


def writable_dir(path: Path, what: str) -> Path:
    """Prove ``path`` can be created and takes a file, before hours of work whose results go there.

    Nothing is created: the nearest existing ancestor must be a directory that takes a file
    (a command refused later for another reason leaves no empty output directory behind).
    """
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{what} {path} cannot be written: {probe} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise UsageError(f"{what} {path} cannot be written: {exc.strerror or exc}") from None
    return path


def add_cache_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="per-user cache: bisect mirrors and verdicts, pinned Megatron-LM trees, matrix exports "
        f"(default $HARNESS_CACHE or {paths.cache_dir()})",
    )


def cache_dir(args: argparse.Namespace) -> Path:
    """``--cache-dir``, else the per-user cache directory."""
    given = getattr(args, "cache_dir", None)
    return Path(given).expanduser() if given else paths.cache_dir()


def case_times(args: argparse.Namespace) -> Path:
    """Where a run remembers its case times for the next run's progress line (in the cache directory)."""
    from harness.records import casetimes

    return casetimes.in_cache(cache_dir(args))


def add_allow_changed(p: argparse.ArgumentParser) -> None:
    """``--allow-changed``: golden differences with every invariant holding do not fail the exit code."""
    p.add_argument(
        "--allow-changed",
        action="store_true",
        help="exit 0 when the only findings are CHANGED cases (golden differences with every invariant "
        "holding); they are still listed",
    )


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI job's time limit, ``kill``) stops a command like Ctrl-C does, so it writes
    what finished (a partial results.json or bisect.json, JUnit and report) instead of dying
    with nothing; the previous handler is restored after. Off the main thread no handler can
    be set and SIGTERM keeps its default."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
