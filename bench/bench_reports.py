"""How run-report size and render time grow with the number of cases (not a test).

Why ratios against a 30-case baseline rendered in the same process: absolute times depend on
the machine, but a 300-case report taking far more than ~10x the 30-case one (or a page
growing past a few MB) means something went quadratic or a diff is no longer windowed.

    python bench/bench_reports.py [--cases 300] [--baseline 30] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.report import render_run_report

SEQ_LEN = 4096  # a realistic packed row: long, so windowing matters


def _failing_case(i: int, rng: random.Random) -> CaseResult:
    """A failure shaped like the comparator's: a long token row and a cu_seqlens row."""
    expected = [rng.randrange(32000) for _ in range(SEQ_LEN)]
    obtained = list(expected)
    for pos in rng.sample(range(SEQ_LEN), 3):
        obtained[pos] = -1
    cu = sorted(rng.sample(range(1, SEQ_LEN), 7))
    exp_cu, obt_cu = [0, *cu, SEQ_LEN], [0, *[c + (i % 2) for c in cu], SEQ_LEN]
    mismatches = [
        {
            "path": "rows[0].tokens",
            "kind": "tensor",
            "expected": None,
            "obtained": None,
            "first_index": None,
            "max_abs": None,
            "max_rel": None,
            "n_mismatch": 3,
            "expected_row": expected,
            "obtained_row": obtained,
        },
        {
            "path": "rows[0].cu_seqlens",
            "kind": "tensor",
            "expected": None,
            "obtained": None,
            "first_index": [1],
            "max_abs": None,
            "max_rel": None,
            "n_mismatch": None,
            "expected_row": exp_cu,
            "obtained_row": obt_cu,
        },
    ]
    return CaseResult(
        f"packing::case_{i:04d}",
        f"suite_{i % 6}",
        Verdict.FAIL,
        0.2,
        message=f"case {i} differs",
        diff="\n".join(f"rows[0].tokens[{k}]" for k in range(40)),
        diff_data={"mismatches": mismatches},
    )


def make_run(n_cases: int, seed: int = 0) -> RunResult:
    """A run of ``n_cases`` where one in five fails with a long-row diff."""
    rng = random.Random(seed)
    cases = []
    for i in range(n_cases):
        if i % 5 == 0:
            cases.append(_failing_case(i, rng))
        elif i % 17 == 0:
            cases.append(
                CaseResult(f"packing::case_{i:04d}", f"suite_{i % 6}", Verdict.UNTESTABLE, message="needs CUDA")
            )
        else:
            cases.append(CaseResult(f"packing::case_{i:04d}", f"suite_{i % 6}", Verdict.PASS, 0.1))
    return RunResult(
        run_id=f"bench-{n_cases}",
        target={"version": "0.6.2", "commit": "f" * 40},
        versions={"megatron-core": "0.19.2", "torch": "2.13.0"},
        machine=Machine(cpu="bench"),
        import_mode="installed",
        duration_s=60.0,
        cases=cases,
    )


def measure(run: RunResult, out: Path, repeat: int) -> tuple[float, int]:
    """Median render seconds over ``repeat`` renders, and the page size in bytes."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        render_run_report(run, out)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--baseline", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base_t, base_b = measure(make_run(args.baseline), Path(tmp) / "base.html", args.repeat)
        big_t, big_b = measure(make_run(args.cases), Path(tmp) / "big.html", args.repeat)
    print(f"baseline  {args.baseline:5d} cases: {base_b / 1e6:7.3f} MB  {base_t * 1000:8.1f} ms")
    print(f"report    {args.cases:5d} cases: {big_b / 1e6:7.3f} MB  {big_t * 1000:8.1f} ms")
    print(
        f"ratios (report / baseline, cases x{args.cases / args.baseline:.1f}): "
        f"size x{big_b / base_b:.2f}  time x{big_t / base_t:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
