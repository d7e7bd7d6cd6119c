"""The harness as a user installs it: a wheel in a fresh virtual environment, run from a
directory that is not the checkout.

It once installed only ``harness/``: ``harness run`` ran zero suites and exited 0, ``fixtures
verify`` said "0 golden file(s) ok", and reports went to site-packages. The fresh environment
reuses the Megatron-Bridge stack already installed here (a ``.pth`` line per site-packages
directory that holds it), so only the harness itself comes from the wheel. The time the wheel
build and install take is printed (``-s`` shows it), never asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from harness import paths
from harness.paths import mb_location

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(mb_location() is None, reason="no megatron.bridge installed (run scripts/setup.sh)"),
]

#: Imported by the harness or the suites; the directories holding them make up the "MB stack".
STACK = ("torch", "megatron.core", "megatron.bridge", "pytest", "xdist", "pandas", "git", "jinja2", "rich")
#: Not part of a source tree to build from.
NOT_SOURCE = (".venv", ".git", "reports", "build", "*.egg-info", "__pycache__", ".releases", ".whl", ".gl")


def _stack_dirs() -> list[str]:
    dirs: list[str] = []
    for name in STACK:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, f"{name} is not importable here"
        top = Path(spec.origin).parents[name.count(".") + 1]  # the sys.path entry holding it
        if str(top) not in dirs:
            dirs.append(str(top))
    return dirs


def _clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH (the checkout must not leak in), no harness roots from the caller."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, **extra}


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the venv's bin directory, an environment to run it with), the wheel built from this tree."""
    base = tmp_path_factory.mktemp("wheel")
    src, dist, venv = base / "src", base / "dist", base / "venv"
    shutil.copytree(paths.ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCE), symlinks=True)
    env = _clean_env(HARNESS_CACHE=str(base / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")

    t0 = time.monotonic()
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), "."],
        src,
        env,
    )
    assert built.returncode == 0, built.stderr
    t_build = time.monotonic() - t0
    (wheel,) = dist.glob("harness-*.whl")

    t0 = time.monotonic()
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, env)
    assert made.returncode == 0, made.stderr
    purelib = Path(
        sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    )  # the new venv's site-packages
    (purelib / "zz-mb-stack.pth").write_text("\n".join(_stack_dirs()) + "\n")
    t_venv = time.monotonic() - t0

    t0 = time.monotonic()
    python = venv / "bin" / "python"
    inst = _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], base, env)
    assert inst.returncode == 0, inst.stderr
    t_install = time.monotonic() - t0
    print(
        f"\nwheel {wheel.name} ({wheel.stat().st_size / 1e3:.0f} kB): build {t_build:.1f} s, "
        f"venv {t_venv:.1f} s, install {t_install:.1f} s"
    )
    where = _run([str(python), "-c", "import harness; print(harness.__file__)"], base, env)
    assert Path(where.stdout.strip()).is_relative_to(purelib), "harness comes from the wheel, not the checkout"
    return venv / "bin", env


def test_installed_wheel_runs_a_suite_from_another_directory(installed, tmp_path: Path) -> None:
    bin_dir, env = installed
    work = tmp_path / "work"
    work.mkdir()
    proc = _run([str(bin_dir / "harness"), "run", "--suite", "packing_algorithms", "-q"], work, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (results,) = (work / "reports").glob("*/results.json")
    doc = json.loads(results.read_text())
    verdicts = [c["verdict"] for c in doc["cases"]]
    golden = len(list((paths.ROOT / "fixtures" / "packing_algorithms").glob("*.json")))
    assert len(verdicts) >= golden > 0 and set(verdicts) <= {"pass", "known-fail"}, verdicts
    assert (results.parent / "report.html").is_file() and (results.parent / "junit.xml").is_file()
    site = bin_dir.parent / "lib"
    assert not list(site.rglob("reports")), "nothing is written into the install directory"


def test_installed_wheel_verifies_its_goldens(installed, tmp_path: Path) -> None:
    bin_dir, env = installed
    proc = _run([str(bin_dir / "harness"), "fixtures", "verify"], tmp_path, env)
    fixtures = paths.ROOT / "fixtures"
    n = len([p for p in fixtures.rglob("*.json") if p.name != "known_failures.json" and "explored" not in p.parts])
    assert proc.returncode == 0 and f"{n} golden file(s) ok, 0 corrupt" in proc.stdout, proc.stdout + proc.stderr


def test_installed_wheel_without_its_suites_says_so(installed, tmp_path: Path) -> None:
    bin_dir, env = installed
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _run([str(bin_dir / "harness"), "run", "--suites-dir", str(empty)], tmp_path, env)
    assert proc.returncode == 2 and proc.stderr.startswith("harness: error: no golden suites"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
