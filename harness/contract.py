"""The one contract between the driver and the suite process it starts.

Why one module: a suite run is two processes (the driver: ``harness run``, a bisect probe, a
matrix cell; the child: pytest with :mod:`harness.suite.plugin`), often two interpreters
(a release's own venv), and each side used to spell the handoff on its own: environment names
in eight files, ``"sha-dirty"`` parsed in three, the case record built as a dict that copied
:class:`~harness.records.results.CaseResult`, the versions found by a second subprocess. A
name changed on one side only is a run that silently loses its verdicts. Everything the two
sides share is here, and only here:

- :class:`Env`: the environment variables the driver sets for the child (and its fork-server
  children, sitecustomize and the light-import stand-ins read them at start-up);
- :class:`Flag`: the ``--harness-*`` options of the plugin;
- the file names in a run directory (:func:`cases_file`, :data:`VERSIONS_FILE`, ...);
- the case id (``<suite>::<case>``), and :class:`Commit`, the commit under test;
- :class:`CasesFile`, the one record the child writes and the driver reads: its cases as
  :class:`~harness.records.results.CaseResult`, the suite files that failed to collect, and the
  versions of what it imported (written by the child: no second process asks again).

Only the standard library and :mod:`harness.records` are imported: sitecustomize reads
:class:`Env` before anything else of the harness is loaded.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from harness.records.commit import Commit, clean_sha

if TYPE_CHECKING:  # imported where used: sitecustomize reads Env before anything heavier loads
    from harness.records.results import CaseResult

__all__ = [
    "INI_SUITES",
    "MESSAGE_LIMIT",
    "CasesFile",
    "Commit",
    "Env",
    "Flag",
    "ForkAnswer",
    "ForkRequest",
    "ForkSpawn",
    "case_id",
    "clean_sha",
    "crash_line",
    "split_case_id",
    "target_commit",
]


#: Written by the driver into a pinned Megatron-LM tree's ``megatron/core/datasets`` when building
#: its helpers failed (:mod:`harness.repository.corebuild`); read by the suite process to say why
#: a build artifact is missing (:mod:`harness.suite.adapters.failures`).
CORE_BUILD_LOG = ".harness-helpers-build.log"


class Env(enum.StrEnum):
    """Environment variables of the suite process (the driver sets them, the child reads them)."""

    TARGET_COMMIT = "HARNESS_TARGET_COMMIT"  # the MB commit under test, "<sha>[-dirty]" (Commit)
    CORE_PIN = "HARNESS_CORE_PIN"  # the Megatron-LM commit of a pinned megatron-core tree
    MB_REPO = "HARNESS_MB_REPO"  # the git repository of the commit (known-bug commit ranges)
    MB_ROOTS = "HARNESS_MB_ROOTS"  # where the code under test lives (ownership of an exception)
    VARYING_CORE = "HARNESS_VARYING_CORE"  # the megatron-core a second-level bisection varies
    STANDINS_LOG = "HARNESS_STANDINS_LOG"  # the child appends each stand-in it installs
    KNOBS_LOG = "HARNESS_KNOBS_LOG"  # the child appends the knobs it saw and the values cases used
    EXPLORE_BUDGET = "HARNESS_EXPLORE_BUDGET"  # examples the exploration suite draws (harness explore)
    EXPLORE_SEED = "HARNESS_EXPLORE_SEED"  # its seed (the same seed draws the same examples)
    EXPLORE_REPLAY = "HARNESS_EXPLORE_REPLAY"  # one explored case spec to run instead of drawing
    EXPLORE_EOS = "HARNESS_EXPLORE_EOS"  # "1": answers may hold literal EOS tokens
    VERSIONS_FILE = "HARNESS_VERSIONS_FILE"  # the child writes the versions it imports (VERSIONS_FILE)
    IMPORT_MODE = "HARNESS_IMPORT_MODE"  # "light" or "full" (harness.suite.standins.light)
    IMPORT_GROUP = "HARNESS_IMPORT_GROUP"  # run only the cases of this import group
    LIGHT_ROOTS = "HARNESS_LIGHT_ROOTS"  # override of the packages light import stubs
    SUITES_DIR = "HARNESS_SUITES_DIR"  # --suites-dir of the command (harness.paths)
    FIXTURES_DIR = "HARNESS_FIXTURES_DIR"  # --fixtures of the command (harness.paths)
    CACHE = "HARNESS_CACHE"  # the per-user cache (harness.paths)


class Flag(enum.StrEnum):
    """The plugin's command-line options (``pytest -p harness.suite.plugin``)."""

    RESULTS = "--harness-results"  # write the CasesFile here
    FIXTURES = "--harness-fixtures"  # golden root
    OBTAINED = "--harness-obtained"  # obtained values on mismatch
    RECORD = "--harness-record"  # record every obtained value, never fail on goldens
    REGEN = "--harness-regen"  # rewrite goldens in place (the reviewed way is harness fixtures record)
    KNOWN_FAILURES = "--harness-known-failures"  # reviewed known MB bugs
    EVENTS = "--harness-events"  # the live case event log (harness.caselog)
    CASES = "--harness-cases"  # a JSON list of case ids: run only these


#: The plugin's own ``pytest`` ini flag: a directory of harness suites (``suites/pytest.ini``).
INI_SUITES = "harness_suites"

# ------------------------------------------------------------------ files in a run directory

VERSIONS_FILE = "versions.json"  # what the child imported (written at its start, read by the driver)
VERSIONS_KIND = "harness-versions"
STANDINS_LOG = "standins.log"  # one stand-in per line, appended by every child
KNOBS_LOG = "knobs.jsonl"  # harness.records.knobs: MB's packing knobs and the values cases exercised
SELECTED_CASES = "selected-cases.json"  # --harness-cases: the case ids to run
CASES_KIND = "harness-cases"
CASES_SCHEMA = 2  # 2: versions (written by the child)


def cases_file(run_dir: Path, group: str | None) -> Path:
    """The CasesFile of one import group (``None``: a run without groups)."""
    return run_dir / (f"cases-{group}.json" if group else "cases.json")


def events_file(cases: Path) -> Path:
    """The event log beside a CasesFile: what survives a child that dies before writing it."""
    return cases.with_suffix(".events.jsonl")


def pytest_log(run_dir: Path, group: str | None) -> Path:
    """Where a fork-server child's output goes (a plain subprocess streams it instead)."""
    return run_dir / f"pytest-{group}.log"


# ------------------------------------------------------------------ identities


def case_id(suite: str, case: str) -> str:
    """``<suite>::<case>``: stable across commits; it keys the verdict cache and the bisection."""
    return f"{suite}::{case}"


def split_case_id(value: str) -> tuple[str, str]:
    """(suite, case) of a case id."""
    suite, _, case = value.partition("::")
    return suite, case


def target_commit(environ: Mapping[str, str] | None = None) -> Commit | None:
    """The commit the driver named for this process (``None``: an installed MB, no commit)."""
    return Commit.parse((os.environ if environ is None else environ).get(Env.TARGET_COMMIT))


# ------------------------------------------------------------------ the record


@dataclass
class CasesFile:
    """What one suite process hands back (``--harness-results``): versioned, written atomically."""

    cases: list[CaseResult] = field(default_factory=list)
    collection_errors: list[dict[str, str]] = field(default_factory=list)  # {"nodeid", "message"} per file
    versions: dict[str, str] = field(default_factory=dict)
    finished: float = 0.0
    pid: int = 0

    def save(self, path: Path) -> None:
        from harness.records.atomicio import write_versioned_json

        doc = {
            "finished": self.finished,
            "pid": self.pid,
            "cases": [c.to_json() for c in self.cases],
            "collection_errors": list(self.collection_errors),
            "versions": dict(self.versions),
        }
        write_versioned_json(path, CASES_KIND, CASES_SCHEMA, doc)

    @classmethod
    def load(cls, path: Path) -> CasesFile:
        """Raises FileNotFoundError, or CorruptFile for a file that is not a CasesFile."""
        from harness.records.atomicio import read_versioned_json
        from harness.records.results import CaseResult

        doc = read_versioned_json(path, CASES_KIND, CASES_SCHEMA, {1: lambda d: {**d, "versions": {}}})
        return cls(
            cases=[CaseResult.from_json(c) for c in doc.get("cases") or []],
            collection_errors=[dict(e) for e in doc.get("collection_errors") or []],
            versions={str(k): str(v) for k, v in (doc.get("versions") or {}).items()},
            finished=float(doc.get("finished") or 0.0),
            pid=int(doc.get("pid") or 0),
        )


def write_versions(versions: dict[str, str], environ: Mapping[str, str] | None = None) -> None:
    """The child's side of :data:`Env.VERSIONS_FILE`: written once it knows what it imports."""
    target = (os.environ if environ is None else environ).get(Env.VERSIONS_FILE)
    if not target:
        return
    from harness.records.atomicio import write_versioned_json

    write_versioned_json(Path(target), VERSIONS_KIND, 1, dict(versions))


def read_versions(path: Path) -> dict[str, str]:
    """The driver's side: the versions the child wrote, or one line saying none were written."""
    from harness.errors import CorruptFile
    from harness.records.atomicio import read_versioned_json

    try:
        doc = read_versioned_json(path, VERSIONS_KIND, 1)
    except (OSError, CorruptFile):  # the child died before writing it
        return {"megatron-bridge": "unknown (the suite process wrote no versions)"}
    return {str(k): str(v) for k, v in doc.items() if k not in ("kind", "schema_version")}


# An upstream test's message, as the child plugin writes it and the driver shortens its own:
# the end of pytest's report, and the line that says what broke.
MESSAGE_LIMIT = 6000


def crash_line(text: str) -> str:
    """The line that says what broke: pytest's last ``E`` line, else the text's last line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("E ")]
    return (errs[-1][1:].strip() if errs else (lines[-1] if lines else "unknown error"))[:500]


# --------------------------------------------------------------------------- the fork server
# One JSON object per line each way between the driver's client (harness.suiterun.forkserver)
# and the server loop in the suite process (harness.suite.forkloop).


class ForkSpawn(TypedDict):
    """Become a full-import server, talking over two named pipes (``become_server``)."""

    env: dict[str, str]
    requests: str
    answers: str


class ForkRequest(TypedDict, total=False):
    """Run ``pytest argv`` in a fork (the suite process of one group, its output to ``log``), or
    ``spawn`` a full-import server; ``id`` is the client's, echoed in the answers."""

    id: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log: str
    spawn: ForkSpawn


class ForkAnswer(TypedDict, total=False):
    """``ready`` once (the server loaded), then per request its ``pid``, and for a run its ``rc``;
    ``gone``: the client saw the server's pipe close."""

    id: int
    ready: bool
    pid: int
    rc: int
    gone: bool
