"""Where the harness's own files are, and where it writes: one place for every path.

The suites, goldens and the ``harness`` package sit in one checkout (``ROOT``); suite
processes run with it as their root directory. Outputs go under ``reports/`` of that checkout
by default; everything that is expensive to rebuild and not a result (bisect mirrors and
workspaces, the verdict cache, pinned Megatron-LM trees, ``matrix`` exports) goes under the
per-user cache directory, never into the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The harness checkout: ``harness/``, ``suites/``, ``fixtures/``, ``reports/``.
ROOT = Path(__file__).resolve().parent.parent
#: The ``harness`` package itself.
PACKAGE = ROOT / "harness"
#: Golden suites (``test_<suite>.py``) and their pytest configuration.
SUITES_DIR = ROOT / "suites"
#: Golden files, one per case (``fixtures/<suite>/<case>.json``).
FIXTURES_DIR = ROOT / "fixtures"
#: Default parent of every command's output directory.
REPORTS_DIR = ROOT / "reports"
#: The nightly history store ``harness nightly`` appends to by default.
DEFAULT_HISTORY = REPORTS_DIR / "history.parquet"
#: Put on every suite process's ``PYTHONPATH``: its ``sitecustomize`` installs the CPU stand-ins.
SITE_DIR = PACKAGE / "standins" / "site"

CACHE_ENV = "HARNESS_CACHE"


def cache_dir() -> Path:
    """Per-user cache (bisect mirrors and verdicts, pinned Megatron-LM trees, matrix exports).

    ``$HARNESS_CACHE`` overrides ``~/.cache/harness``; read on every call so a test or a
    caller can point it elsewhere.
    """
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "harness"
