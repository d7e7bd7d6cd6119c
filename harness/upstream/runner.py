"""The ``upstream`` suite: MB's own packing tests, run from the target's tree.

For a target that is an MB source checkout (``Target.src`` = ``<tree>/src``, tests in
``<tree>/tests``), the selection in ``selection.json`` (MB's packing verification commands,
per era) is resolved by probing the tree, then run in one pytest subprocess with cwd = tree
root, the target's environment (its ``src`` first, the CPU stand-ins) and the tree root on
``PYTHONPATH`` (MB's tests import helpers as ``tests.``). Per-test outcomes come back as data:
this module is also the pytest plugin (``-p harness.upstream.runner``) that applies each
entry's ``-k`` to its own file and writes one JSON line per event, so a timeout keeps the
outcomes reached so far.

Verdicts: a passing MB test is PASS, a failing one FAIL; skipped by MB (needs CUDA...) or an
import failure in this environment is UNTESTABLE; an entry whose file is absent or whose
``-k`` matches no test at this commit is one UNTESTABLE case, never a pass. Where MB's
guidance states how many tests pass, an extra ``upstream::count::<entry>`` case checks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.procs import kill_group as _kill_group, popen_owned
from harness.results import CaseResult
from harness.target import Target
from harness.verdict import Verdict

SUITE = "upstream"
SELECTION_FILE = Path(__file__).with_name("selection.json")
SELECTION_KIND = "harness-upstream-selection"
NO_CHECKOUT = "upstream suite needs an MB source checkout (--mb-src)"
NO_MATCH = "selection matches no test here"
MESSAGE_LIMIT = 6000


# --------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class Probe:
    file: str | None  # None: the variant's own file
    contains: tuple[str, ...]  # any of these substrings (empty: the file existing is enough)


@dataclass(frozen=True)
class Variant:
    era: str
    file: str
    k: str | None = None
    expected_passed: int | None = None
    probes: tuple[Probe, ...] = ()


@dataclass(frozen=True)
class Entry:
    name: str
    variants: tuple[Variant, ...]


@dataclass(frozen=True)
class Selection:
    entries: tuple[Entry, ...]
    count_rule: str = "at_least"  # or "exact"


def load_selection(path: Path = SELECTION_FILE) -> Selection:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("kind") != SELECTION_KIND or doc.get("schema") != 1:
        raise ValueError(f"{path}: not a {SELECTION_KIND} schema 1 file")
    entries = []
    for e in doc["entries"]:
        variants = []
        for v in e["variants"]:
            probes = tuple(Probe(p.get("file"), tuple(p.get("contains", ()))) for p in v.get("probes", ()))
            variants.append(Variant(v["era"], v["file"], v.get("k"), v.get("expected_passed"), probes))
        entries.append(Entry(e["name"], tuple(variants)))
    rule = doc.get("count_rule", "at_least")
    if rule not in ("at_least", "exact"):
        raise ValueError(f"{path}: count_rule must be 'at_least' or 'exact', not {rule!r}")
    return Selection(tuple(entries), rule)


@dataclass(frozen=True)
class Resolved:
    """What one entry means at this commit: a variant to run, or why there is none."""

    entry: Entry
    variant: Variant | None
    probed: bool  # the variant's probes held (False: fallback run, no count check)
    reason: str = ""

    @property
    def expected_passed(self) -> int | None:
        return self.variant.expected_passed if self.variant and self.probed else None


def _probe_holds(tree: Path, variant: Variant, probe: Probe, cache: dict[Path, str | None]) -> bool:
    path = tree / (probe.file or variant.file)
    if path not in cache:
        try:
            cache[path] = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
        except OSError:
            cache[path] = None
    text = cache[path]
    return text is not None and (not probe.contains or any(s in text for s in probe.contains))


def resolve(tree: Path, selection: Selection) -> list[Resolved]:
    """Choose each entry's era by probing the tree (files present, keywords in their text)."""
    cache: dict[Path, str | None] = {}
    out = []
    for entry in selection.entries:
        chosen = next((v for v in entry.variants if (tree / v.file).is_file()
                       and all(_probe_holds(tree, v, p, cache) for p in v.probes)), None)
        if chosen is not None:
            out.append(Resolved(entry, chosen, True))
            continue
        present = next((v for v in entry.variants if (tree / v.file).is_file()), None)
        if present is not None:
            out.append(Resolved(entry, present, False, "no era's probes hold; newest present form run, no count"))
        else:
            files = sorted({v.file for v in entry.variants})
            out.append(Resolved(entry, None, False, f"{NO_MATCH}: none of {', '.join(files)} exists at this commit"))
    return out


# --------------------------------------------------------------------------- running


def run_upstream(tgt: Target, opts: Any, out_dir: Path) -> tuple[list[CaseResult], list[str]]:
    """Run MB's packing selection from ``tgt``'s tree; return (cases, notes).

    ``opts`` is a :class:`harness.runner.RunOptions`; only ``timeout_s`` is used (the selection
    is MB's own, not narrowed by ``-k``). Output and events go under ``out_dir``.
    """
    if tgt.src is None:
        return [CaseResult(f"{SUITE}::*", SUITE, Verdict.UNTESTABLE, message=NO_CHECKOUT, source=SUITE)], [NO_CHECKOUT]
    tree = Path(tgt.src).resolve().parent
    if not (tree / "tests").is_dir():
        msg = f"upstream suite: {tree} has no tests/ directory (MB's tests live in <checkout>/tests)"
        return [CaseResult(f"{SUITE}::*", SUITE, Verdict.UNTESTABLE, message=msg, source=SUITE)], [msg]
    selection = load_selection()
    resolved = resolve(tree, selection)
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = [_describe(r) for r in resolved]
    runnable = [r for r in resolved if r.variant is not None]
    run = _Run()
    if runnable:
        run = _run_pytest(tgt, tree, runnable, float(getattr(opts, "timeout_s", 1800.0)), out_dir)
        notes += run.notes
    cases = _cases(resolved, run, selection.count_rule)
    return cases, notes


def _describe(r: Resolved) -> str:
    if r.variant is None:
        return f"upstream {r.entry.name}: {r.reason}"
    v = r.variant
    k = f' -k "{v.k}"' if v.k else ""
    count = f", MB guidance: {v.expected_passed} passed" if r.expected_passed is not None else ""
    how = f"era {v.era}{count}" if r.probed else f"era {v.era} ({r.reason})"
    return f"upstream {r.entry.name}: {v.file}{k} ({how})"


@dataclass
class _Run:
    events: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False
    rc: int | None = None
    tail: str = ""
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def child_env(tgt: Target, tree: Path) -> dict[str, str]:
    """The target's environment with the tree root right after its ``src`` (``tests.`` imports)."""
    env = tgt.env()
    parts = env["PYTHONPATH"].split(os.pathsep)
    src = str(tgt.src)
    at = parts.index(src) + 1 if src in parts else 0
    env["PYTHONPATH"] = os.pathsep.join(parts[:at] + [str(tree)] + parts[at:])
    return env


def build_command(tree: Path, runnable: list[Resolved], spec: Path, events: Path) -> list[str]:
    files = sorted({r.variant.file for r in runnable if r.variant})
    return [sys.executable, "-m", "pytest", *files, "--rootdir", str(tree), "-p", "no:cacheprovider",
            "-p", "harness.upstream.runner", "--harness-upstream-spec", str(spec),
            "--harness-upstream-events", str(events), "--continue-on-collection-errors",
            "-q", "--color=no", "-rN"]


def _run_pytest(tgt: Target, tree: Path, runnable: list[Resolved], timeout_s: float, out_dir: Path) -> _Run:
    spec = out_dir / "spec.json"
    events = out_dir / "events.jsonl"
    log = out_dir / "pytest.log"
    spec.write_text(json.dumps({"entries": [{"name": r.entry.name, "file": r.variant.file, "k": r.variant.k}
                                            for r in runnable if r.variant]}, indent=1))
    if events.exists():
        events.unlink()
    cmd = build_command(tree, runnable, spec, events)
    run = _Run()
    t0 = time.monotonic()
    with log.open("wb") as sink:
        proc = popen_owned(cmd, cwd=tree, env=child_env(tgt, tree), stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            run.rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            _kill_group(proc)
            run.rc = proc.returncode
    run.duration_s = time.monotonic() - t0
    run.events = read_events(events)
    run.tail = _last_lines(log.read_text(encoding="utf-8", errors="replace"))
    if run.timed_out:
        run.notes.append(f"upstream: timeout: MB's pytest ran past {timeout_s:.0f} s and was killed; log {log}")
    elif run.rc not in (0, 1, 5):
        run.notes.append(f"upstream: MB's pytest exited with code {run.rc}: {run.tail} (log {log})")
    run.notes.append(f"upstream: {len(run.events)} events in {run.duration_s:.1f} s; log {log}")
    return run



def read_events(path: Path) -> list[dict[str, Any]]:
    """Events written so far; a line cut by a kill is ignored."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _last_lines(text: str, n: int = 8) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not set(ln.strip()) <= set("=-_ ")]
    return " | ".join(lines[-n:])[-1500:]


# --------------------------------------------------------------------------- verdicts


def _cases(resolved: list[Resolved], run: _Run, count_rule: str) -> list[CaseResult]:
    started = any(e.get("ev") == "session_start" for e in run.events)
    collected = any(e.get("ev") == "collected" for e in run.events)
    selected: dict[str, list[str]] = {}
    collect_errors: dict[str, str] = {}
    phases: dict[str, list[dict[str, Any]]] = {}
    for e in run.events:
        if e.get("ev") == "selected":
            selected.setdefault(e["entry"], []).append(e["nodeid"])
        elif e.get("ev") == "collect_error":
            collect_errors[e["nodeid"].split("::")[0]] = e.get("message", "")
        elif e.get("ev") == "phase":
            phases.setdefault(e["nodeid"], []).append(e)
    broken_verdict = Verdict.UNTESTABLE
    if run.timed_out:
        broken = "timeout: MB's pytest ran past the time limit and was killed"
    elif run.rc == 3:  # pytest INTERNALERROR: this plugin or pytest broke, not MB
        broken_verdict = Verdict.ERROR
        broken = f"harness error: MB's pytest stopped with an internal error (code 3): {run.tail}"
    elif not started or not collected:
        broken = (f"MB's pytest exited with code {run.rc} before running tests (conftest or import failure "
                  f"in this environment): {run.tail}")
    else:
        broken = ""

    cases: list[CaseResult] = []
    for r in resolved:
        name = r.entry.name
        if r.variant is None:
            cases.append(_case(f"{SUITE}::{name}", Verdict.UNTESTABLE, r.reason))
            continue
        nodeids = selected.get(name, [])
        entry_cases = [_test_case(n, phases.get(n, []), broken) for n in nodeids]
        cases += entry_cases
        problem = ""
        if not nodeids:
            err = collect_errors.get(r.variant.file)
            if err is not None:
                problem = f"cannot collect {r.variant.file} at this commit in this environment: {_crash_line(err)}"
                cases.append(_case(f"{SUITE}::{r.variant.file}", Verdict.UNTESTABLE, problem))
            elif broken and not collected:
                problem = broken
                cases.append(_case(f"{SUITE}::{name}", broken_verdict, broken))
            else:
                k = f' -k "{r.variant.k}"' if r.variant.k else ""
                cases.append(_case(f"{SUITE}::{name}", Verdict.UNTESTABLE,
                                   f"{NO_MATCH}: {r.variant.file}{k} selects no test at this commit"))
        if r.expected_passed is not None:
            cases.append(_count_case(r, entry_cases, problem or (broken if nodeids else ""), count_rule))
    return cases


def _case(case_id: str, verdict: Verdict, message: str, duration: float = 0.0) -> CaseResult:
    return CaseResult(case_id=case_id, suite=SUITE, verdict=verdict, duration_s=round(duration, 4),
                      message=message[-MESSAGE_LIMIT:] if len(message) > MESSAGE_LIMIT else message, source=SUITE)


def _test_case(nodeid: str, phases: list[dict[str, Any]], broken: str) -> CaseResult:
    duration = sum(float(p.get("duration", 0.0)) for p in phases)
    worst: tuple[Verdict, str] | None = None
    for p in phases:
        v = Verdict(p["verdict"])
        if v is Verdict.PASS:
            continue
        if worst is None or v.severity > worst[0].severity:
            worst = (v, p.get("message", ""))
    if worst is not None:
        return _case(f"{SUITE}::{nodeid}", worst[0], worst[1], duration)
    if any(p.get("when") == "call" for p in phases):
        return _case(f"{SUITE}::{nodeid}", Verdict.PASS, "", duration)
    reason = broken or "MB's pytest stopped before this test finished"
    return _case(f"{SUITE}::{nodeid}", Verdict.UNTESTABLE, f"not run to the end: {reason}", duration)


def _count_case(r: Resolved, entry_cases: list[CaseResult], problem: str, rule: str) -> CaseResult:
    assert r.variant is not None and r.expected_passed is not None
    expected = r.expected_passed
    got = sum(c.verdict is Verdict.PASS for c in entry_cases)
    skipped = sum(c.verdict is Verdict.UNTESTABLE for c in entry_cases)
    k = f' -k "{r.variant.k}"' if r.variant.k else ""
    where = f"{r.variant.file}{k}, MB guidance era {r.variant.era}"
    cid = f"{SUITE}::count::{r.entry.name}"
    if problem:
        return _case(cid, Verdict.UNTESTABLE, f"expected {expected} passed, not countable here: {problem}")
    ok = got == expected if rule == "exact" else got >= expected
    if ok:
        more = f" (more than the {expected} MB's guidance states: tests added since)" if got > expected else ""
        return _case(cid, Verdict.PASS, f"expected {expected} passed, got {got}{more} ({where})")
    if got < expected <= got + skipped:
        return _case(cid, Verdict.UNTESTABLE, f"expected {expected} passed, got {got}: {skipped} of the selected "
                                              f"tests untestable here ({where})")
    return _case(cid, Verdict.FAIL, f"expected {expected} passed, got {got} ({where}); "
                                    f"{len(entry_cases)} selected, {skipped} untestable")


def _crash_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("E ")]
    return (errs[-1][1:].strip() if errs else (lines[-1] if lines else "unknown error"))[:500]


# --------------------------------------------------------------------------- pytest plugin (child side)


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("harness-upstream")
    group.addoption("--harness-upstream-spec", default=None, help="JSON: entries (name, file, k) to select")
    group.addoption("--harness-upstream-events", default=None, help="append one JSON line per event here")


def pytest_configure(config: Any) -> None:
    spec = config.getoption("--harness-upstream-spec")
    events = config.getoption("--harness-upstream-events")
    if spec and events and not config.pluginmanager.has_plugin("harness-upstream-events"):
        config.pluginmanager.register(_EventsPlugin(Path(spec), Path(events)), "harness-upstream-events")


try:  # the child has pytest; the parent imports this module without needing it
    from pytest import hookimpl as _hookimpl

    _wrapper_hook = _hookimpl(wrapper=True)
except ImportError:  # pragma: no cover
    def _wrapper_hook(fn: Any) -> Any:
        return fn

_CUDA_MARKERS = ("Found no NVIDIA driver", "Torch not compiled with CUDA enabled", "No CUDA GPUs are available",
                 "CUDA driver initialization failed", "libcudart functions unavailable")


def _environment_reason(exc: BaseException) -> str | None:
    """The reason when ``exc`` is a limit of this environment (no CUDA, missing package), not MB's."""
    text = str(exc)
    if isinstance(exc, (RuntimeError, AssertionError)) and any(m in text for m in _CUDA_MARKERS):
        return f"needs CUDA: {text.splitlines()[0] if text else type(exc).__name__}"
    return _third_party_import_error(exc)


def _third_party_import_error(exc: BaseException) -> str | None:
    """The reason when ``exc`` is an import failure of this environment, not of MB's code."""
    if not isinstance(exc, ImportError):
        return None
    name = getattr(exc, "name", None) or ""
    top = name.split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and top and top not in ("megatron", "tests"):
        return f"needs {name}, not installed here"
    if name.startswith("megatron.core") or "megatron.core" in str(exc) or top not in ("megatron", "tests", ""):
        return f"import failure in this environment (megatron-core or a dependency differs): {exc}"
    return None


class _EventsPlugin:
    """Selects each entry's tests (its own ``-k`` on its own file) and streams outcomes."""

    def __init__(self, spec: Path, events: Path) -> None:
        self.entries = json.loads(spec.read_text(encoding="utf-8"))["entries"]
        self.path = events
        self.fh = events.open("a", encoding="utf-8")

    def emit(self, **event: Any) -> None:
        self.fh.write(json.dumps(event) + "\n")
        self.fh.flush()

    def pytest_sessionstart(self, session: Any) -> None:
        self.emit(ev="session_start", pid=os.getpid(), rootdir=str(session.config.rootpath))

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.emit(ev="collect_error", nodeid=report.nodeid, message=str(report.longreprtext)[-MESSAGE_LIMIT:])

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        from _pytest.mark import KeywordMatcher
        from _pytest.mark.expression import Expression

        compiled = [(e, Expression.compile(e["k"]) if e.get("k") else None) for e in self.entries]
        keep, drop = [], []
        for item in items:
            path = item.nodeid.split("::")[0]
            hits = [e["name"] for e, expr in compiled if e["file"] == path
                    and (expr is None or expr.evaluate(KeywordMatcher.from_item(item)))]
            if hits:
                keep.append(item)
                for name in hits:
                    self.emit(ev="selected", entry=name, nodeid=item.nodeid)
            else:
                drop.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
        self.emit(ev="collected", selected=len(keep), deselected=len(drop))

    @_wrapper_hook
    def pytest_runtest_call(self, item: Any):  # noqa: ANN201 - pluggy wrapper
        """``.cuda()`` as a CPU no-op while MB's test body runs (MB moves batches to the GPU)."""
        if "torch" not in sys.modules:  # a test module without torch: nothing to patch, no torch import
            return (yield)
        from harness.standins.cuda import cpu_cuda_calls

        with cpu_cuda_calls():
            return (yield)

    def pytest_runtest_makereport(self, item: Any, call: Any) -> None:
        self._call = call  # read in logreport: the exception is still at hand here

    def pytest_runtest_logreport(self, report: Any) -> None:
        call = getattr(self, "_call", None)
        exc = call.excinfo.value if call is not None and call.excinfo is not None and call.when == report.when else None
        if report.passed:
            if report.when != "call":
                return
            verdict, message = Verdict.PASS, ("xpass (MB marked it xfail)" if hasattr(report, "wasxfail") else "")
        elif report.skipped:
            if hasattr(report, "wasxfail"):
                verdict, message = Verdict.UNTESTABLE, f"xfail by MB: {report.wasxfail}"
            else:
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                verdict, message = Verdict.UNTESTABLE, f"skipped by MB: {reason.removeprefix('Skipped: ')}"
        else:
            text = str(report.longreprtext)
            env_reason = _environment_reason(exc) if exc is not None else None
            if env_reason:
                verdict, message = Verdict.UNTESTABLE, f"{env_reason} ({report.when})"
            else:
                where = "" if report.when == "call" else f" (in {report.when})"
                verdict, message = Verdict.FAIL, f"{_crash_line(text)}{where}\n\n{text[-MESSAGE_LIMIT:]}"
        self.emit(ev="phase", nodeid=report.nodeid, when=report.when, outcome=report.outcome,
                  verdict=verdict.value, message=message, duration=round(report.duration, 4))

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self.emit(ev="finished", exitstatus=int(exitstatus))
        self.fh.close()
