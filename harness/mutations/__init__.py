"""Mutation self-test: inject known packing faults into a copy of MB and see which cases catch them.

The catalogue (``catalogue.json`` next to this file) is data: each fault names a file of the
``megatron.bridge`` package, an exact ``search`` text that must occur there exactly once, its
``replace`` text, and the suites to run against the mutant. A fault whose search text is not
found (MB changed that code) is *not applicable* and does not count in the score.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import CorruptFile, EnvironmentProblem

CATALOGUE = Path(__file__).with_name("catalogue.json")


@dataclass(frozen=True)
class Fault:
    id: str
    file: str
    search: str
    replace: str
    suites: tuple[str, ...]
    description: str

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Fault":
        return cls(d["id"], d["file"], d["search"], d["replace"], tuple(d.get("suites", ())), d.get("description", ""))

    def occurrences(self, package_dir: Path) -> int:
        path = Path(package_dir) / self.file
        if not path.is_file():
            return 0
        return path.read_text(encoding="utf-8").count(self.search)

    def apply(self, package_dir: Path) -> bool:
        """Edit ``package_dir/file``; False (nothing written) when the search text is not there once."""
        path = Path(package_dir) / self.file
        if self.occurrences(package_dir) != 1:
            return False
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(self.search, self.replace), encoding="utf-8")
        return True


def load_catalogue(path: Path = CATALOGUE) -> list[Fault]:
    try:
        return [Fault.from_json(d) for d in json.loads(Path(path).read_text(encoding="utf-8"))["faults"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFile(f"{path}: not a fault catalogue ({type(exc).__name__}: {exc})") from None


def installed_package_dir() -> Path:
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentProblem("megatron.bridge is not importable here (harness mutate copies the installed MB)")
    return Path(list(spec.submodule_search_locations)[0])


def make_mutant(fault: Fault, src_pkg: Path | None = None, parent: Path | None = None) -> Path | None:
    """Copy MB into ``<tmp>/megatron/bridge``, apply ``fault``; return the ``src`` root (None: not applicable)."""
    src_pkg = src_pkg or installed_package_dir()
    if fault.occurrences(src_pkg) != 1:
        return None
    root = Path(tempfile.mkdtemp(prefix=f"mutant-{fault.id}-", dir=parent))
    dest = root / "megatron" / "bridge"
    # __pycache__ is copied too: the edited file's new mtime invalidates its stale .pyc, the rest import fast
    shutil.copytree(src_pkg, dest)
    # megatron is a namespace package: megatron.core still resolves from site-packages
    if not fault.apply(dest):
        shutil.rmtree(root, ignore_errors=True)
        return None
    return root
