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
START, END = "<!-- layout:start (scripts/layout.py) -->", "<!-- layout:end -->"


def _first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = re.sub(r":(?:mod|class|func|meth|data):`~?([^`]+)`", r"`\1`", " ".join(doc.split())).replace("``", "`")
    found = re.match(r"(.+?\.)(\s|$)", text)
    sentence = (found.group(1) if found else text).rstrip(".")
    return sentence if len(sentence) <= 160 else sentence[:157].rsplit(" ", 1)[0] + "..."


def section() -> str:
    lines = ["| folder | what it is | modules |", "|---|---|---|"]
    folders = [PACKAGE] + sorted(p.parent for p in PACKAGE.glob("*/__init__.py") if "_data" not in p.parts)
    for folder in folders:
        init = folder / "__init__.py"
        name = "harness/" if folder == PACKAGE else f"harness/{folder.name}/"
        mods = sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")
        what = _first_sentence(init) if init.is_file() else ""
        lines.append(f"| `{name}` | {what.replace('|', '/')} | {', '.join(f'`{m}`' for m in mods)} |")
    return "\n".join(lines)


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
