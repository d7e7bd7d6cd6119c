"""Start-up cost of the CLI: ``harness --help`` (every subcommand's parser built) against a bare
``python -c pass`` measured in the same run, as a ratio.

The parser must not import pandas, pyarrow, numpy, GitPython, jinja2 or torch (they cost about
half a second before issue 12); a command imports them when it runs. The import check itself
is a test (tests/test_cli_startup.py); this measures what a person waits for.

    .venv/bin/python bench/bench_cli_help.py [--rounds N] [--python PATH]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child): CPU time is what a busy shared machine distorts least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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
    walls: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for cmd in cases.values():  # warm the file cache once
        measure(cmd)
    for _ in range(args.rounds):  # interleaved: machine noise hits every command alike
        for name, cmd in cases.items():
            wall, cpu = measure(cmd)
            walls[name].append(wall)
            cpus[name].append(cpu)
    base_wall = statistics.median(walls["python -c pass"])
    base_cpu = statistics.median(cpus["python -c pass"])
    for name in cases:
        w, c = statistics.median(walls[name]), statistics.median(cpus[name])
        print(
            f"{name:<30} wall {w * 1000:7.1f} ms ({w / base_wall:5.2f}x)   "
            f"cpu {c * 1000:7.1f} ms ({c / base_cpu:5.2f}x of python -c pass)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
