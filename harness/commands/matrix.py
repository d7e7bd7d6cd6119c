"""``harness matrix``: run the golden suites on many MB refs and print a ref x suite table.

Each ref's ``src`` is materialised from a private mirror of ``--repo`` under the cache
directory (:class:`harness.workspaces.WorkspaceCache`: ``git archive`` streamed, ``--repo`` only
read; ``src`` only, because mirrors may lack large docs blobs) and kept for later runs. Each
ref is run with :func:`harness.runner.run_suites`; the table shows pass/fail/untestable/error
counts per suite, and ``matrix.json`` keeps every run's cases.

Default refs: the last v0.1 tag (no v0.1.0 final was tagged, so the newest v0.1.0rc*), every
release tag vX.Y.Z from v0.2.0 through v0.6.0, and the newest commit (HEAD).
Exit code: 0 when no case is ERROR (failures are MB behaviour, reported in the table), 1 otherwise.

With ``--executor slurm`` every ref is one SLURM job (``-j`` of them in flight): the refs are
materialised here, into the cache directory the jobs share; a ref whose job the cluster lost
counts as an error of that ref (``(job lost)``), never as MB's.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness import runner
from harness.atomicio import write_versioned_json
from harness.commands import _args
from harness.errors import UsageError
from harness.executors import shards
from harness.gitrepo import open_repo
from harness.results import RunResult
from harness.target import Target
from harness.verdict import Verdict
from harness.workspaces import WorkspaceCache, workspace_dir_for

if TYPE_CHECKING:
    from harness.executors.slurm import SlurmExecutor

MATRIX_CACHE = "matrix-src"  # under the per-user cache directory, never in the checkout
_RELEASE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
_RC01 = re.compile(r"^v0\.1\.0rc(\d+)$")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "matrix",
        help="run the suites on many MB refs (tags, commits) and print a table",
        description="Export each ref's src/ from an MB git repository (a bare mirror works), run the "
        "golden suites on it and print a ref x suite table of pass/fail/untestable/error.",
    )
    p.add_argument("--repo", required=True, type=Path, help="MB git repository or bare mirror")
    p.add_argument("--refs", help="comma-separated refs (default: newest v0.1.0rc*, v0.2.0..v0.6.0 releases, HEAD)")
    _args.add_suites(p, keyword=False)
    _args.add_import_mode(p)
    _args.add_out(p, "reports/matrix-<run-id>")
    _args.add_cache_dir(p)
    _args.add_timeout(p, "one ref's suite process")
    _args.add_verbosity(p)
    _args.add_jobs(p, "refs in flight with --executor slurm (here, refs run one after another)")
    _args.add_executor(p, "the refs (one job per ref)")
    p.set_defaults(func=run)


def default_refs(tags: list[str]) -> list[str]:
    rc01 = sorted((int(m.group(1)), t) for t in tags if (m := _RC01.match(t)))
    rel = sorted((tuple(map(int, m.groups())), t) for t in tags if (m := _RELEASE.match(t)))
    refs = [rc01[-1][1]] if rc01 else []
    refs += [t for v, t in rel if (0, 2, 0) <= v <= (0, 6, 0)]
    return refs + ["HEAD"]


def export_src(workspaces: WorkspaceCache, ref: str) -> tuple[Path, str]:
    """``src/`` of ``ref`` from the private mirror (kept across runs); returns (src, sha)."""
    sha = workspaces.repo.resolve(ref)
    src = workspaces.materialize(sha) / "src"
    if not (src / "megatron" / "bridge").is_dir():
        raise UsageError(f"{ref}: no src/megatron/bridge in its tree")
    return src, sha


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    if not Path(args.repo).expanduser().exists():
        raise UsageError(f"--repo {args.repo}: no such directory")
    repo = open_repo(args.repo)
    refs = [r.strip() for r in args.refs.split(",") if r.strip()] if args.refs else default_refs(repo.tags())
    workspaces = WorkspaceCache(workspace_dir_for(_args.cache_dir(args) / MATRIX_CACHE, repo), repo, paths=("src",))
    out_dir = _args.out_dir(args, f"matrix-{runner.new_run_id()}")
    out_dir.mkdir(parents=True, exist_ok=True)
    opts = runner.RunOptions(suites=args.suite, timeout_s=args.timeout, import_mode=args.import_mode)
    executor = _args.executor_from_args(args, args.jobs, args.timeout)
    rows: list[dict] = []
    if executor is not None:
        with executor:
            rows = _run_as_jobs(workspaces, refs, opts, out_dir, executor)
        write_versioned_json(out_dir / "matrix.json", "harness-matrix", 1, {"repo": str(repo.path), "refs": rows})
    else:
        for ref in refs:
            src, sha = export_src(workspaces, ref)
            if not args.quiet:
                print(f"matrix: {ref} ({sha[:9]})", file=sys.stderr)
            ref_dir = _ref_dir(out_dir, ref)
            result = runner.run_suites(Target(src=src, commit=sha), opts, ref_dir, progress=None)
            rows.append(_row(ref, sha, result, ref_dir))
            write_versioned_json(out_dir / "matrix.json", "harness-matrix", 1, {"repo": str(repo.path), "refs": rows})
    print_table(rows, out)
    print(f"\nmatrix: {out_dir / 'matrix.json'}", file=out)
    return 1 if any(p["verdict"] == Verdict.ERROR.value for r in rows for p in r["problems"]) else 0


def _ref_dir(out_dir: Path, ref: str) -> Path:
    return out_dir / re.sub(r"[^A-Za-z0-9._-]", "_", ref)


def _row(ref: str, sha: str, result: RunResult, ref_dir: Path) -> dict:
    suites = sorted({c.suite for c in result.cases})
    return {
        "ref": ref,
        "commit": sha,
        "mb_version": result.versions.get("megatron-bridge"),
        "import_mode": result.import_mode,
        "duration_s": result.duration_s,
        "suites": {suite: result.counts(suite) for suite in suites},
        "problems": [
            {"case_id": c.case_id, "verdict": c.verdict.value, "message": c.message[:4000]}
            for c in result.cases
            if c.verdict is not Verdict.PASS
        ],
        "notes": result.notes,
        "results": str(ref_dir / "results.json"),
    }


def _run_as_jobs(
    workspaces: WorkspaceCache, refs: list[str], opts: runner.RunOptions, out_dir: Path, executor: SlurmExecutor
) -> list[dict]:
    """One job per ref; the refs are materialised here first, into the cache directory the jobs see."""
    items = []
    for ref in refs:
        src, sha = export_src(workspaces, ref)
        items.append((ref, sha, str(src), str(_ref_dir(out_dir, ref))))
    executor.check_shared(also=[out_dir])
    done = shards.run_jobs(executor, shards.RefRun(opts), items)
    rows = []
    for i, (ref, sha, _, ref_dir) in enumerate(items):
        result, logs = done[i]
        if isinstance(result, RunResult):
            row = _row(ref, sha, result, Path(ref_dir))
            row["notes"].append(f"ran as {shards.describe(logs)}")
        else:
            case = shards.lost_case(ref, "(all)", result, logs)
            problem = {"case_id": case.case_id, "verdict": case.verdict.value, "message": case.message}
            row = {"ref": ref, "commit": sha, "mb_version": None, "import_mode": "", "duration_s": 0.0}
            row.update({"suites": {}, "problems": [problem], "notes": [], "results": ""})
        rows.append(row)
    return rows


def print_table(rows: list[dict], out: TextIO) -> None:
    suites = sorted({s for r in rows for s in r["suites"]})
    width = max([len(s) for s in suites] + [10])
    print(f"\n{'ref':<14}{'commit':<11}" + "".join(f"{s[:width]:>{width + 2}}" for s in suites), file=out)
    print(f"{'':<25}" + "".join(f"{'p/f/u/e':>{width + 2}}" for _ in suites), file=out)
    for r in rows:
        cells = []
        for s in suites:
            n = r["suites"].get(s)
            cells.append(f"{n['pass']}/{n['fail']}/{n['untestable']}/{n['error']}" if n else "-")
        print(f"{r['ref']:<14}{r['commit'][:9]:<11}" + "".join(f"{c:>{width + 2}}" for c in cells), file=out)
