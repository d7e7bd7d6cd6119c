"""What a process imports, found without importing it: MB's location and version, the
versions of everything that decides a verdict.

Why apart from :mod:`.target`: the suite process asks this of itself (it writes its versions
for the driver, :func:`harness.contract.write_versions`), ownership asks where MB
lives, known bugs ask MB's version; none of them needs a Target, and :mod:`.target` needs
:mod:`.ownership`. MB is never imported here (its package ``__init__`` costs ~20 s): the
version comes from ``package_info.py``.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import harness
from harness.contract import Env
from harness.paths import mb_location


def _dist_version(name: str) -> str:
    import importlib.metadata as md  # ~50 ms; the CLI's start-up does not need it

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"


def mb_version(location: Path | None) -> str:
    """Version from ``package_info.py`` without importing MB."""
    if location is None:
        return "not importable"
    info = location / "package_info.py"
    try:
        text = info.read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    parts = dict(re.findall(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE)\s*=\s*['\"]?([^'\"\n]*)['\"]?", text, re.M))
    if {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE', '')}"
    return "unknown"


def versions() -> dict[str, str]:
    """Versions of everything that decides a verdict (recorded in every result)."""
    loc = mb_location()
    pin = os.environ.get(Env.CORE_PIN)
    return {
        "megatron-bridge": mb_version(loc),
        "megatron-core": f"Megatron-LM {pin[:12]} (pinned by the MB commit)" if pin else _dist_version("megatron-core"),
        "torch": _dist_version("torch"),
        "transformers": _dist_version("transformers"),
        "python": platform.python_version(),
        "harness": harness.__version__,
    }
