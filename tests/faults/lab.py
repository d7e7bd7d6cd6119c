"""The bench of the fault-injection matrix: outcomes, and the cheapest real runs of the harness.

A row of the matrix (:mod:`tests.faults.matrix`) injects one fault into a real run of the
``harness`` command line and says what came of it, as one :class:`Outcome`. The runs are the
cheapest that still exercise the code a user runs:

* ``bisect`` through :mod:`tests.faults.scripted_cli` on a generated history (milliseconds per
  evaluation: the MB under test is scripted, everything around it is the real harness);
* ``run --mb-src`` on a copy of the installed MB with one module patched (a light-import
  suite: a few seconds), for faults that live in the evaluated MB itself.

The pytest tests (tests/faults/test_matrix.py) and bench/bench_faults.py run the same rows.
"""

from __future__ import annotations

import enum
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.test_bisect_command import GIT_ENV, _fake_history, cache_rows

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = [sys.executable, "-m", "tests.faults.scripted_cli"]
HARNESS = [sys.executable, "-m", "harness"]
ALGORITHMS = Path("data") / "packing" / "algorithms.py"  # the module the light suite imports first


class Outcome(enum.IntEnum):
    """Best first: a row fails its test when the outcome is worse than the one it expects."""

    UNAFFECTED = 0  # finished with the right answer, nothing to recover
    RESUMED = 1  # a rerun finishes with no verdict lost and no finished evaluation repeated
    CLEAN_ERROR = 2  # one line, non-zero exit, nothing corrupted (a rerun after the fix works)
    DEGRADED = 3  # finished, with the fault named in the results
    LOST = 4  # a traceback, a lost or wrong verdict, a corrupted file, a leak: a defect

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


@dataclass
class Observed:
    outcome: Outcome
    recover_s: float  # wall time of what brings the user back to a result (rerun, fixed run)
    detail: str


@dataclass
class Proc:
    rc: int
    out: str
    err: str
    wall_s: float

    def one_line_error(self) -> str | None:
        """The error line when the run ended as the CLI promises (one line, exit 2), else None."""
        lines = [x for x in self.err.splitlines() if x.strip()]
        if self.rc == 2 and lines and lines[-1].startswith("harness: error:") and "Traceback" not in self.err:
            return lines[-1]
        return None


def _limits(fsize: int | None) -> Callable[[], None] | None:
    if fsize is None:
        return None

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return apply


@dataclass
class Lab:
    """A scratch directory and the runs the rows make in it."""

    root: Path
    _mb_base: Path | None = field(default=None, init=False)
    _n: int = field(default=0, init=False)

    def fresh(self, name: str) -> Path:
        self._n += 1
        path = self.root / f"{self._n:02d}-{name}"
        path.mkdir(parents=True)
        return path

    def env(self, **extra: str) -> dict[str, str]:
        path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        return {**os.environ, **GIT_ENV, "PYTHONPATH": path, **extra}

    # ------------------------------------------------------------ scripted bisect

    def history(self, where: Path, n: int = 12, culprit: int = 7) -> tuple[Path, list[str]]:
        """A generated MB history: case ``s::a`` fails from commit ``culprit`` on."""
        return _fake_history(where, n, {"s::a": culprit})

    def bisect(
        self,
        repo: Path,
        rng: str,
        cache: Path,
        out: Path,
        *extra: str,
        fsize: int | None = None,
        env: dict[str, str] | None = None,
    ) -> Proc:
        """``harness bisect`` with the scripted MB, to completion."""
        cmd = [*SCRIPTED, "bisect", rng, "--repo", str(repo), "--cache-dir", str(cache), "--out", str(out), *extra]
        t0 = time.monotonic()
        p = subprocess.run(
            cmd,
            cwd=ROOT,
            env={**self.env(), **(env or {})},
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=_limits(fsize),
        )
        return Proc(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)

    def bisect_killed(
        self, repo: Path, rng: str, cache: Path, out: Path, sig: int, when: Callable[[], bool], env: dict[str, str]
    ) -> int:
        """Start the scripted bisect, send ``sig`` to its whole process group once ``when()``; its exit status."""
        cmd = [*SCRIPTED, "bisect", rng, "--repo", str(repo), "--cache-dir", str(cache), "--out", str(out), "-q"]
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**self.env(), **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while not when() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        return proc.wait(timeout=60)

    @staticmethod
    def culprit(out: Path) -> str | None:
        doc = json.loads((out / "bisect.json").read_text())
        found = [c["culprit"]["sha"] for c in doc["cases"] if c.get("culprit")]
        return found[0] if len(found) == 1 else None

    @staticmethod
    def rows(cache: Path) -> list[tuple[str, int]]:
        return cache_rows(cache)

    # ------------------------------------------------------------ real MB, one patched module

    def mb_tree(self, where: Path, code: str) -> Path:
        """``src/`` of the installed MB with ``code`` run at the end of the import of the
        packing algorithms module (the first MB module the light suite imports)."""
        if self._mb_base is None:
            spec = importlib.util.find_spec("megatron.bridge")
            if spec is None or not spec.submodule_search_locations:
                import pytest

                pytest.skip("megatron.bridge is not installed")
            base = self.root / "mb-base" / "src" / "megatron" / "bridge"
            shutil.copytree(
                next(iter(spec.submodule_search_locations)), base, ignore=shutil.ignore_patterns("__pycache__")
            )
            self._mb_base = base.parent.parent
        src = where / "src"
        shutil.copytree(self._mb_base, src, copy_function=os.link)  # hard links: 21 MB shared, not copied
        module = src / "megatron" / "bridge" / ALGORITHMS
        text = module.read_text()
        module.unlink()  # never write through a hard link into the shared copy
        module.write_text(text + "\n\n# injected by tests/faults\n" + code + "\n")
        return src

    def run_light(self, src: Path, out: Path, *extra: str) -> Proc:
        """``harness run`` of the light packing-algorithms suite on ``src`` (a few seconds)."""
        cmd = [*HARNESS, "run", "--mb-src", str(src), "--suite", "packing_algorithms", "--import", "light"]
        t0 = time.monotonic()
        p = subprocess.run(
            [*cmd, "--out", str(out), "-q", *extra],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        return Proc(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
