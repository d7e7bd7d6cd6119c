"""``harness matrix``: run the golden suites on many MB refs and print a ref x suite table.

Each ref's ``src`` is materialised from a private mirror of ``--repo`` under the cache
directory (:class:`harness.repository.workspaces.WorkspaceCache`: ``git archive`` streamed, ``--repo`` only
read; ``src`` only, because mirrors may lack large docs blobs) and kept for later runs. Each
ref is run with :func:`harness.suiterun.runner.run_suites`; the table shows verdict counts per suite and
the share of untestable CPU cases, and ``matrix.json`` (typed rows, :mod:`harness.eras.matrix`) and
``matrix.html`` keep every ref's result.

Default refs: the last v0.1 tag (no v0.1.0 final was tagged, so the newest v0.1.0rc*), every
release tag vX.Y.Z from v0.2.0, and the newest commit (HEAD). ``--sample N`` replaces HEAD with
N commits evenly spaced along ``--first-parent`` HEAD from the oldest release's fork point (or
``--since``). ``--megatron-lm`` runs each ref with the megatron-core it pins (:mod:`harness.repository.pins`).
Exit code: 0 when no case is ERROR (failures are MB behaviour, reported in the table), 1 otherwise.

With ``--executor slurm`` every ref is one SLURM job (``-j`` of them in flight): the refs are
materialised here, into the cache directory the jobs share; a ref whose job the cluster lost
counts as an error of that ref (``(job lost)``), never as MB's.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.commands import _args, _jobargs
from harness.errors import GitError, UsageError
from harness.progress import Progress
from harness.records.verdict import Verdict
from harness.suiterun import runner
from harness.target import Target

if TYPE_CHECKING:  # the rest loads with the command, not with ``--help`` (GitPython, jinja2, sqlite3)
    from harness.eras import matrix
    from harness.eras.eragaps import EraJudge
    from harness.executors.slurm import SlurmExecutor
    from harness.records.results import RunResult
    from harness.repository.gitrepo import GitRepo
    from harness.repository.workspaces import WorkspaceCache

MATRIX_CACHE = "matrix-src"  # under the per-user cache directory, never in the checkout


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "matrix",
        help="run the suites on many MB refs (tags, commits) and print a table",
        description="Export each ref's src/ from an MB git repository (a bare mirror works), run the "
        "golden suites on it and print a ref x suite table of pass/fail/untestable/error.",
    )
    p.add_argument("--repo", required=True, type=Path, help="MB git repository or bare mirror")
    p.add_argument("--refs", help="comma-separated refs (default: newest v0.1.0rc*, every vX.Y.Z from v0.2.0, HEAD)")
    _args.add_suites(p, keyword=False)
    _args.add_import_mode(p)
    _args.add_roots(p)
    _args.add_out(p, "reports/matrix-<run-id>")
    _args.add_cache_dir(p)
    _args.add_timeout(p, "one ref's suite process")
    _args.add_verbosity(p)
    _args.add_jobs(p, "refs in flight with --executor slurm (here, refs run one after another)")
    _jobargs.add_executor(p, "the refs (one job per ref)")
    _args.add_megatron_lm(p)
    p.add_argument(
        "--sample",
        type=_args.positive_int,
        metavar="N",
        help="besides the release tags, N commits evenly spaced along --first-parent HEAD",
    )
    p.add_argument(
        "--since",
        metavar="REF",
        help="with --sample: first commit of the sampled range (default: where the oldest release tag forked "
        "from HEAD)",
    )
    p.set_defaults(func=run)


def select_refs(repo: GitRepo, args: argparse.Namespace) -> list[tuple[str, str]]:
    """(ref, kind) to run: --refs as given, else the release tags plus HEAD or the --sample commits."""
    from harness.eras import matrix

    if args.refs:
        return [(r.strip(), "ref") for r in args.refs.split(",") if r.strip()]
    releases = matrix.release_refs(repo.tags())
    if args.sample is None:
        return [(r, "release") for r in releases] + [("HEAD", "ref")]
    since = args.since or matrix.default_since(repo, releases)
    return [(r, "release") for r in releases] + [
        (sha[:9], "sample") for sha in matrix.sample_first_parent(repo, args.sample, since)
    ]


def export_src(workspaces: WorkspaceCache, ref: str) -> tuple[Path, str]:
    """``src/`` of ``ref`` from the private mirror (kept across runs); returns (src, sha)."""
    sha = workspaces.repo.resolve(ref)
    src = workspaces.materialize(sha) / "src"
    if not (src / "megatron" / "bridge").is_dir():
        raise UsageError(f"{ref}: no src/megatron/bridge in its tree")
    return src, sha


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from harness.eras import matrix
    from harness.eras.eragaps import EraJudge
    from harness.report.matrix import render_matrix_report
    from harness.repository.gitrepo import open_repo
    from harness.repository.pins import pinned_core
    from harness.repository.workspaces import WorkspaceCache, workspace_dir_for

    _args.use_roots(args)
    if not Path(args.repo).expanduser().exists():
        raise UsageError(f"--repo {args.repo}: no such directory")
    repo = open_repo(args.repo)
    refs = select_refs(repo, args)
    workspaces = WorkspaceCache(workspace_dir_for(_args.cache_dir(args) / MATRIX_CACHE, repo), repo, paths=("src",))
    out_dir = _args.out_dir(args, f"matrix-{runner.new_run_id()}")
    out_dir.mkdir(parents=True, exist_ok=True)
    mlm = str(args.megatron_lm) if args.megatron_lm else None
    gpu = matrix.gpu_suites()
    opts = runner.RunOptions(
        suites=args.suite, timeout_s=args.timeout, import_mode=args.import_mode, case_times=_args.case_times(args)
    )
    executor = _jobargs.executor_from_args(args, args.jobs, args.timeout)
    judge = EraJudge(repo)
    rows: list[matrix.MatrixRow] = []
    todo: list[_RefItem] = []
    seen: set[str] = set()
    for ref, kind in refs:
        src, sha = export_src(workspaces, ref)
        if sha in seen:  # a sampled commit that is also a release tag
            continue
        seen.add(sha)
        date = repo.committed_date(sha)
        tgt = Target(src=src, commit=sha, repo=repo.path)
        if args.megatron_lm is not None:
            try:
                pinned = pinned_core(repo, sha, args.megatron_lm, _args.cache_dir(args))
            except GitError as exc:
                rows.append(matrix.row_unavailable(ref, kind, sha, date, f"pinned megatron-core unavailable: {exc}"))
                continue
            if pinned is not None:
                tgt = Target(src=src, commit=sha, core=pinned.path, core_pin=pinned.pin, repo=repo.path)
        todo.append(_RefItem(ref, kind, sha, date, tgt, out_dir / re.sub(r"[^A-Za-z0-9._-]", "_", ref)))
    if executor is not None:
        with executor:
            rows += _run_as_jobs(todo, opts, out_dir, executor, gpu, judge)
    else:
        with Progress(None if args.quiet else sys.stderr, "matrix", total=len(todo)) as progress:
            for item in todo:
                progress.update(status=f"running {item.ref} ({item.sha[:9]}, {item.date[:10]})")
                result = runner.run_suites(item.target, opts, item.out, progress=progress, label=item.ref)
                rows.append(item.row(result, gpu, judge))
                matrix.save(out_dir / "matrix.json", str(repo.path), mlm, rows)
                counts = ", ".join(f"{n} {k}" for k, n in result.counts().items() if n)
                progress.step(
                    f"{item.ref} ({item.sha[:9]}): {counts or 'no case'} in {result.duration_s:.0f} s", status=""
                )
    matrix.save(out_dir / "matrix.json", str(repo.path), mlm, rows)
    html = render_matrix_report(rows, out_dir / "matrix.html", repo=str(repo.path), megatron_lm=mlm)
    print_table(rows, out)
    print(f"\nmatrix: {out_dir / 'matrix.json'}\nreport: {html}", file=out)
    return 1 if any(p["verdict"] == Verdict.ERROR.value for r in rows for p in r.problems) else 0


@dataclass(frozen=True)
class _RefItem:
    """One ref to run: exported, its megatron-core resolved, its output directory named."""

    ref: str
    kind: str
    sha: str
    date: str
    target: Target
    out: Path

    def row(self, result: RunResult, gpu: set[str], judge: EraJudge) -> matrix.MatrixRow:
        """The ref's typed row, its untestable cases judged era gap or harness gap."""
        from harness.eras import matrix

        row = matrix.row_from_run(self.ref, self.kind, self.sha, self.date, result, self.out / "results.json", gpu)
        row.judge_untestable(judge)
        return row


def _run_as_jobs(
    todo: list[_RefItem],
    opts: runner.RunOptions,
    out_dir: Path,
    executor: SlurmExecutor,
    gpu: set[str],
    judge: EraJudge,
) -> list[matrix.MatrixRow]:
    """One job per ref; the refs were materialised here, into the cache directory the jobs see."""
    from harness.eras import matrix
    from harness.executors import shards
    from harness.records.results import RunResult

    executor.check_shared(also=[out_dir])
    done = shards.run_jobs(executor, shards.RefRun(opts), [(item.target, str(item.out)) for item in todo])
    rows = []
    for i, item in enumerate(todo):
        result, logs = done[i]
        if isinstance(result, RunResult):
            row = item.row(result, gpu, judge)
            row.notes.append(f"ran as {shards.describe(logs)}")
        else:
            case = shards.lost_case(item.ref, "(all)", result, logs)
            row = matrix.row_unavailable(item.ref, item.kind, item.sha, item.date, case.message)
            row.problems.append({"case_id": case.case_id, "verdict": case.verdict.value, "message": case.message})
        rows.append(row)
    return rows


#: The terminal tables fit this many columns (a CI log, a laptop terminal).
TABLE_WIDTH = 120
#: A per-suite cell: pass/fail/known-fail/changed/untestable (errors are listed after the tables).
CELL = ("pass", "fail", "known-fail", "changed", "untestable")


def print_table(rows: list[matrix.MatrixRow], out: TextIO) -> None:
    """MB's health first (failures, known MB bugs, golden changes, untestable, errors per ref,
    each its own column), then the harness's coverage goal, then per suite: suites as rows and
    refs as columns, split so no line is wider than :data:`TABLE_WIDTH`."""
    from harness.eras import matrix

    head = f"{'ref':<12}{'commit':<11}{'date':<12}" + f"{'fail':>6}{'known':>7}{'changed':>9}{'fixed':>7}"
    head += f"{'untest':>8}{'error':>7}"
    print("\nMB's health (cases per verdict; known = reviewed known MB bugs)", file=out)
    print(head, file=out)
    for r in rows:
        print(
            f"{r.ref:<12}{r.commit[:9]:<11}{r.date[:10]:<12}{r.total('fail'):>6}{r.total('known-fail'):>7}"
            f"{r.total('changed'):>9}{r.total('fixed'):>7}{r.total('untestable'):>8}{r.total('error'):>7}",
            file=out,
        )
    print("\nharness coverage (CPU cases untestable: era = feature absent there, gaps = every other)", file=out)
    print(f"{'ref':<12}{'CPU':>6}{'untest':>8}{'%':>7}{'era':>6}{'gaps':>6}{'gap%':>8}", file=out)
    for r in rows:
        mark = "" if r.meets_goal else " *"
        print(
            f"{r.ref:<12}{r.cpu_cases:>6}{r.untestable_cpu:>8}{r.untestable_pct:>7.1f}{r.era_gap_cpu:>6}"
            f"{len(r.gaps):>6}{r.gap_pct:>6.1f}{mark}",
            file=out,
        )
    print(f"(* gaps above {matrix.UNTESTABLE_GOAL_PCT:g}% of the CPU cases whose features exist there)", file=out)
    suites = sorted({s for r in rows for s in r.suites})
    label = min(max([len(s) for s in suites] + [5]), 28)
    cell = 14
    per_chunk = max(1, (TABLE_WIDTH - label) // cell)
    print("\nper suite: pass/fail/known/changed/untestable", file=out)
    for start in range(0, len(rows), per_chunk):
        chunk = rows[start : start + per_chunk]
        print(f"{'suite':<{label}}" + "".join(f"{r.ref[: cell - 1]:>{cell}}" for r in chunk), file=out)
        for suite in suites:
            cells = []
            for r in chunk:
                n = r.suites.get(suite)
                cells.append("/".join(str(n.get(v, 0)) for v in CELL) if n else "-")
            print(f"{suite[:label]:<{label}}" + "".join(f"{c:>{cell}}" for c in cells), file=out)
