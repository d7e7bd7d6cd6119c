"""``harness fixtures``: the only way goldens change.

``record`` runs the suites in record mode against the target (obtained values go to a
staging directory, never into ``fixtures/``), shows for every case whether its golden is new,
changed (with the diff) or unchanged, and writes new/changed goldens only with ``--yes`` or an
interactive "y", and never into the goldens installed with the harness (``--fixtures DIR`` for
a copy). ``verify`` reads every golden and reports corrupt ones; finding none fails.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness import paths
from harness.commands import _args
from harness.errors import CorruptFile, HarnessError, UsageError
from harness.suiterun import runner
from harness.target import require_mb

if TYPE_CHECKING:
    from harness.records.results import RunResult


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fixtures",
        help="record or verify golden fixtures",
        description="Goldens change only here: 'record' shows what would change and writes only "
        "after confirmation (--yes); 'verify' checks every golden file is readable.",
    )
    fsub = p.add_subparsers(dest="fixtures_cmd", required=True)
    rec = fsub.add_parser("record", help="record goldens from the current target (shows the diff first)")
    _args.add_target(rec)
    _args.add_cache_dir(rec)
    _args.add_suites(rec)
    rec.add_argument("--yes", action="store_true", help="write the new and changed goldens without asking")
    rec.add_argument(
        "--accept-training-change",
        action="store_true",
        help="also write changes that alter what trains (more or fewer trained tokens, moved boundaries, "
        "padding rows, loss totals); without it such changes are listed and left out",
    )
    _args.add_roots(rec)
    _args.add_timeout(rec, "the suite process")
    _args.add_jobs(rec, "pytest-xdist workers")
    _args.add_verbosity(rec, verbose=True)
    rec.set_defaults(func=record)
    ver = fsub.add_parser("verify", help="check that every golden file parses")
    _args.add_roots(ver)
    ver.set_defaults(func=verify)


def record(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from harness.golden.storage import read_golden, write_golden  # numpy: not needed by --help

    fixtures = _args.use_roots(args)
    bundled = paths.is_bundled(fixtures)  # the installed package's goldens: shown, never rewritten
    if bundled and args.yes:
        raise UsageError(
            f"{fixtures} holds the goldens installed with the harness; record into your own copy with --fixtures DIR"
        )
    tgt = _args.target_from_args(args)
    require_mb(tgt)
    staging = runner.temp_out_dir()
    try:
        opts = runner.RunOptions(
            suites=args.suite,
            keyword=args.keyword,
            record=True,
            obtained_dir=staging / "obtained",
            fixtures_dir=fixtures,
            timeout_s=args.timeout,
            jobs=args.jobs,
            verbose=args.verbose,
        )
        result = runner.run_suites(tgt, opts, staging, progress=None if args.quiet else sys.stderr)
        broken = [c for c in result.cases if c.verdict.value in ("fail", "error")]
        for c in broken:
            print(f"not recordable: {c.case_id}: {c.message.splitlines()[0] if c.message else ''}", file=out)
        changes, training = _changes(staging / "obtained", fixtures, out)
        if training and not args.accept_training_change:
            held = {dest for _src, dest in training}
            changes = [c for c in changes if c[1] not in held]
            print(
                f"left out {len(training)} change(s) that alter what trains (listed above as TRAINING): "
                "a defect accepted into the goldens is never seen again; rerun with --accept-training-change "
                "once each is known to be right",
                file=out,
            )
            if not changes:
                return 1
        stale = [] if args.keyword else _stale(fixtures, result, out)
        changes += [(None, path) for path in stale]
        if not changes:
            print("goldens are up to date; nothing to write", file=out)
            return 1 if broken else 0
        if bundled:
            print(f"nothing written: {fixtures} is installed with the harness; use --fixtures DIR", file=out)
            return 1
        if not (args.yes or _confirm(f"write {len(changes)} golden file(s)?")):
            print(f"nothing written; rerun with --yes to accept these {len(changes)} change(s)", file=out)
            return 1
        for src, dest in changes:
            if src is None:
                dest.unlink()
                dest.with_suffix(".npz").unlink(missing_ok=True)
            else:
                write_golden(dest, read_golden(src))
        print(f"wrote {len(changes)} golden file(s) under {fixtures}", file=out)
        return 1 if broken else 0
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _changes(
    obtained_root: Path, fixtures_root: Path, out: TextIO
) -> tuple[list[tuple[Path | None, Path]], list[tuple[Path, Path]]]:
    """The staged values that differ from their goldens, as the suite process found them (its
    review beside each staged golden, :func:`harness.suite.goldenfixture.review`); print them and
    return what to write, and the changes among them that alter what trains
    (:mod:`harness.golden.training`)."""
    from harness.golden.storage import ReviewStatus, golden_path, read_golden, read_review

    changes: list[tuple[Path | None, Path]] = []
    training: list[tuple[Path, Path]] = []
    for src in sorted(obtained_root.rglob("*.json")):
        new = read_golden(src)
        dest = golden_path(fixtures_root, new.suite, new.case)
        review = read_review(src)
        if review.status is ReviewStatus.SAME and dest.exists():
            continue
        if review.status is ReviewStatus.NEW or not dest.exists():
            print(f"NEW      {new.suite}::{new.case}", file=out)
        elif review.status is ReviewStatus.REPLACE:
            print(f"REPLACE  {new.suite}::{new.case} (current golden unreadable: {review.diff})", file=out)
        else:
            print(f"CHANGED  {new.suite}::{new.case}\n  " + review.diff.replace("\n", "\n  "), file=out)
            if review.training:
                print(f"TRAINING {new.suite}::{new.case}: {'; '.join(review.training)}", file=out)
                training.append((src, dest))
        changes.append((src, dest))
    return changes, training


def _stale(fixtures_root: Path, result: RunResult, out: TextIO) -> list[Path]:
    """Goldens of the recorded suites whose case no longer exists in the suite's collection.

    Only the collection decides: a case that ran but produced no value (untestable on this MB,
    a known MB bug, a failure before its golden check, an error) keeps its golden. A suite that
    did not report its cases (it crashed or timed out: a ``suite::*`` placeholder) keeps all.
    """
    from harness.golden.storage import read_golden

    collected = {c.case_id for c in result.cases}
    whole_suite_lost = {c.suite for c in result.cases if c.case_id.endswith("::*")}
    stale = []
    for suite in sorted({c.suite for c in result.cases} - whole_suite_lost):
        for path in sorted((fixtures_root / suite).glob("*.json")):
            try:
                golden = read_golden(path)
            except CorruptFile:
                continue  # `harness fixtures verify` reports it; never deleted here
            if f"{golden.suite}::{golden.case}" not in collected:
                print(f"STALE    {suite}/{path.name} (case {golden.case} no longer exists; removed on --yes)", file=out)
                stale.append(path)
    return stale


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def verify(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Every golden parses, and so does the reviewed known-failures file beside them."""
    from harness.golden.storage import read_golden
    from harness.records import explored, known

    bad = 0
    root = paths.require_fixtures(_args.use_roots(args))
    known_file = root / known.FILENAME
    try:
        entries = known.load(known_file)
        if known_file.exists():
            print(f"{known_file.name}: {len(entries)} known MB bug(s)", file=out)
    except CorruptFile as exc:
        bad += 1
        print(f"corrupt: {exc}", file=out)
    explored_dir = root / explored.DIRNAME
    try:  # explored cases kept by ``harness explore --save``: their own record kind, beside the goldens
        kept = explored.load_all(explored_dir)
        if kept:
            print(f"{explored.DIRNAME}/: {len(kept)} saved explored case(s)", file=out)
    except CorruptFile as exc:
        bad += 1
        print(f"corrupt: {exc}", file=out)
    files = sorted(p for p in root.rglob("*.json") if p != known_file and explored_dir not in p.parents)
    for path in files:
        try:
            read_golden(path)
        except (CorruptFile, HarnessError) as exc:
            bad += 1
            print(f"corrupt: {exc}", file=out)
    print(f"{len(files) - bad} golden file(s) ok, {bad} corrupt", file=out)
    if not files:  # "0 ok, 0 corrupt" is no verification
        print(f"harness: no golden files under {root}: nothing verified", file=sys.stderr)
        return 1
    return 1 if bad else 0
