"""The package's layout keeps the rules issue 23 set: no import circle inside ``harness/``
(module-level, lazy and TYPE_CHECKING imports alike), no module past ~350 lines, and every
package says what it is for; and issue 46's: packages import each other one way, but for a
shrinking list of pairs."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

from harness.paths import PACKAGE, ROOT

MAX_LINES = 370  # "~350": a module that grows past this is split, not defended


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "_data" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in modules:
                out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_inside_harness() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert _cycles(graph) == []


# Packages that still import each other both ways (issue 46 wants none): each pair is an arrow running
# back up between two floors of the house. The list may only shrink; a new pair fails here.
TWO_WAY_PACKAGES: set[tuple[str, str]] = set()  # issue 46: from 9 to none; keep it so


def _package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_packages_import_each_other_one_way_but_for_the_listed_pairs() -> None:
    modules = _modules()
    edges = {
        (_package_of(a), _package_of(b))
        for a, path in modules.items()
        for b in _imports(path, modules)
        if _package_of(a) != _package_of(b)
    }
    both = {tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges}
    assert both <= TWO_WAY_PACKAGES, f"new two-way package imports: {sorted(both - TWO_WAY_PACKAGES)}"
    assert both >= TWO_WAY_PACKAGES, f"no longer two-way, drop from the list: {sorted(TWO_WAY_PACKAGES - both)}"


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_past_the_size_limit() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in _modules().items()}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}


def test_every_package_says_what_it_is_for() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        if "_data" in init.parts or "site" in init.parts:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc, f"{init.relative_to(ROOT)} has no docstring"


def test_the_readme_layout_is_the_generated_one() -> None:
    import subprocess
    import sys

    readme = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start, end = "<!-- layout:start (scripts/layout.py) -->", "<!-- layout:end -->"
    shown = readme[readme.index(start) + len(start) : readme.index(end)].strip()
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "layout.py")], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert shown == out, "run scripts/layout.py --write"


def _floor(module: str) -> str:
    """``suite``, ``ground`` or ``driver``: the side of the process seam a module is on."""
    from harness.paths import GROUND_FLOOR

    if module == "harness.suite" or module.startswith("harness.suite."):
        return "suite"
    rest = module.removeprefix("harness").lstrip(".")
    top = rest.split(".")[0] if rest else "__init__"
    return "ground" if top in GROUND_FLOOR or f"{top}.py" in GROUND_FLOOR else "driver"


# Who may import whom across the seam: the two processes share only the ground floor.
ALLOWED = {("suite", "suite"), ("suite", "ground"), ("ground", "ground"), ("driver", "driver"), ("driver", "ground")}


def _seam_breaks(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} ({_floor(a)}) imports {b} ({_floor(b)})"
        for a, targets in graph.items()
        for b in targets
        if (_floor(a), _floor(b)) not in ALLOWED
    )


def test_the_suite_process_and_the_driver_share_only_the_ground_floor() -> None:
    """Issue 46: the suite package imports nothing of the driver, the driver nothing of it, the
    ground floor neither (imports inside functions count: an adapter imports lazily). The verdict
    cache key (harness.bisect.closure) hashes the suite package and the ground floor on this
    promise."""
    modules = _modules()
    graph = {name: _imports(path, modules) for name, path in modules.items()}
    assert _seam_breaks(graph) == []
    assert {_floor(m) for m in modules} == {"suite", "ground", "driver"}


def test_the_seam_check_sees_a_break() -> None:
    graph = {
        "harness.suite.plugin": {"harness.records.results", "harness.report.runpage"},
        "harness.commands.run": {"harness.target", "harness.suite.compare"},
        "harness.records.results": {"harness.suite.outcome"},
    }
    assert _seam_breaks(graph) == [
        "harness.commands.run (driver) imports harness.suite.compare (suite)",
        "harness.records.results (ground) imports harness.suite.outcome (suite)",
        "harness.suite.plugin (suite) imports harness.report.runpage (driver)",
    ]


# Issue 46's measure of a declared checks API: ``Any`` in harness/ below 150 (865 when the issue's
# work began). A value crossing the harness is typed where it is made: MB's objects as the protocols
# of harness/suite/adapters/mbtypes.py, records as dataclasses and TypedDicts, what is only passed
# on as ``object``. What stays ``Any`` is what no static type can name (MB's classes and config
# objects found era by era, a JSON document as ``json`` parsed it, pickled job results).
ANY_LIMIT = 150


def _any_uses(source: str) -> int:
    """Uses of ``Any`` in annotations and expressions: the name, ``typing.Any``, and inside string
    annotations. Its import is not a use."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        named = isinstance(node, ast.Name) and node.id == "Any"
        if named or (isinstance(node, ast.Attribute) and node.attr == "Any"):
            count += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "Any" in node.value:
            with contextlib.suppress(SyntaxError):  # prose, not an annotation
                count += _any_uses(node.value)
    return count


def test_any_stays_below_its_limit() -> None:
    per_module = {name: _any_uses(path.read_text(encoding="utf-8")) for name, path in _modules().items()}
    total = sum(per_module.values())
    worst = sorted(per_module.items(), key=lambda kv: -kv[1])[:5]
    assert total < ANY_LIMIT, f"Any is used {total} times in harness/ (limit {ANY_LIMIT}); most in {worst}"


def test_the_any_count_sees_every_spelling() -> None:
    source = (
        "import typing\nfrom typing import Any\n"
        "def f(a: Any, b: 'dict[str, Any]') -> typing.Any: ...\n"
        "x = 'prose mentioning Any is not counted'\n"
    )
    assert _any_uses(source) == 3
