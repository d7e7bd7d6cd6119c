"""``harness bisect --confirm`` on generated histories with a scripted evaluator (no MB).

Each case ``s::x`` reads ``x.txt`` (and ``x2.txt`` when present) of the commit's tree: "bad..."
in either makes it FAIL with the message "x is bad: <the first bad text>", no ``x.txt`` makes it
untestable. The
evaluator runs a reverted tree the same way, so confirmed / not confirmed / not checkable are
decided by real ``git apply -R`` on real diffs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.bisect.document import BisectDoc, ConfirmStatus
from harness.bisect.driver import BisectOptions, run_bisection, workspace_dir_for
from harness.bisect.evaluator import EvalOutcome
from harness.records.verdict import Verdict
from harness.report.terminal import bisect_summary_lines
from harness.repository.gitrepo import open_repo
from harness.repository.workspaces import WorkspaceCache
from tests.gitrepos import git

CASES = ("s::a", "s::b", "s::c")
PKG = Path("src") / "megatron" / "bridge"


def build(root: Path, steps: list[dict[str, str]]) -> tuple[Path, list[str]]:
    """One commit per step: file name -> new content under src/megatron/bridge (README otherwise)."""
    repo = root / "repo"
    (repo / PKG).mkdir(parents=True)
    git(root, "init", "-q", "-b", "main", str(repo))
    shas = []
    for i, step in enumerate(steps):
        for name, text in step.items():
            (repo / PKG / name).write_text(text + "\n")
        (repo / "README").write_text(f"rev {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas


def verdicts_of(src: Path) -> EvalOutcome:
    pkg = src / "megatron" / "bridge"
    verdicts, messages = {}, {}
    for case in CASES:
        name = case.split("::")[1]
        texts = [(pkg / f"{name}{k}.txt").read_text() for k in ("", "2") if (pkg / f"{name}{k}.txt").exists()]
        if not (pkg / f"{name}.txt").exists():
            verdicts[case], messages[case] = Verdict.UNTESTABLE, f"no {name}.txt"
        elif any(t.startswith("bad") for t in texts):
            first = next(t for t in texts if t.startswith("bad")).strip()
            verdicts[case], messages[case] = Verdict.FAIL, f"{name} is bad: {first}"
        else:
            verdicts[case] = Verdict.PASS
    return EvalOutcome.of(verdicts, messages)


@dataclass(frozen=True)
class FileEvaluator:
    repo: Path
    workspace_dir: Path
    log: Path  # one line per tree run with the culprit reverted

    def cache_namespace(self) -> tuple[str, str]:
        return "files", "env"

    def __call__(self, sha: str) -> EvalOutcome:
        return verdicts_of(WorkspaceCache(self.workspace_dir, self.repo).materialize(sha) / "src")

    def evaluate_tree(self, src: Path, label: str, pin_of: str, suites=None) -> EvalOutcome:
        with open(self.log, "a") as fh:
            fh.write(json.dumps({"label": label, "suites": suites, "pin_of": pin_of}) + "\n")
        return verdicts_of(src)


OK = {"a.txt": "ok", "b.txt": "ok", "c.txt": "ok"}


def _bisect(tmp_path: Path, steps: list[dict[str, str]], **kw):
    repo, shas = build(tmp_path, steps)
    cache = tmp_path / "cache"
    ev = FileEvaluator(repo, workspace_dir_for(cache, open_repo(repo)), tmp_path / "trees.log")
    run = run_bisection(
        BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=cache, confirm=True, **kw),
        evaluator=ev,
        progress=None,
    )
    return run, shas, repo


def test_confirm_gives_confirmed_not_confirmed_and_not_checkable(tmp_path: Path) -> None:
    steps = [
        OK,
        {},
        {},
        {},
        {"a.txt": "bad"},  # 4: a breaks; reverting it on BAD fixes a
        {},
        {"b.txt": "bad 1"},
        {"b.txt": "bad 2"},  # 6: b breaks, 7 changes the same line again
        {"c.txt": "bad"},
        {"c2.txt": "bad"},
        {},
    ]  # 8: c breaks, 9 breaks it another way too
    run, shas, repo = _bisect(tmp_path, steps)
    before = git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")
    found = {c.case_id: c.culprit.sha for c in run.doc.cases if c.culprit}
    assert found == {"s::a": shas[4], "s::b": shas[6], "s::c": shas[8]}
    checked = {c.culprit: c for c in run.doc.confirmations}
    assert checked[shas[4]].status is ConfirmStatus.CONFIRMED and checked[shas[4]].seen == {"s::a": "pass"}
    assert checked[shas[6]].status is ConfirmStatus.NOT_CHECKABLE
    assert "does not apply" in checked[shas[6]].detail and "b.txt" in checked[shas[6]].detail
    assert checked[shas[8]].status is ConfirmStatus.NOT_CONFIRMED and checked[shas[8]].seen == {"s::c": "same"}
    assert "s::c still fail" in checked[shas[8]].detail and "c is bad" in checked[shas[8]].detail
    runs = [json.loads(line) for line in (tmp_path / "trees.log").read_text().splitlines()]
    assert [r["label"][:20] for r in runs] == [f"confirm-{shas[4][:12]}", f"confirm-{shas[8][:12]}"]
    assert all(r["suites"] == ["s"] and r["pin_of"] == shas[-1] for r in runs)
    lines = "\n".join(bisect_summary_lines(run.doc))
    assert "  confirmed: reverting it on" in lines and "  not confirmed: s::c" in lines and "  not checkable:" in lines
    after = git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")
    assert after == before, "the user's repository is only read"
    assert not any((tmp_path / "cache").rglob("culprit.patch")), "the private workspace is removed"
    assert BisectDoc.from_json(run.doc.to_json()).confirmations == run.doc.confirmations


def test_confirm_counts_a_case_failing_differently_as_changed(tmp_path: Path) -> None:
    """a breaks at 3; at 6 its second file breaks too: reverting 3 on BAD leaves it failing, but
    not as at BAD (another message), so the culprit is confirmed with the case "changed"."""
    steps = [OK, {}, {}, {"a.txt": "bad one"}, {}, {}, {"a2.txt": "bad two"}, {}]
    run, shas, _ = _bisect(tmp_path, steps)
    (check,) = run.doc.confirmations
    assert check.culprit == shas[3] and check.status is ConfirmStatus.CONFIRMED
    assert check.seen == {"s::a": "changed"} and "differently" in check.detail


def test_confirm_without_a_tree_evaluator_is_not_checkable(tmp_path: Path) -> None:
    repo, shas = build(tmp_path, [OK, {}, {"a.txt": "bad"}, {}])
    cache = tmp_path / "cache"

    @dataclass(frozen=True)
    class CommitsOnly:
        inner: FileEvaluator

        def cache_namespace(self) -> tuple[str, str]:
            return self.inner.cache_namespace()

        def __call__(self, sha: str) -> EvalOutcome:
            return self.inner(sha)

    ev = CommitsOnly(FileEvaluator(repo, workspace_dir_for(cache, open_repo(repo)), tmp_path / "log"))
    run = run_bisection(
        BisectOptions(repo=repo, good=shas[0], bad=shas[-1], cache_dir=cache, confirm=True), evaluator=ev, progress=None
    )
    (check,) = run.doc.confirmations
    assert check.status is ConfirmStatus.NOT_CHECKABLE and "cannot run a tree" in check.detail
