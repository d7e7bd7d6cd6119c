"""What a suite run runs: the suites selected, the options, and the import groups it splits into.

Why apart from the launch: every command (run, bisect probes, matrix cells, SLURM shards)
chooses suites and options the same way before any process starts, and a usage error (an
unknown suite, no suites at all) must come out in one line before any git or process work.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import paths
from harness.errors import UsageError

UPSTREAM = "upstream"  # MB's own packing tests, replayed from the target's tree (harness.suiterun.upstream)


def golden_suites() -> list[str]:
    return sorted(p.stem[5:] for p in paths.suites_dir().glob("test_*.py"))


def available_suites() -> list[str]:
    return golden_suites() + [UPSTREAM]


def suite_files(names: list[str] | None) -> list[Path]:
    """Golden suite names (``packing_algorithms``...) to files; unknown names are a usage error.

    ``None`` means every golden suite. The ``upstream`` suite has no file here; it is run by
    :mod:`harness.suiterun.upstream` (see :func:`harness.suiterun.runner.run_suites`).
    """
    if names and set(names) <= {UPSTREAM}:
        return []
    suites = paths.require_suites()  # a one-line error, never a run of zero suites
    known = available_suites()
    if not names:
        return [suites / f"test_{n}.py" for n in golden_suites()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [suites / f"test_{n}.py" for n in names if n != UPSTREAM]


@dataclass
class RunOptions:
    suites: list[str] | None = None
    keyword: str | None = None
    timeout_s: float = 1800.0
    jobs: int = 1
    record: bool = False
    obtained_dir: Path | None = None
    fixtures_dir: Path = field(default_factory=paths.fixtures_dir)
    extra_pytest: list[str] = field(default_factory=list)
    import_mode: str = "auto"  # see IMPORT_MODES
    # > 0: the light-import group runs through harness.suiterun.forkserver (torch and megatron-core
    # imported once per megatron-core, installed or pinned tree), with at most this many servers alive
    fork_servers: int = 0
    verbose: bool = False  # the live output names every case (pytest -v instead of -q)
    repo_url: str = ""  # web repository of the MB under test (--repo-url; else found, see records.provenance)
    cases: list[str] | None = None  # run only these case ids (suite::test[param]) of the selected suites
    # the last runs' case times (harness.records.casetimes): the progress line's total and time left
    case_times: Path | None = None


IMPORT_MODES = ("auto", "light", "full")
"""How MB is imported for the golden suites (``harness run --import``).

* ``auto`` (default): cases marked ``import_group("light")`` run in one pytest process with
  light import (``HARNESS_IMPORT_MODE=light``: package ``__init__`` files of ``megatron.bridge``
  are not executed, see :mod:`harness.suite.standins.light`), the other cases (``full`` or unmarked)
  in a second process with the normal import; verdicts are merged into one result whose
  ``import_mode`` reads ``auto (light: N cases, full: M cases)``.
* ``full``: every case in one process with the normal import (the reference behaviour).
* ``light``: only the light-group cases are run (light import); full-group cases are not
  selected and a note says how many were left out. For fast iteration on packing code.
"""

_GROUP_RE = re.compile(r"import_group\(\s*['\"](\w+)['\"]")


def file_groups(path: Path) -> set[str]:
    """Import groups a suite file mentions (unmarked files belong to ``full``).

    Read from the file's text, not by importing it: the parent never imports a suite (that
    would import MB); the child selects the same cases by the marker
    (:mod:`harness.suite.standins.light`), and a file that mentions both groups runs in both.
    """
    try:
        found = set(_GROUP_RE.findall(path.read_text(encoding="utf-8")))
    except OSError:
        found = set()
    return found or {"full"}


def _marked_group(decorators: Sequence[ast.expr]) -> str | None:
    """The group an ``@pytest.mark.import_group("x")`` among ``decorators`` (or a
    ``pytestmark`` value) names, else None."""
    for node in decorators:
        for call in ast.walk(node):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "import_group"
                and call.args
                and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[0].value, str)
            ):
                return call.args[0].value
    return None


def case_groups(path: Path) -> dict[str, str]:
    """Test function name -> the import group its cases run in, read from the file's text the
    way the child's marker lookup resolves it (``get_closest_marker``: the function's own mark,
    else its class's, else the module's ``pytestmark``, else ``full``).

    Why: a probe that runs only some cases of a file that mentions both groups must not start
    the process (and the warm fork server) of a group none of its cases is in. A name this
    cannot resolve is left out, and the caller runs both groups for it, as before.
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    module = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            module = _marked_group([node.value])
    found: dict[str, str] = {}

    def visit(body: Sequence[ast.stmt], inherited: str | None) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                found[node.name] = _marked_group(node.decorator_list) or inherited or module or "full"
            elif isinstance(node, ast.ClassDef):
                visit(node.body, _marked_group(node.decorator_list) or inherited)
            elif isinstance(node, ast.If | ast.With | ast.Try):  # tests defined under ``if SAVED:``
                visit(node.body, inherited)
                visit(getattr(node, "orelse", []), inherited)

    visit(tree.body, None)
    return found


def _selected_groups(path: Path, cases: Sequence[str]) -> set[str] | None:
    """The groups the selected cases of suite file ``path`` run in (None: not known for all)."""
    suite = path.stem[5:]
    names = {c.split("::", 1)[1].split("[", 1)[0].split("::")[-1] for c in cases if c.split("::", 1)[0] == suite}
    by_name = case_groups(path)
    if not names or not names <= set(by_name):
        return None
    return {by_name[n] for n in names}


@dataclass(frozen=True)
class Group:
    """One suite process of a run: the import group it selects (None: no selection), the
    ``HARNESS_IMPORT_MODE`` it runs under, and its suite files."""

    name: str | None
    import_mode: str
    files: list[Path]


def plan_groups(files: list[Path], mode: str, cases: Sequence[str] | None = None) -> list[Group]:
    """The suite processes of a run, in order (light first: it is the fast one).

    ``cases``: the run selects only these case ids; a file then joins only the groups its
    selected cases are in (a bisect probe of three light cases starts no full-import process).
    """
    if mode not in IMPORT_MODES:
        raise UsageError(f"unknown import mode {mode!r}; known: {', '.join(IMPORT_MODES)}")
    if mode == "full":
        return [Group(None, "full", files)]
    groups = {f: file_groups(f) for f in files}
    if cases is not None:
        for f in files:
            selected = _selected_groups(f, cases)
            if selected is not None:
                groups[f] = selected
    plan = [Group("light", "light", [f for f in files if "light" in groups[f]])]
    if mode == "auto":
        plan.append(Group("full", "full", [f for f in files if groups[f] - {"light"}]))
    return plan
