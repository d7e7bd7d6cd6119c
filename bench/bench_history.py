"""Detection benchmark on MB's real history: does the harness catch bugs MB really fixed?

Not a test (minutes per fix on 2 cores). From Megatron-Bridge's own history, the commits that
fix packing behaviour are collected: merged into ``main`` before the cutoff (2026-02-01; later
history is held out for an independent check and is never read here, not even listed), with a
packing word and a fix word in the message, touching MB's packing code (``data/``,
``training/utils/packed_seq_utils.py``, ``training/*_step.py``, ``training/config.py``), plus a
short reviewed list of fixes hidden inside feature commits (:data:`EXTRA`). For each fix:

- ``harness run --mb-src <tree> --megatron-lm MLM`` (the megatron-core the commit pins: its
  submodule, or before 2025-10-15 its ``uv.lock`` entry; the installed one only for a commit that
  names neither) on the light suites at the fix's parent
  and at the fix: **detected** when a case fails at the parent and passes (or is changed, or only
  its known MB bugs remain) at the fix;
- the introducing commit is proposed from the fixed lines (``git blame`` of the removed lines, or
  of the lines around a pure insertion, at the parent: the newest commit among them), and
  ``harness bisect INTRODUCER^..PARENT`` must name it for one of the detected cases.

Printed: one row per fix (detected cases, proposed introducer, culprit, evaluations, wall time)
and the totals. Needs the mirrors (``--mb-repo`` / ``HARNESS_MB_MIRROR``, ``--megatron-lm`` /
``HARNESS_MLM_MIRROR``); without them it prints one line saying why and exits 0.

    .venv/bin/python bench/bench_history.py [--limit N] [--fix SHA ...] [--no-bisect] [--work DIR]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = [str(ROOT / ".venv" / "bin" / "harness")]

CUTOFF = "2026-02-01"  # later history is held out: never raise it
PACKING_PATHS = (
    "src/megatron/bridge/data/*",
    "src/megatron/bridge/training/utils/packed_seq_utils.py",
    "src/megatron/bridge/training/*_step.py",
    "src/megatron/bridge/training/config.py",
)
PACKING_WORDS = re.compile(r"pack|cu_seqlens|loss[ _]?mask|padding|pad_|chat template", re.I)
FIX_WORDS = re.compile(r"\b(fix\w*|bug\w*|regression|wrong|incorrect|missing)\b", re.I)
# Fixes whose message does not say so, found by reading their diffs (all before the cutoff).
# Each with the pattern of the fixed lines: only those are blamed for the introducer.
EXTRA = {"5e4313cfe": ("feature commit that also stops masking pad_id inside answers", r"pad_id")}
LIGHT_SUITES = (
    "offline_packed_dataset",
    "packed_files",
    "packed_seq_params",
    "padding_loss_masks",
    "config_validation",
    "in_batch_packing",
)
GONE_AT_FIX = {"pass", "changed", "known-fail", "fixed"}  # the fix removed the failure


@dataclass
class Fix:
    sha: str
    date: str  # committer date, ISO 8601
    subject: str
    files: list[str]
    why: str = "message"  # or the EXTRA reason
    lines: str = ""  # regex: blame only hunks whose removed lines match (EXTRA); "" all


@dataclass
class Row:
    fix: Fix
    detected: list[str] = field(default_factory=list)  # case ids
    eval_s: float = 0.0  # parent + fix runs
    introducer: str = ""
    culprits: list[str] = field(default_factory=list)
    right: bool | None = None  # None: not bisected
    evaluations: int | None = None
    bisect_s: float = 0.0
    miss: str = ""  # why a row is not a full success


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def packing_files(files: list[str]) -> list[str]:
    return [f for f in files if any(fnmatch.fnmatch(f, p) for p in PACKING_PATHS)]


def main_at_cutoff(repo: Path, branch: str, cutoff: str) -> str:
    """The tip of ``branch`` (first-parent) at the cutoff: what had been merged by then."""
    sha = git(repo, "rev-list", "--first-parent", f"--before={cutoff}T00:00:00Z", "-n1", branch).strip()
    if not sha:
        raise SystemExit(f"{branch} has no commit before {cutoff}")
    return sha


def collect_fixes(
    repo: Path, branch: str = "main", cutoff: str = CUTOFF, extra: dict[str, tuple[str, str]] | None = None
) -> list[Fix]:
    """Packing fixes merged into ``branch`` before ``cutoff``, oldest first.

    Only history reachable from the branch's tip at the cutoff is listed, so a later commit is
    never even read (a side branch committed earlier but merged later is excluded too).
    """
    if cutoff > CUTOFF:
        raise SystemExit(f"cutoff {cutoff} is after {CUTOFF}: later history is held out")
    extra = EXTRA if extra is None else extra
    tip = main_at_cutoff(repo, branch, cutoff)
    out = git(repo, "log", "--no-merges", "--format=%x00%H%x1f%cI%x1f%s", "--name-only", tip)
    fixes = []
    for rec in out.split("\0")[1:]:
        head, _, names = rec.partition("\n")
        sha, date, subject = head.split("\x1f")
        files = packing_files([n for n in names.split("\n") if n])
        if not files:
            continue
        why, lines = next((v for k, v in extra.items() if sha.startswith(k)), ("", ""))
        if why or (PACKING_WORDS.search(subject) and FIX_WORDS.search(subject)):
            fixes.append(Fix(sha, date, subject, files, why or "message", lines))
    return fixes[::-1]


def propose_introducer(repo: Path, fix: Fix) -> str:
    """The newest commit that last touched the lines ``fix`` changes (blame at its parent)."""
    shas: set[str] = set()
    for path in fix.files:
        diff = git(repo, "diff", "-U0", f"{fix.sha}^", fix.sha, "--", path)
        for hunk in re.split(r"^(?=@@ )", diff, flags=re.M)[1:]:
            m = re.match(r"@@ -(\d+)(?:,(\d+))? ", hunk)
            assert m, hunk[:80]
            start, count = int(m.group(1)), int(m.group(2) or 1)
            removed = "\n".join(ln for ln in hunk.splitlines() if ln.startswith("-"))
            if start == 0 or (fix.lines and not re.search(fix.lines, removed)):  # a new file, or other lines
                continue
            span = f"{start},+{max(count, 1)}"  # an insertion: the line it follows
            blame = git(repo, "blame", "-w", "--porcelain", "-L", span, f"{fix.sha}^", "--", path)
            shas |= set(re.findall(r"^([0-9a-f]{40}) \d+ \d+", blame, re.M))
    if not shas:
        return ""
    dated = [(int(git(repo, "log", "-1", "--format=%ct", s).strip()), s) for s in shas]
    return max(dated)[1]


def materialise(repo: Path, sha: str, where: Path) -> Path:
    """A git tree whose HEAD is ``sha`` with its src/ and tests/ (the mirror lacks some docs blobs)."""
    if not (where / ".git").is_dir():
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(repo), str(where)], check=True)
    git(where, "update-ref", "--no-deref", "HEAD", sha)
    for d in ("src", "tests"):
        shutil.rmtree(where / d, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(where), "archive", sha, "src", "tests"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


def has_package(repo: Path, rev: str) -> bool:
    """Whether ``rev`` has MB's package (before 2025-07-16 it lived elsewhere: nothing runs there)."""
    return (
        subprocess.run(
            ["git", "-C", str(repo), "cat-file", "-e", f"{rev}:src/megatron/bridge"], capture_output=True
        ).returncode
        == 0
    )


def pins_core(repo: Path, sha: str) -> bool:
    """Whether ``sha`` names its megatron-core: the submodule (from 2025-10-15) or, before it, the
    ``uv.lock`` entry (:func:`harness.repository.pins.lock_pin`), as ``harness run --megatron-lm`` reads them."""
    from harness.repository.gitrepo import open_repo
    from harness.repository.pins import lock_pin

    if git(repo, "ls-tree", sha, "3rdparty/Megatron-LM").strip():
        return True
    return lock_pin(open_repo(repo), sha) is not None


def evaluate(
    repo: Path, mlm: Path, sha: str, work: Path, suites: tuple[str, ...]
) -> tuple[dict[str, tuple[str, str]], float]:
    """case id -> (verdict, message) of ``harness run`` at ``sha``, and its wall time (reused when run)."""
    out = work / "runs" / sha[:12]
    results = out / "results.json"
    if not results.exists():
        tree = materialise(repo, sha, work / "tree")
        cmd = [*HARNESS, "run", "--mb-src", str(tree), "--out", str(out), "-q", "--cache-dir", str(work / "cache")]
        cmd += ["--megatron-lm", str(mlm)] if pins_core(repo, sha) else []
        for s in suites:
            cmd += ["--suite", s]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if not results.exists():
            raise RuntimeError(f"harness run at {sha[:12]} wrote no results: {proc.stderr.strip()[-300:]}")
        (out / "wall_s").write_text(f"{time.monotonic() - t0:.1f}\n")
    doc = json.loads(results.read_text())
    cases = {c["case_id"]: (c["verdict"], c["message"]) for c in doc["cases"]}
    return cases, float((out / "wall_s").read_text())


def detected_cases(at_parent: dict[str, tuple[str, str]], at_fix: dict[str, tuple[str, str]]) -> list[str]:
    return sorted(c for c, (v, _) in at_parent.items() if v == "fail" and at_fix.get(c, ("", ""))[0] in GONE_AT_FIX)


def moved_failures(at_parent: dict[str, tuple[str, str]], at_fix: dict[str, tuple[str, str]]) -> str:
    """Cases failing at both ends for different reasons: the fix removed one failure, another remains."""
    moved = sorted(
        (c, m, at_fix[c][1])
        for c, (v, m) in at_parent.items()
        if v == "fail" and c in at_fix and at_fix[c][0] == "fail" and at_fix[c][1] != m
    )
    if not moved:
        return ""
    case, before, after = moved[0]
    return f"; {len(moved)} fail at both for another reason, e.g. {case}: '{_line(before)}' -> '{_line(after)}'"


def untestable_note(at_parent: dict[str, tuple[str, str]]) -> str:
    """When most cases cannot run at the parent, how many and the commonest reason (why a miss)."""
    reasons = Counter(_line(m) for v, m in at_parent.values() if v == "untestable")
    n = sum(reasons.values())
    if not at_parent or n * 2 <= len(at_parent):
        return ""
    return f"; {n} of {len(at_parent)} cases untestable at the parent, mostly '{reasons.most_common(1)[0][0]}'"


def _line(message: str) -> str:
    return message.splitlines()[0][:110] if message else ""


def bisect(repo: Path, mlm: Path, row: Row, work: Path) -> None:
    """``harness bisect INTRODUCER^..PARENT`` on the detected cases' suites; fills the row."""
    out = work / "bisect" / row.fix.sha[:12]
    suites = sorted({c.split("::")[0] for c in row.detected})
    cmd = [*HARNESS, "bisect", f"{row.introducer}^..{row.fix.sha}^", "--repo", str(repo), "--megatron-lm", str(mlm)]
    cmd += ["--out", str(out), "-q", "--cache-dir", str(work / "cache"), "--allow-dirty", "--timeout", "600"]
    for s in suites:
        cmd += ["--suite", s]
    doc_path = out / "bisect.json"
    if not doc_path.exists():  # else reused: its numbers are those of the run that wrote it
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if not doc_path.exists():
            row.miss = f"bisect wrote no record: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
            return
    doc = json.loads(doc_path.read_text())
    row.bisect_s = doc["duration_s"]
    row.evaluations = doc.get("evaluations")
    found = {c["culprit"]["sha"] for c in doc["cases"] if c["case_id"] in row.detected and c.get("culprit")}
    row.culprits = sorted(found)
    row.right = row.introducer in found
    if not row.right:
        named = ", ".join(s[:9] for s in found) or "no culprit for the detected cases"
        row.miss = row.miss or f"bisect named {named}"


def format_table(rows: list[Row]) -> str:
    """The per-fix table and the totals line (what the closing note quotes)."""
    head = (
        f"{'fix':<10} {'date':<10} {'detected':>8} {'introducer':<10} {'bisect':<7} {'evals':>5} {'run s':>6} "
        f"{'bisect s':>8}  subject"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        bis = "-" if r.right is None else ("right" if r.right else "wrong")
        evals = "-" if r.evaluations is None else str(r.evaluations)
        lines.append(
            f"{r.fix.sha[:9]:<10} {r.fix.date[:10]:<10} {len(r.detected):>8} {r.introducer[:9] or '-':<10} {bis:<7} "
            f"{evals:>5} {r.eval_s:>6.0f} {r.bisect_s:>8.0f}  {r.fix.subject[:60]}"
        )
    n_det = sum(1 for r in rows if r.detected)
    n_right = sum(1 for r in rows if r.right)
    lines.append(f"fixes {len(rows)}, detected {n_det}, bisected to the introducing commit {n_right}")
    lines += [f"miss {r.fix.sha[:9]}: {r.miss}" for r in rows if r.miss]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb-repo", type=Path, default=os.environ.get("HARNESS_MB_MIRROR"))
    ap.add_argument("--megatron-lm", type=Path, default=os.environ.get("HARNESS_MLM_MIRROR"))
    ap.add_argument("--branch", default="main")
    ap.add_argument("--cutoff", default=CUTOFF, help=f"merged before this date (at most {CUTOFF})")
    ap.add_argument("--suite", action="append", help=f"default: {', '.join(LIGHT_SUITES)}")
    ap.add_argument("--fix", action="append", default=[], help="only these fixes (sha prefixes)")
    ap.add_argument("--limit", type=int, help="at most N fixes")
    ap.add_argument("--no-bisect", action="store_true")
    ap.add_argument("--work", type=Path, default=Path("/tmp/harness-bench-history"))
    a = ap.parse_args()
    for what, p in (("--mb-repo/HARNESS_MB_MIRROR", a.mb_repo), ("--megatron-lm/HARNESS_MLM_MIRROR", a.megatron_lm)):
        if p is None or not Path(p).is_dir():
            print(f"skipped: no Megatron-Bridge / Megatron-LM mirror ({what} not set or not a directory)")
            return 0
    suites = tuple(a.suite or LIGHT_SUITES)
    fixes = collect_fixes(a.mb_repo, a.branch, a.cutoff)
    fixes = [f for f in fixes if not a.fix or any(f.sha.startswith(p) for p in a.fix)]
    fixes = fixes[: a.limit] if a.limit else fixes
    print(f"{len(fixes)} packing fixes merged into {a.branch} before {a.cutoff}", file=sys.stderr)
    rows = []
    for fix in fixes:
        row = Row(fix)
        rows.append(row)
        print(f"{fix.sha[:9]} {fix.subject[:70]}", file=sys.stderr)
        try:
            parent = git(a.mb_repo, "rev-parse", f"{fix.sha}^").strip()
            at_parent, s1 = evaluate(a.mb_repo, a.megatron_lm, parent, a.work, suites)
            at_fix, s2 = evaluate(a.mb_repo, a.megatron_lm, fix.sha, a.work, suites)
        except RuntimeError as e:
            row.miss = str(e)
            continue
        row.eval_s = s1 + s2
        row.detected = detected_cases(at_parent, at_fix)
        row.introducer = propose_introducer(a.mb_repo, fix)
        if not row.detected:
            row.miss = "no case fails at the parent and passes at the fix"
            row.miss += moved_failures(at_parent, at_fix) + untestable_note(at_parent)
        elif not has_package(a.mb_repo, f"{row.introducer}^"):
            row.miss = f"fixed lines date from {row.introducer[:9]}, before src/megatron/bridge existed: no good commit"
        elif not a.no_bisect and row.introducer:
            bisect(a.mb_repo, a.megatron_lm, row, a.work)
        print(format_table([row]).splitlines()[2], file=sys.stderr)
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
