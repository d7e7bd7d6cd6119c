"""Where the harness's own files are, and where it writes: one place for every path.

Two layouts, one rule. In a checkout, the golden suites and goldens sit beside the ``harness``
package (``suites/``, ``fixtures/``). In an installed wheel they are package data,
``harness/_data/suites`` and ``harness/_data/fixtures`` (``setup.py`` copies them there at
build time). ``--suites-dir`` / ``--fixtures`` (or ``$HARNESS_SUITES_DIR`` /
``$HARNESS_FIXTURES_DIR``) point elsewhere; the environment variables are how suite processes,
fork-server children and bisect evaluations see the same choice as the command that started
them. A suites directory is a package imported under its own name (``suites``), so its parent
goes on every suite process's ``PYTHONPATH``.

Outputs go under ``reports/`` of the current directory (never into an install directory);
everything that is expensive to rebuild and not a result (bisect mirrors and workspaces, the
verdict cache, pinned Megatron-LM trees, ``matrix`` exports) goes under the per-user cache.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from harness.contract import Env
from harness.errors import EnvironmentProblem

#: Where ``import harness`` resolves: the checkout, or site-packages for an installed wheel.
ROOT = Path(__file__).resolve().parent.parent
#: The ``harness`` package itself.
PACKAGE = ROOT / "harness"
#: Suites and goldens shipped inside an installed wheel.
BUNDLED = PACKAGE / "_data"
#: The suite process's own package (:mod:`harness.suite`): it imports only itself and the ground floor.
SUITE_PACKAGE = PACKAGE / "suite"
#: The ground floor both processes share, relative to :data:`PACKAGE`: the records that cross the
#: process boundary, the environment contract and the shared vocabulary. Nothing here imports the
#: suite package or the driver (``tests/test_architecture.py``).
GROUND_FLOOR = (
    "__init__.py",
    "caselog.py",
    "contract.py",
    "errors.py",
    "features.py",
    "owners.py",
    "paths.py",
    "procs.py",
    "target.py",
    "versions.py",
    "golden",
    "records",
)
#: Put on every suite process's ``PYTHONPATH``: its ``sitecustomize`` installs the CPU stand-ins.
SITE_DIR = SUITE_PACKAGE / "standins" / "site"

SUITES_ENV = Env.SUITES_DIR
FIXTURES_ENV = Env.FIXTURES_DIR
CACHE_ENV = Env.CACHE


def _data_root() -> Path:
    """The checkout when the suites sit beside the package, else the wheel's bundled data."""
    return ROOT if (ROOT / "suites" / "conftest.py").is_file() else BUNDLED


def _from_env(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser().resolve() if value else None


def suites_dir() -> Path:
    """Golden suites (``test_<suite>.py``), their ``conftest.py`` and ``pytest.ini``."""
    return _from_env(SUITES_ENV) or _data_root() / "suites"


def fixtures_dir() -> Path:
    """Golden files, one per case (``<suite>/<case>.json``), and ``known_failures.json``."""
    return _from_env(FIXTURES_ENV) or _data_root() / "fixtures"


def use_roots(suites: Path | None = None, fixtures: Path | None = None) -> None:
    """Make ``--suites-dir`` / ``--fixtures`` the roots of this process and every process it starts."""
    if suites is not None:
        os.environ[SUITES_ENV] = str(Path(suites).expanduser().resolve())
    if fixtures is not None:
        os.environ[FIXTURES_ENV] = str(Path(fixtures).expanduser().resolve())


def is_bundled(path: Path) -> bool:
    """True for a path inside the installed package (goldens there are not edited in place)."""
    return Path(path).resolve().is_relative_to(BUNDLED)


def require_suites() -> Path:
    """The suites directory, or a one-line error when it holds no suite (a wheel built without
    its data, a wrong ``--suites-dir``): a run of zero suites must not look like a green run."""
    found = suites_dir()
    if not any(found.glob("test_*.py")):
        raise EnvironmentProblem(
            f"no golden suites (test_*.py) in {found}; give --suites-dir DIR (or ${SUITES_ENV}), "
            "or reinstall the harness from a wheel or a checkout that has suites/"
        )
    return found


def require_fixtures(path: Path | None = None) -> Path:
    """The golden root, or a one-line error when it is missing (every case would lack its golden)."""
    found = Path(path) if path is not None else fixtures_dir()
    if not found.is_dir():
        raise EnvironmentProblem(
            f"no goldens: {found} does not exist; give --fixtures DIR (or ${FIXTURES_ENV}), "
            "or record them with 'harness fixtures record --fixtures DIR'"
        )
    return found


def reports_dir() -> Path:
    """Default parent of every command's output directory: ``reports/`` of the current directory."""
    return Path.cwd() / "reports"


def default_history() -> Path:
    """The nightly history store ``harness nightly`` appends to by default."""
    return reports_dir() / "history.parquet"


def cache_dir() -> Path:
    """Per-user cache (bisect mirrors and verdicts, pinned Megatron-LM trees, matrix exports).

    ``$HARNESS_CACHE`` overrides ``~/.cache/harness``; read on every call so a test or a
    caller can point it elsewhere.
    """
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "harness"


def package_dir(name: str) -> Path | None:
    """Directory of the package ``name`` this interpreter would import (without importing it)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def mb_location() -> Path | None:
    """Directory of the ``megatron.bridge`` package this interpreter would import."""
    return package_dir("megatron.bridge")
