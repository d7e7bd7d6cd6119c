"""Command line entry point: ``harness <command>``.

Every user error is a :class:`HarnessError`, printed as one line (exit code 2); nothing is
lost on such an error because commands write results atomically and only at the end.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness import __version__, config
from harness.errors import HarnessError

COMMANDS = ("run", "fixtures", "bisect", "nightly", "mutate", "matrix")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Verify sequence packing in Megatron-Bridge against golden fixtures, and bisect regressions.",
        epilog="Start with 'harness run' (tests the MB installed here). 'harness bisect GOOD..BAD --repo MB_CHECKOUT' "
        "finds the commit that broke each failing case. Every command has --help.",
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"harness.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:  # defaults from ./harness.toml or [tool.harness] in ./pyproject.toml; flags win
        applied = config.apply(parser, config.load())
    except HarnessError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    args = applied.finish(parser.parse_args(argv))
    try:
        return int(args.func(args, sys.stdout) or 0)  # the stdout of now (a test may have replaced it)
    except HarnessError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("harness: interrupted; results written so far are kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
