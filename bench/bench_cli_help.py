"""Start-up cost of the CLI: ``harness --help`` (every subcommand's parser built) against a bare
``python -c pass`` measured in the same run, as a ratio.

The parser must not import pandas, pyarrow, numpy, GitPython, jinja2 or torch (they cost about
half a second before issue 12); a command imports them when it runs. The import check itself
is a test (tests/test_cli_startup.py); this measures what a person waits for.

    .venv/bin/python bench/bench_cli_help.py [--rounds N] [--python PATH]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--python", default=sys.executable, help="interpreter whose harness is measured")
    args = ap.parse_args()
    cases = {
        "python -c pass": [args.python, "-c", "pass"],
        "python -m harness --help": [args.python, "-m", "harness", "--help"],
        "python -m harness run --help": [args.python, "-m", "harness", "run", "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for cmd in cases.values():  # warm the file cache once
        wall(cmd)
    for _ in range(args.rounds):  # interleaved: machine noise hits every command alike
        for name, cmd in cases.items():
            times[name].append(wall(cmd))
    base = statistics.median(times["python -c pass"])
    for name, samples in times.items():
        med = statistics.median(samples)
        print(f"{name:<30} median {med * 1000:7.1f} ms   ratio {med / base:5.2f}x of python -c pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
