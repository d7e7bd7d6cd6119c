"""``harness coverage [RUN]``: every packing knob MB exposes and the values the run's cases exercised.

The inventory comes from MB's own code at the commit the run tested (:mod:`harness.suite.knobs`), the
values from what MB's classes and functions were really called with during the run (every
``harness run`` records them in its run directory, ``knobs.jsonl``). ``RUN`` is a run directory or
its ``results.json`` (default: the newest run under ``./reports``). ``--gaps`` lists only knobs short
of the goal (their default and one other value), ``--json FILE`` writes the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from harness.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "coverage",
        help="MB's packing knobs and the values a run exercised",
        description="List every packing knob MB exposes at the tested commit (read from MB's code) with the "
        "values the run's cases called MB with, the suites that did, and whether each knob was exercised with "
        "its default and another value.",
    )
    p.add_argument("run_dir", nargs="?", type=Path, metavar="RUN", help="a run directory or its results.json")
    p.add_argument("--gaps", action="store_true", help="only the knobs short of the goal")
    p.add_argument("--json", type=Path, metavar="FILE", dest="json_out", help="also write the table as JSON")
    p.set_defaults(func=run)


def _run_dir(given: Path | None) -> Path:
    from harness.contract import KNOBS_LOG

    if given is not None:
        where = given.parent if given.is_file() else given
        if not (where / KNOBS_LOG).is_file():
            raise UsageError(f"{given}: no {KNOBS_LOG} there (a run directory of harness run records one)")
        return where
    runs = sorted(p.parent for p in Path("reports").glob(f"*/{KNOBS_LOG}"))
    if not runs:
        raise UsageError(f"no run with a {KNOBS_LOG} under ./reports (run `harness run` first, or give RUN)")
    return runs[-1]


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from harness.contract import KNOBS_LOG
    from harness.records import knobs as records
    from harness.report import knobtable as table

    where = _run_dir(args.run_dir)
    exercised = records.read(where / KNOBS_LOG)
    rows = table.rows(exercised)
    if not rows:
        raise UsageError(f"{where / KNOBS_LOG}: no knob recorded (the run imported no MB)")
    print(f"coverage of {where}", file=out)
    for line in table.lines(rows, only_gaps=args.gaps):
        print(line, file=out)
    print(table.summary_line(rows), file=out)
    for line in table.step_lines(exercised.steps, exercised.off_path):
        print(line, file=out)
    if args.json_out:
        doc = {
            "kind": "harness-knob-coverage",
            "schema": 1,
            "run": str(where),
            "knobs": [r.to_json() for r in rows],
            "steps": {k: sorted(v) for k, v in sorted(exercised.steps.items())},
            "off_packed_path": dict(sorted(exercised.off_path.items())),
        }
        args.json_out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0
