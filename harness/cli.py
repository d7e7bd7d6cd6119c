"""Command line entry point: ``harness <command>``.

Every user error is a :class:`HarnessError`, printed as one line (exit code 2); nothing is
lost on such an error because commands write results atomically and only at the end.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import sys
from typing import Any, NoReturn

from harness import __version__, config
from harness.errors import HarnessError

#: A file system refusing a write (full, over quota or a file-size limit, read-only, no
#: permission, a file where a directory should be): the user's environment, not a harness bug.
FILESYSTEM_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR}
)

COMMANDS = ("run", "fixtures", "bisect", "nightly", "mutate", "matrix", "compare", "coverage", "explore")


class HarnessParser(argparse.ArgumentParser):
    """argparse without prefix matching, with a "did you mean" for a near-miss option.

    ``allow_abbrev`` would take ``--suites packing_algorithms`` as ``--suites-dir``: a misspelt
    option silently means another one. Every (sub)command parser is of this class.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}{self._did_you_mean(message)}\n")

    def _did_you_mean(self, message: str) -> str:
        if "unrecognized arguments:" not in message:
            return ""
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        words = message.split("unrecognized arguments:", 1)[1].split()
        for word in words:
            if word.startswith("--"):
                close = difflib.get_close_matches(word.split("=", 1)[0], known, n=2, cutoff=0.7)
                if close:
                    return f" (did you mean {' or '.join(close)}?)"
        return ""


def build_parser() -> argparse.ArgumentParser:
    parser = HarnessParser(
        prog="harness",
        description="Verify sequence packing in Megatron-Bridge against golden fixtures, and bisect regressions.",
        epilog="Start with 'harness run' (tests the MB installed here). 'harness bisect GOOD..BAD --repo MB_CHECKOUT' "
        "finds the commit that broke each failing case. Every command has --help.",
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=HarnessParser)
    for name in COMMANDS:
        importlib.import_module(f"harness.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:  # defaults from ./harness.toml or [tool.harness] in ./pyproject.toml; flags win
        found = config.load()
        applied = config.apply(parser, found)
    except HarnessError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    args = applied.finish(_parse(parser, argv))
    if found.source and not getattr(args, "quiet", False):  # as pytest says "configfile:": defaults came from there
        print(f"harness: configfile: {found.source}", file=sys.stderr)
    try:
        return int(args.func(args, sys.stdout) or 0)  # the stdout of now (a test may have replaced it)
    except HarnessError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        if exc.errno not in FILESYSTEM_ERRNOS:
            raise  # anything else is a harness bug and keeps its traceback
        where = f" {exc.filename}" if exc.filename else ""
        print(
            f"harness: error: cannot write{where}: {exc.strerror or exc} (disk full, read-only or missing "
            "directory?); results written so far are kept",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("harness: interrupted; results written so far are kept", file=sys.stderr)
        return 130


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parse_args``, but an option the chosen subcommand does not know is that subcommand's
    error (its own usage, a "did you mean" among its own options), not the top level's."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = _subcommand(parser, args)
        (command or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _subcommand(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser | None:
    """The deepest subcommand parser ``args`` chose ("fixtures record" is two levels)."""
    found: argparse.ArgumentParser | None = None
    here: argparse.ArgumentParser | None = parser
    while here is not None:
        subs = [a for a in here._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs and subs[0].dest else None
        here = subs[0].choices.get(chosen) if subs and chosen in subs[0].choices else None
        found = here or found
    return found


if __name__ == "__main__":
    sys.exit(main())
