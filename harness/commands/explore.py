"""``harness explore``: property-based exploration of packing (Hypothesis), replay and save.

``--budget N --seed S`` draws N examples of each space (``--space``: ``data``, shapes and offline
packing knobs in a world of one; ``layouts``, the same data under one drawn parallel layout or
packing path; ``direct``, the same data through MB's direct HF SFT path and its collate knobs;
``pretrain``, documents packed into pretraining samples with their lengths and knobs drawn;
``energon``, image/chat samples through MB's Energon VLM data path with its loader knobs;
``mimo``, a user's image folder through MB's MegatronMIMO data and step path with its lengths and
module layouts; ``config``, whole packing configurations held to MB's documented rules in combination;
default all seven; suites/_explore.py) with a seed:
the same seed draws the same examples, so a nightly's exploration is reproducible. A failing
example is shrunk to a minimal one and printed with ``replay: harness explore --replay SPEC``.
``--replay SPEC`` runs that one case; with ``--save`` it is kept as a regression case under
``<fixtures>/explored/`` (a reviewed file like a golden; every ``harness run`` checks it, and
``harness bisect`` can bisect it like any other case). The run itself is ``harness run --suite
explore`` with the exploration's settings: the same target, cache, output and report options.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TextIO

from harness.commands import _args
from harness.commands import run as run_command
from harness.contract import Env
from harness.errors import UsageError
from harness.records import explored

SUITE = "explore"
TESTS = {s.name: s.test for s in explored.SPACES}
SAVED_TESTS = {s.name: s.saved_test for s in explored.SPACES}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explore",
        help="property-based exploration of packing (Hypothesis): draw, shrink, replay, save",
        description="Draw data shapes and packing knobs with Hypothesis, build each case through MB and hold it "
        "to the oracle; a failure is shrunk to a minimal case printed as a replayable spec.",
    )
    p.add_argument("--budget", type=int, default=50, metavar="N", help="examples to draw (default 50)")
    p.add_argument(
        "--space",
        choices=(*TESTS, "all"),
        default="all",
        help="what to draw: " + ", ".join(s.what for s in explored.SPACES) + f", or all {len(explored.SPACES)} "
        "(default all)",
    )
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the exploration's seed (default 0)")
    p.add_argument("--eos", action="store_true", help="let answers hold literal EOS tokens (MB 0.6.2's known bug)")
    p.add_argument("--replay", metavar="SPEC", help="run the one case a printed spec names instead of drawing")
    p.add_argument("--save", action="store_true", help="with --replay: keep the case as a regression case")
    _args.add_target(p)
    _args.add_cache_dir(p)
    _args.add_out(p, "reports/<run-id>")
    _args.add_timeout(p, "the suite process")
    _args.add_roots(p)
    _args.add_verbosity(p, verbose=True)
    _args.add_allow_changed(p)
    p.set_defaults(func=run)


def _save(spec: str, out: TextIO) -> None:
    from harness import paths

    doc = explored.parse(spec)
    path = explored.save(paths.fixtures_dir() / explored.DIRNAME, doc)
    test = SAVED_TESTS[explored.space(doc)]
    print(
        f"saved {path.stem}: {path}; record its golden: harness fixtures record --suite explore -k {test} --yes",
        file=out,
    )


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    if args.budget < 1:
        raise UsageError("--budget must be at least 1")
    if args.save and not args.replay:
        raise UsageError("--save keeps the case --replay names: give --replay SPEC")
    spaces = list(TESTS) if args.space == "all" else [args.space]
    if args.replay:
        try:
            spec = explored.parse(args.replay)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        os.environ[Env.EXPLORE_REPLAY] = args.replay
        spaces = [explored.space(spec)]  # the one test that draws such a case replays it
    os.environ[Env.EXPLORE_BUDGET] = str(args.budget)
    os.environ[Env.EXPLORE_SEED] = str(args.seed)
    os.environ[Env.EXPLORE_EOS] = "1" if args.eos else "0"
    args.suite, args.keyword = [SUITE], " or ".join(TESTS[s] for s in spaces)
    args.jobs, args.import_mode, args.require_gpu, args.repo_url, args.summary_md = 1, "auto", False, None, None
    args.executor = "local"
    code = run_command.run(args, out)
    if args.save and args.replay:
        _save(args.replay, out)
    return code
