"""The fault-injection matrix of the harness itself, as a table (not a test).

Runs every row of tests/faults/matrix.py (the same functions tests/faults/test_matrix.py runs
in CI) and prints fault -> outcome with the time to recover: the wall time of what brings the
user back to a result (the rerun that resumes, the run after following the one-line advice,
or the degraded run itself). Rows an existing test already injects are run through pytest
with ``--with-covered`` (some build a real MB history: minutes), else listed with their test.

Outcomes, best first: unaffected, resumed, clean error, degraded; "lost" is a defect.

    python bench/bench_faults.py [--with-covered] [-k SUBSTRING]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faults.lab import Lab, Outcome  # noqa: E402
from tests.faults.matrix import ROWS, Row  # noqa: E402


def _covered(row: Row, run_it: bool) -> tuple[str, str, str]:
    if not run_it:
        return row.expected.label + " (its test)", "-", f"covered by {row.covered_by}"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", row.covered_by],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t0
    outcome = row.expected.label if proc.returncode == 0 else Outcome.LOST.label
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    return outcome, f"{wall:.1f} s (whole test)", f"{row.covered_by}: {last}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-covered", action="store_true", help="also run the rows existing tests cover")
    ap.add_argument("-k", default="", help="only rows whose key contains this")
    args = ap.parse_args()
    worse = 0
    print("| fault | outcome | time to recover | detail |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        lab = Lab(Path(tmp))
        for row in ROWS:
            if args.k not in row.key:
                continue
            if row.untestable:
                outcome, recover, detail = "untestable", "-", row.untestable
            elif row.covered_by:
                outcome, recover, detail = _covered(row, args.with_covered)
                worse += outcome == Outcome.LOST.label
            else:
                assert row.run is not None
                t0 = time.monotonic()
                got = row.run(lab)
                wall = time.monotonic() - t0
                outcome = got.outcome.label
                recover = f"{got.recover_s:.1f} s" if got.recover_s else "-"
                detail = f"{got.detail[:140]} (row {wall:.1f} s)"
                worse += got.outcome > row.expected
            print(f"| {row.fault} | {outcome} | {recover} | {detail.replace('|', '/')} |", flush=True)
    print(f"\n{worse} row(s) worse than the matrix expects")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
