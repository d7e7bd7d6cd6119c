"""Benchmark of the bisect driver on generated histories (not a test; minutes on 2 cores).

Histories of 64, 512 and 4096 commits of a tiny fake package (``src/fakepkg/calc.py`` plus
``tests/test_calc.py``, two cases), built with ``git fast-import``, with one or two injected
faults at random positions; every other commit is noise (README). The evaluator is the same
pytest check for both sides: the harness driver (:func:`harness.bisect.driver.run_bisection`
with -j 1/2/4, real ``WorkspaceCache`` materialisation, real SQLite cache, real thread
executor) and plain ``git bisect run`` in a throwaway clone (one session per fault, since
git bisect finds only the first bad commit of one check).

Printed per history: evaluations used vs ceil(log2 N), rounds (longest chain of dependent
evaluations: what wall time is proportional to when evaluations cost minutes), wall time.

    .venv/bin/python bench/bench_bisect.py [--sizes 64 512 4096] [--seed 7] [--jobs 1 2 4]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bisect.driver import BisectOptions, run_bisection  # noqa: E402
from harness.bisect.evaluator import EvalOutcome  # noqa: E402
from harness.records.verdict import Verdict  # noqa: E402
from harness.repository.workspaces import WorkspaceCache  # noqa: E402

CALC_OK = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
FAULTS = [("return a + b\n", "return a + b + (a == 2)\n"), ("return a * b\n", "return a * b + (b == 3)\n")]
TEST = (
    "from fakepkg.calc import add, mul\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\n"
    "def test_mul():\n    assert mul(2, 3) == 6\n"
)


def _blob(text: str) -> bytes:
    data = text.encode()
    return b"data %d\n" % len(data) + data + b"\n"


def make_history(path: Path, n: int, fault_at: list[int]) -> list[str]:
    """A repository of ``n`` commits (index 0 good); fault k injected at ``fault_at[k]``."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    stream = bytearray()
    calc = CALC_OK
    for i in range(n):
        files = {"README": f"revision {i}\n"}
        if i == 0:
            files |= {
                "src/fakepkg/__init__.py": "",
                "src/fakepkg/calc.py": calc,
                "tests/test_calc.py": TEST,
                "pyproject.toml": "[project]\nname = 'fakepkg'\n",
            }
        for k, at in enumerate(fault_at):
            if i == at:
                calc = calc.replace(*FAULTS[k])
                files["src/fakepkg/calc.py"] = calc
        msg = f"commit {i}" + ("".join(f" inject fault {k}" for k, at in enumerate(fault_at) if at == i))
        stream += b"commit refs/heads/main\nmark :%d\n" % (i + 1)
        stamp = 1_700_000_000 + 60 * i
        stream += b"author Bench <bench@example.com> %d +0000\ncommitter Bench <bench@example.com> %d +0000\n" % (
            stamp,
            stamp,
        )
        stream += _blob(msg)[:-1]
        if i:
            stream += b"from :%d\n" % i
        for name, text in files.items():
            stream += b"M 100644 inline " + name.encode() + b"\n" + _blob(text)
        stream += b"\n"
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input=bytes(stream), check=True)
    subprocess.run(["git", "-C", str(path), "reset", "-q", "--hard", "main"], check=True)
    out = subprocess.run(
        ["git", "-C", str(path), "rev-list", "--reverse", "main"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(out) == n
    return out


def pytest_cmd(tests: Path, junit: Path | None = None, keyword: str | None = None) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tests.parent),
        "-c",
        os.devnull,
        str(tests / "test_calc.py"),
    ]
    if junit:
        cmd += ["--junitxml", str(junit)]
    if keyword:
        cmd += ["-k", keyword]
    return cmd


@dataclass(frozen=True)
class FakeEvaluator:
    """Materialise with the real WorkspaceCache and run the fake package's pytest check."""

    repo: Path
    workspace_dir: Path

    def cache_namespace(self) -> tuple[str, str]:
        return "bench-suite", "bench-env"

    def __call__(self, sha: str) -> EvalOutcome:
        t0 = time.monotonic()
        tree = WorkspaceCache(self.workspace_dir, self.repo).materialize(sha)
        junit = tree / "junit.xml"
        env = dict(
            os.environ, PYTHONPATH=str(tree / "src"), PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"
        )
        subprocess.run(pytest_cmd(tree / "tests", junit), cwd=tree, env=env, capture_output=True)
        verdicts = {}
        for tc in ET.parse(junit).getroot().iter("testcase"):
            failed = tc.find("failure") is not None or tc.find("error") is not None
            verdicts["calc::" + tc.get("name", "")] = Verdict.FAIL if failed else Verdict.PASS
        return EvalOutcome.of(verdicts, duration_s=time.monotonic() - t0)


def harness_bisect(repo: Path, good: str, bad: str, jobs: int, work: Path) -> tuple[dict, float]:
    cache = work / f"cache-j{jobs}"
    shutil.rmtree(cache, ignore_errors=True)
    opts = BisectOptions(repo=repo, good=good, bad=bad, jobs=jobs, cache_dir=cache, out_dir=work / "out")
    # the evaluator needs the workspace dir the driver would choose
    from harness.repository.gitrepo import open_repo
    from harness.repository.workspaces import workspace_dir_for

    ev = FakeEvaluator(repo, workspace_dir_for(cache, open_repo(repo)))
    t0 = time.monotonic()
    run = run_bisection(opts, evaluator=ev, progress=None)
    return run.doc.to_json(), time.monotonic() - t0


def git_bisect(repo: Path, good: str, bad: str, keyword: str, work: Path) -> tuple[int, str, float]:
    """Plain git bisect run in a throwaway clone; returns (check runs, first bad sha, seconds)."""
    clone = work / "clone"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    counter = work / "runs.txt"
    counter.write_text("")
    script = work / "check.sh"
    cmd = " ".join(pytest_cmd(clone / "tests", keyword=keyword))
    env = f"PYTHONPATH={clone}/src PYTHONDONTWRITEBYTECODE=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"
    script.write_text(f"#!/bin/sh\necho x >> {counter}\n{env} {cmd} >/dev/null 2>&1\n")
    script.chmod(0o755)
    t0 = time.monotonic()
    git = ["git", "-C", str(clone)]
    subprocess.run(git + ["bisect", "start", bad, good], check=True, capture_output=True)
    out = subprocess.run(git + ["bisect", "run", str(script)], capture_output=True, text=True)
    wall = time.monotonic() - t0
    first_bad = ""
    for line in out.stdout.splitlines():
        if line.endswith("is the first bad commit"):
            first_bad = line.split()[0]
    return len(counter.read_text().split()), first_bad, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 512, 4096])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        for n in args.sizes:
            for n_faults in (1, 2):
                work = Path(tmp) / f"n{n}-f{n_faults}"
                work.mkdir()
                fault_at = sorted(rng.sample(range(1, n), n_faults))
                t0 = time.monotonic()
                shas = make_history(work / "repo", n, fault_at)
                built = time.monotonic() - t0
                expect = {f"calc::test_{name}": shas[at] for name, at in zip(("add", "mul"), fault_at)}
                row = {"n": n, "faults": n_faults, "log2": math.ceil(math.log2(n - 1)), "build_s": built}
                for j in args.jobs:
                    doc, wall = harness_bisect(work / "repo", shas[0], shas[-1], j, work)
                    found = {c["case_id"]: (c["culprit"] or {}).get("sha") for c in doc["cases"]}
                    assert found == expect, f"n={n} j={j}: found {found}, expected {expect}"
                    row[f"j{j}"] = (doc["evaluations"], doc["rounds"], wall)
                runs, wall_total = 0, 0.0
                for case, sha in expect.items():
                    r, first_bad, wall = git_bisect(work / "repo", shas[0], shas[-1], case.split("_")[-1], work)
                    assert first_bad == sha, f"git bisect found {first_bad}, expected {sha}"
                    runs, wall_total = runs + r, wall_total + wall
                row["git"] = (runs, wall_total)
                rows.append(row)
                print(f"done n={n} faults={n_faults} at {fault_at} (history built in {built:.1f} s)", file=sys.stderr)
    head = (
        f"{'commits':>7} {'faults':>6} {'ceil log2':>9} |"
        + "".join(f" {'-j ' + str(j) + ' evals/rounds/wall':>24} |" for j in args.jobs)
        + f" {'git bisect run evals/wall':>26}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = "".join(f" {r[f'j{j}'][0]:>9} {r[f'j{j}'][1]:>6} {r[f'j{j}'][2]:>6.1f} s |" for j in args.jobs)
        print(f"{r['n']:>7} {r['faults']:>6} {r['log2']:>9} |{cells} {r['git'][0]:>17} {r['git'][1]:>6.1f} s")
    print(
        "\nevals include the 2 endpoint evaluations (git bisect run does not check its endpoints);"
        " rounds = longest chain of dependent evaluations (wall time ~ rounds x cost of one evaluation);"
        " git bisect needs one session per fault, the harness bisects both cases at once."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
