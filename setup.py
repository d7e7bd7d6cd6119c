"""Build hook (the rest of the configuration is in pyproject.toml): ship the golden suites and
their goldens inside the wheel, as ``harness/_data/suites`` and ``harness/_data/fixtures``.

Without them an installed harness ran zero suites and called that green. They stay at the top
of the repository (``suites/``, ``fixtures/``) for people working in a checkout, and
``harness.paths`` finds them in either place. Editable installs read the checkout directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
#: top-level directory -> file patterns copied (recursively) into harness/_data/<directory>
DATA = {"suites": ("*.py", "pytest.ini"), "fixtures": ("*.json", "*.npz")}


class build_py_with_data(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name, patterns in DATA.items():
            source = HERE / name
            if not source.is_dir():
                raise SystemExit(f"setup.py: {source} is missing; the wheel would hold no {name}")
            dest = Path(self.build_lib) / "harness" / "_data" / name
            if dest.exists():
                shutil.rmtree(dest)
            for pattern in patterns:
                for path in sorted(source.rglob(pattern)):
                    if "__pycache__" in path.parts:
                        continue
                    target = dest / path.relative_to(source)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)


setup(cmdclass={"build_py": build_py_with_data})
