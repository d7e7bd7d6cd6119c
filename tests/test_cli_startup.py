"""``harness --help`` stays fast: building the parser imports none of the heavy libraries (they
cost about half a second before issue 12; bench/bench_cli_help.py measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness.paths import ROOT

HEAVY = ("pandas", "pyarrow", "numpy", "torch", "megatron", "git", "jinja2", "sqlite3", "rich")

PROBE = f"""
import json, sys
from harness import cli
parser = cli.build_parser()
parser.format_help()
for action in parser._subparsers._group_actions[0].choices.values():
    action.format_help()
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""


def test_building_the_parser_imports_no_heavy_library() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_help_of_every_command_works() -> None:
    """--help exits 0 for the top level and every command (argparse's own exit path)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in ([], ["run"], ["bisect"], ["nightly"], ["matrix"], ["mutate"], ["fixtures", "record"]):
        proc = subprocess.run(
            [sys.executable, "-m", "harness", *argv, "--help"], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 0 and "usage: harness" in proc.stdout, (argv, proc.stderr)
