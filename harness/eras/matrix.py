"""The era sweep behind ``harness matrix``: which MB refs to run, and one typed row per ref.

Why a sweep: adapters follow MB's API back to v0.1.0rc4, and the promise is that at every
release tag and at commits spread evenly along ``--first-parent`` main every CPU case whose
feature exists runs, and that what does not run says which MB feature is missing. The rows
record exactly that, per ref, so the claim can be checked and tracked (``matrix.json``,
``matrix.html``).

Two shares per ref. ``untestable_pct``: untestable CPU cases over all CPU cases (a case of a
feature MB gained later counts). ``gap_pct``, the goal (<= 5%): *harness gaps* over the CPU
cases whose features exist at that commit; an untestable case is an era gap, left out of both
sides, only when its reason names a ledger feature whose introducing commit is not an ancestor
of the ref (:mod:`harness.eras.eragaps`), so a gap cannot pass for an era difference.

* Refs: the release tags (``vX.Y.Z`` from v0.2.0, plus the newest ``v0.1.0rc*``: no v0.1.0
  final was tagged) and, with ``sample``, N commits evenly spaced along ``--first-parent`` of
  the repository's HEAD, from the fork point of the oldest release tag (older main commits
  predate the oldest era the adapters cover; ``since`` overrides the start).
* CPU cases: every case except those of GPU-only suites (module ``pytestmark`` with
  ``pytest.mark.gpu``): a GPU case on a CPU machine is untestable by design, not an era gap.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import features
from harness.eras.eragaps import EraJudge
from harness.errors import UsageError
from harness.paths import suites_dir as _suites_dir
from harness.records.atomicio import read_versioned_json, record_from, write_versioned_json
from harness.records.results import RunResult
from harness.records.verdict import Verdict
from harness.repository.gitrepo import GitRepo

MATRIX_KIND = "harness-matrix"
MATRIX_SCHEMA = 3
UNTESTABLE_GOAL_PCT = 5.0
UNJUDGED = "not checked against the feature ledger"

_RELEASE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
_RC01 = re.compile(r"^v0\.1\.0rc(\d+)$")
_GPU_MARK = re.compile(r"pytestmark\s*=.*pytest\.mark\.gpu\b")


def release_refs(tags: list[str]) -> list[str]:
    """Newest ``v0.1.0rc*`` then every ``vX.Y.Z`` from v0.2.0, oldest first."""
    rc01 = sorted((int(m.group(1)), t) for t in tags if (m := _RC01.match(t)))
    rel = sorted((tuple(map(int, m.groups())), t) for t in tags if (m := _RELEASE.match(t)))
    return ([rc01[-1][1]] if rc01 else []) + [t for v, t in rel if v >= (0, 2, 0)]


def sample_first_parent(repo: GitRepo, n: int, since: str) -> list[str]:
    """``n`` commits evenly spaced along ``--first-parent`` HEAD from ``since`` (both ends included)."""
    if n < 1:
        raise UsageError(f"--sample {n}: give at least 1 commit")
    start = repo.resolve(since)
    chain = repo.first_parent_chain("HEAD")
    if start not in chain:
        raise UsageError(f"{since} ({start[:12]}) is not on the first-parent chain of HEAD in {repo.path}")
    chain = chain[chain.index(start) :]
    if n >= len(chain):
        return chain
    if n == 1:
        return [chain[-1]]
    return [chain[round(i * (len(chain) - 1) / (n - 1))] for i in range(n)]


def default_since(repo: GitRepo, releases: list[str]) -> str:
    """Fork point from HEAD of the oldest release ref: where the oldest covered era starts on main."""
    if not releases:
        raise UsageError(f"no release tags in {repo.path}; give --since REF")
    base = repo.merge_base(releases[0], "HEAD")
    if base is None:
        raise UsageError(f"{releases[0]} shares no history with HEAD in {repo.path}; give --since REF")
    return base


def gpu_suites(suites_dir: Path | None = None) -> set[str]:
    """Suites whose module-level ``pytestmark`` carries ``pytest.mark.gpu``."""
    root = suites_dir if suites_dir is not None else _suites_dir()
    return {p.stem[5:] for p in root.glob("test_*.py") if _GPU_MARK.search(p.read_text(encoding="utf-8"))}


@dataclass
class MatrixRow:
    """One MB ref of the sweep."""

    ref: str  # tag name, or the short sha of a sampled commit
    kind: str  # "release", "sample" or "ref" (given with --refs)
    commit: str
    date: str  # committer date, ISO 8601
    mb_version: str | None = None
    megatron_core: str | None = None  # installed version, or the pinned Megatron-LM commit and how it was named
    duration_s: float = 0.0
    suites: dict[str, dict[str, int]] = field(default_factory=dict)  # suite -> verdict counts
    cpu_cases: int = 0
    untestable_cpu: int = 0
    untestable: list[dict[str, str]] = field(default_factory=list)  # {case_id, reason} of CPU cases
    era_gap_cpu: int = 0  # untestable CPU cases whose feature is checked absent at this commit
    gaps: list[dict[str, str]] = field(default_factory=list)  # the other untestable CPU cases: {case_id, reason, why}
    problems: list[dict[str, str]] = field(
        default_factory=list
    )  # neither pass nor untestable: {case_id, verdict, message}
    notes: list[str] = field(default_factory=list)
    results: str | None = None  # path of that run's results.json

    @property
    def untestable_pct(self) -> float:
        return 100.0 * self.untestable_cpu / self.cpu_cases if self.cpu_cases else 100.0

    def total(self, verdict: str) -> int:
        """Cases with ``verdict`` at this ref, every suite together (MB's health at a glance)."""
        return sum(n.get(verdict, 0) for n in self.suites.values())

    @property
    def applicable_cpu(self) -> int:
        """CPU cases whose features exist at this commit."""
        return self.cpu_cases - self.era_gap_cpu

    @property
    def gap_pct(self) -> float:
        """Harness gaps over the CPU cases whose features exist here (100 when nothing ran)."""
        return 100.0 * len(self.gaps) / self.applicable_cpu if self.applicable_cpu else 100.0

    @property
    def meets_goal(self) -> bool:
        return self.cpu_cases > 0 and self.gap_pct <= UNTESTABLE_GOAL_PCT

    def judge_untestable(self, judge: EraJudge) -> None:
        """Split the untestable CPU cases into era gaps (counted) and harness gaps (listed)."""
        self.era_gap_cpu, self.gaps = 0, []
        for u in self.untestable:
            verdict = judge.judge(self.commit, u["reason"])
            if verdict.era_gap:
                self.era_gap_cpu += 1
            else:
                self.gaps.append({**u, "why": verdict.why})

    def to_json(self) -> dict[str, object]:
        return {
            **asdict(self),
            "untestable_pct": round(self.untestable_pct, 2),
            "gap_pct": round(self.gap_pct, 2),
            "meets_goal": self.meets_goal,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> MatrixRow:
        return record_from(cls, doc)


def row_from_run(
    ref: str, kind: str, commit: str, date: str, result: RunResult, results_path: Path, gpu: set[str]
) -> MatrixRow:
    cases = result.cases
    suites = sorted({c.suite for c in cases})
    cpu = [c for c in cases if c.suite not in gpu]
    untestable = [c for c in cpu if c.verdict is Verdict.UNTESTABLE]
    listed = [{"case_id": c.case_id, "reason": c.message[:2000]} for c in untestable]
    return MatrixRow(
        ref=ref,
        kind=kind,
        commit=commit,
        date=date,
        mb_version=result.versions.get("megatron-bridge"),
        megatron_core=result.versions.get("megatron-core"),
        duration_s=result.duration_s,
        suites={s: {v.value: sum(c.verdict is v for c in cases if c.suite == s) for v in Verdict} for s in suites},
        cpu_cases=len(cpu),
        untestable_cpu=len(untestable),
        untestable=listed,
        gaps=[{**u, "why": UNJUDGED} for u in listed],  # every one a gap until judged against the ledger
        problems=[
            {"case_id": c.case_id, "verdict": c.verdict.value, "message": c.message[:4000]}
            for c in cases
            if c.verdict not in (Verdict.PASS, Verdict.UNTESTABLE)
        ],
        notes=list(result.notes),
        results=str(results_path),
    )


def row_unavailable(ref: str, kind: str, commit: str, date: str, reason: str) -> MatrixRow:
    """A ref that could not be run at all (e.g. its pinned megatron-core is missing)."""
    return MatrixRow(ref=ref, kind=kind, commit=commit, date=date, notes=[reason])


_UNTESTABLE_PREFIX = re.compile(r"^untestable:\s*")
_TRIED = re.compile(r"(?:; |\()tried .*$")
_FEATURE_TAG = re.compile(r"\s*\[missing feature [^\]]*\]")


def reason_key(reason: str) -> str:
    """An untestable reason without the list of candidates tried, to group one era gap across cases
    (the ledger features it names are kept, after it)."""
    text = _UNTESTABLE_PREFIX.sub("", reason.strip().splitlines()[0] if reason.strip() else "")
    tags = " ".join(features.tag(k) for k in features.named(text) if k in features.FEATURES)
    text = _FEATURE_TAG.sub("", text)
    text = _TRIED.sub("", text).strip()
    text += ")" * max(0, text.count("(") - text.count(")"))
    return (text[:300] + (" " + tags if tags else "")).strip() or "(no reason given)"


def reason_summary(rows: list[MatrixRow]) -> list[dict[str, object]]:
    """Untestable reasons over all rows: reason, cases, refs (most frequent first)."""
    cases: Counter[str] = Counter()
    refs: dict[str, list[str]] = {}
    for row in rows:
        for u in row.untestable:
            key = reason_key(u["reason"])
            cases[key] += 1
            if row.ref not in refs.setdefault(key, []):
                refs[key].append(row.ref)
    return [{"reason": k, "cases": n, "refs": refs[k]} for k, n in cases.most_common()]


def save(path: Path, repo: str, megatron_lm: str | None, rows: list[MatrixRow]) -> None:
    write_versioned_json(
        path,
        MATRIX_KIND,
        MATRIX_SCHEMA,
        {
            "repo": repo,
            "megatron_lm": megatron_lm,
            "untestable_goal_pct": UNTESTABLE_GOAL_PCT,
            "rows": [r.to_json() for r in rows],
            "untestable_reasons": reason_summary(rows),
        },
    )


def load(path: Path) -> tuple[dict[str, object], list[MatrixRow]]:
    doc = read_versioned_json(path, MATRIX_KIND, MATRIX_SCHEMA)
    return doc, [MatrixRow.from_json(r) for r in doc["rows"]]
