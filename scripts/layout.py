"""Print the Layout section of docs/architecture.md from the package itself: every folder of ``harness/``
with the first sentence of its docstring, and its modules. ``tests/test_architecture.py``
checks docs/architecture.md holds exactly this, so the section cannot drift from the code.

    .venv/bin/python scripts/layout.py            # print
    .venv/bin/python scripts/layout.py --write    # replace the section in docs/architecture.md
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "harness"
ORDER = ("ground floor", "suite process", "driver")
START, END = "<!-- layout:start (scripts/layout.py) -->", "<!-- layout:end -->"


def _first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = re.sub(r":(?:mod|class|func|meth|data):`~?([^`]+)`", r"`\1`", " ".join(doc.split())).replace("``", "`")
    found = re.match(r"(.+?\.)(\s|$)", text)
    sentence = (found.group(1) if found else text).rstrip(".")
    return sentence if len(sentence) <= 160 else sentence[:157].rsplit(" ", 1)[0] + "..."


def _side(rel: str) -> str:
    """Which side of the process seam a folder or top-level module of ``harness/`` is on."""
    from harness.paths import GROUND_FLOOR

    if rel == "suite" or rel.startswith("suite/"):
        return "suite process"
    return "ground floor" if rel in GROUND_FLOOR or f"{rel}.py" in GROUND_FLOOR else "driver"


def section() -> str:
    lines = ["| side | folder | what it is | modules |", "|---|---|---|---|"]
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    for side in ("ground floor", "driver"):
        mods = [m for m in top if _side(m) == side]
        what = _first_sentence(PACKAGE / "__init__.py") if side == "driver" else "What both processes share"
        lines.append(f"| {side} | `harness/` | {what} | {', '.join(f'`{m}`' for m in mods)} |")
    inits = sorted(PACKAGE.glob("*/__init__.py")) + sorted((PACKAGE / "suite").glob("*/__init__.py"))
    folders = sorted(
        (p.parent for p in inits if "_data" not in p.parts), key=lambda f: (ORDER.index(_side(_rel(f))), _rel(f))
    )
    for folder in folders:
        init = folder / "__init__.py"
        mods = sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")
        what = _first_sentence(init) if init.is_file() else ""
        row = f"| {_side(_rel(folder))} | `harness/{_rel(folder)}/` | {what.replace('|', '/')} |"
        lines.append(f"{row} {', '.join(f'`{m}`' for m in mods)} |")
    return "\n".join(lines)


def _rel(folder: Path) -> str:
    return folder.relative_to(PACKAGE).as_posix()


def main() -> int:
    text = section()
    if "--write" in sys.argv:
        readme = ROOT / "docs" / "architecture.md"
        body = readme.read_text(encoding="utf-8")
        a, b = body.index(START) + len(START), body.index(END)
        readme.write_text(body[:a] + "\n" + text + "\n" + body[b:], encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
