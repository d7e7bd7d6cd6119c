"""``harness compare A B``: what changed between two runs (new failures, fixed, changed, untestable, gone).

``A`` and ``B`` are ``results.json`` files or the run directories that hold them (``harness run``
and ``harness nightly`` write them). The terminal gets one line per changed case under each
heading; ``--markdown FILE`` (and ``$GITHUB_STEP_SUMMARY`` when set) a short table for a PR
comment or a job summary. Exit 1 when B is worse than A (a new failure, a case newly untestable
or gone), 0 otherwise, 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.records.results import RunResult


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="what changed between two runs' results",
        description="Diff two runs' results.json (or run directories): new failures (with their impact), "
        "fixed, changed, newly untestable and gone cases, in the terminal and as Markdown.",
    )
    p.add_argument("a", type=Path, help="the earlier run: results.json or its directory")
    p.add_argument("b", type=Path, help="the later run: results.json or its directory")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the comparison as Markdown")
    p.set_defaults(func=run)


def _load(path: Path) -> RunResult:
    from harness.records.results import RunResult

    file = path / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"{path}: no results.json there (give a run's results.json or its directory)")
    return RunResult.load(file)


def _label(result: RunResult, given: object) -> str:
    """A run as a reader knows it: MB's version and commit (the run id when neither is known)."""
    version = result.versions.get("megatron-bridge")
    commit = (result.provenance.mb_commit or result.provenance.mb_ref or "")[:9]
    return " ".join(p for p in (f"MB {version}" if version else "", commit) if p) or result.run_id or str(given)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from harness.report import markdown

    a, b = _load(args.a), _load(args.b)
    diff = markdown.compare(a, b)
    print(f"compare {args.a} -> {args.b}", file=out)
    for line in markdown.compare_lines(diff):
        print(line, file=out)
    text = markdown.compare_markdown(diff, _label(a, args.a), _label(b, args.b))
    markdown.write_summary(text, args.markdown)
    return 1 if diff.worse else 0
