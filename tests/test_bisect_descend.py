"""Descending into Megatron-LM when the culprit is a pin bump: both levels of a bisection.

Fast tests (here): scripted evaluators over small generated histories, a Megatron-LM-like repo
whose commits say which cases their megatron-core breaks and an MB-like repo pinning them
through a real gitlink; they check which culprits are descended, the second level's culprit,
the check of the bump, the cache key of both levels and the record. The end-to-end test with
real MB and megatron-core trees is tests/test_bisect_descend_real.py.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.bisect.document import BisectDoc, PinStatus
from harness.bisect.driver import BisectOptions, run_bisection
from harness.bisect.evaluator import EvalOutcome
from harness.cli import main
from harness.records.verdict import Verdict
from harness.report import render_bisect_report
from harness.report.formatting import anchor
from harness.report.terminal import bisect_summary_lines
from tests.gitrepos import commit_all, git, pin, tree_digest

CASES = ("s::a", "s::b")


def _state(repo: Path, sha: str, path: str) -> dict | None:
    """``path`` of commit ``sha`` as JSON (None when absent), read with plain git (read-only)."""
    out = subprocess.run(["git", "-C", str(repo), "show", f"{sha}:{path}"], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None


def _verdicts(mb_state: dict | None, core_state: dict | None) -> EvalOutcome:
    if mb_state is None or core_state is None:
        return EvalOutcome.of({}, note="cannot run")
    if core_state.get("broken"):
        return EvalOutcome.of(dict.fromkeys(CASES, Verdict.UNTESTABLE), note="megatron-core does not import")
    failing = set(mb_state["fail"]) | set(core_state["fail"])
    return EvalOutcome.of({c: Verdict.FAIL if c in failing else Verdict.PASS for c in CASES})


@dataclass(frozen=True)
class PinnedEvaluator:
    """First level: an MB commit with the megatron-core it pins."""

    mb: Path
    mlm: Path
    calls: Path

    def cache_namespace(self) -> tuple[str, str]:
        return "state-suite", "state-env"

    def __call__(self, sha: str) -> EvalOutcome:
        with open(self.calls, "a") as fh:
            fh.write(f"mb {sha}\n")
        pinned = git(self.mb, "rev-parse", f"{sha}:3rdparty/Megatron-LM")
        return _verdicts(_state(self.mb, sha, "src/state.json"), _state(self.mlm, pinned, "megatron/core/state.json"))


@dataclass(frozen=True)
class HeldEvaluator:
    """Second level: MB held at ``held``, one Megatron-LM commit after another."""

    mb: Path
    mlm: Path
    held: str
    calls: Path

    def cache_namespace(self) -> tuple[str, str]:
        return "state-suite", "state-env"

    def __call__(self, sha: str) -> EvalOutcome:
        with open(self.calls, "a") as fh:
            fh.write(f"mlm {sha}\n")
        return _verdicts(
            _state(self.mb, self.held, "src/state.json"), _state(self.mlm, sha, "megatron/core/state.json")
        )


@dataclass
class Repos:
    mb: Path
    mlm: Path
    mb_shas: list[str]
    mlm_shas: list[str]
    calls: Path

    def digests(self) -> tuple[str, str]:
        return tree_digest(self.mb), tree_digest(self.mlm)

    def run(self, good: int, bad: int, tmp: Path, **kw) -> BisectDoc:
        opts = BisectOptions(
            repo=self.mb,
            good=self.mb_shas[good],
            bad=self.mb_shas[bad],
            cache_dir=tmp / "cache",
            megatron_lm=self.mlm,
            **kw,
        )

        def held(level: BisectOptions) -> HeldEvaluator:
            assert level.mb_at and level.cases and level.repo == self.mlm and level.mb_repo == self.mb
            return HeldEvaluator(self.mb, self.mlm, level.mb_at, self.calls)

        run = run_bisection(
            opts, evaluator=PinnedEvaluator(self.mb, self.mlm, self.calls), progress=None, held_evaluator=held
        )
        return run.doc


def _build(tmp: Path, mlm_history: list[dict], mb_history: list[tuple[str, int, list[str], bool]]) -> Repos:
    """``mlm_history``: per commit what its change does to megatron-core ({"fail": [cases it breaks
    from there on]}, {"broken": True}: this commit's core does not import);
    ``mb_history``: per commit (subject, index of the Megatron-LM commit pinned or -1 for one the
    repository lacks, MB's own failing cases, whether it touches a packing file)."""
    mlm, mb = tmp / "Megatron-LM", tmp / "Megatron-Bridge"
    for repo in (mlm, mb):
        git(tmp, "init", "-q", "-b", "main", str(repo))
    (mlm / "megatron" / "core").mkdir(parents=True)
    mlm_shas = []
    failing: list[str] = []  # a fault stays until the end of the history
    for i, state in enumerate(mlm_history):
        failing += state.get("fail", [])
        core_state = {"fail": failing, "broken": state.get("broken", False), "n": i}
        (mlm / "megatron" / "core" / "state.json").write_text(json.dumps(core_state))
        mlm_shas.append(commit_all(mlm, f"Megatron-LM change {i}", i))
    (mb / "src" / "megatron" / "bridge" / "data" / "packing").mkdir(parents=True)
    (mb / "src" / "megatron" / "bridge" / "__init__.py").write_text("")
    mb_shas = []
    for i, (subject, pinned, fail, packing) in enumerate(mb_history):
        (mb / "src" / "state.json").write_text(json.dumps({"fail": fail, "n": i}))
        if packing:
            (mb / "src" / "megatron" / "bridge" / "data" / "packing" / "algorithms.py").write_text(f"# {i}\n")
        (mb / "README.md").write_text(f"{subject}\n")
        git(mb, "add", "-A")
        pin(mb, mlm_shas[pinned] if pinned >= 0 else "1" * 40)
        mb_shas.append(commit_all(mb, subject, i, add=False))
    calls = tmp / "calls.txt"
    calls.write_text("")
    return Repos(mb, mlm, mb_shas, mlm_shas, calls)


# Megatron-LM: 3 does not import (a skip, probed first), 4 fixes that, 5 breaks s::a
MLM = [{}, {}, {}, {"broken": True}, {}, {"fail": ["s::a"]}, {}]
# MB: 3 pins a commit the Megatron-LM repository lacks (a skip), 5 bumps the pin 1 -> 6
MB = [
    ("Import", 0, [], False),
    ("Bump Megatron-LM (harmless)", 1, [], False),
    ("Docs", 1, [], False),
    ("Pin a commit of a side branch", -1, [], False),
    ("Pin main again", 1, [], False),
    ("Bump Megatron-LM", 6, [], False),
    ("Docs (3)", 6, [], False),
]


def test_a_bump_is_followed_into_megatron_lm_and_its_commit_named(tmp_path: Path) -> None:
    repos = _build(tmp_path, MLM, MB)
    before = repos.digests()
    doc = repos.run(0, 6, tmp_path)
    assert {c.case_id: c.culprit.sha for c in doc.cases if c.culprit} == {"s::a": repos.mb_shas[5]}
    (descent,) = doc.descents
    assert descent.descended and descent.mb_culprit == repos.mb_shas[5] and descent.cases == ["s::a"]
    assert (descent.old_pin, descent.new_pin) == (repos.mlm_shas[1], repos.mlm_shas[6])
    second = descent.doc
    assert second is not None and second.held is not None and second.held.sha == repos.mb_shas[5]
    assert [c.sha for c in second.commits] == repos.mlm_shas[1:], "first-parent from the old pin to the new"
    assert {c.case_id: c.culprit.sha for c in second.cases if c.culprit} == {"s::a": repos.mlm_shas[5]}
    assert second.cases[0].culprit.subject == "Megatron-LM change 5"
    assert set(second.probes[repos.mlm_shas[3]].values()) == {"untestable"}, "a core that does not import: skipped"
    assert repos.mb_shas[3] in doc.probes and set(doc.probes[repos.mb_shas[3]].values()) == {"untestable"}
    assert second.pin_change is not None and second.pin_change.status is PinStatus.CONFIRMED
    assert repos.digests() == before, "both repositories are byte-identical"

    lines = "\n".join(bisect_summary_lines(doc))
    assert f"Megatron-LM behind first bad commit {repos.mb_shas[5][:12]}" in lines
    assert f"first bad commit {repos.mlm_shas[5][:12]}  Megatron-LM change 5" in lines
    assert "confirmed as the cause" in lines and "files under megatron/" in lines
    again = BisectDoc.from_json(json.loads(json.dumps(doc.to_json())))
    assert again == doc

    rows = sqlite3.connect(tmp_path / "cache" / "verdicts.sqlite").execute(
        "SELECT commit_sha, core_commit FROM evaluations"
    )
    keys = set(rows.fetchall())
    assert {(repos.mb_shas[5], repos.mlm_shas[i]) for i in (1, 3, 4, 5, 6)} <= keys, "second level: (MB held, MLM)"
    assert (repos.mb_shas[0], "") in keys, "first level: the MB commit, its pin implied"


def test_rerun_reuses_both_levels_from_the_cache(tmp_path: Path) -> None:
    repos = _build(tmp_path, MLM, MB)
    first = repos.run(0, 6, tmp_path)
    calls = repos.calls.read_text().count("\n")
    again = repos.run(0, 6, tmp_path)
    assert repos.calls.read_text().count("\n") == calls, "nothing evaluated twice"
    assert again.new_evaluations == 0 and again.descents[0].doc.new_evaluations == 0
    assert again.descents[0].doc.cases == first.descents[0].doc.cases


def test_no_descend_stops_at_the_bump(tmp_path: Path) -> None:
    repos = _build(tmp_path, MLM, MB)
    doc = repos.run(0, 6, tmp_path, descend=False)
    assert doc.descents == [] and "mlm " not in repos.calls.read_text()


def test_a_bump_that_also_changes_packing_code_is_listed_not_descended(tmp_path: Path) -> None:
    mb = [*MB[:5], ("Bump Megatron-LM and rework packing", 6, [], True), MB[6]]
    repos = _build(tmp_path, MLM, mb)
    doc = repos.run(0, 6, tmp_path)
    (descent,) = doc.descents
    assert not descent.descended and "packing-related" in descent.reason and descent.doc is None
    assert "mlm " not in repos.calls.read_text()
    assert f"--mb-at {repos.mb_shas[5][:12]}" in "\n".join(bisect_summary_lines(doc))


def test_an_mb_side_cause_in_the_bump_commit_is_not_confirmed_as_the_pin(tmp_path: Path) -> None:
    """The bump commit also breaks s::b in MB itself (outside packing): with MB held there, s::b
    fails with the old pin too, so the Megatron-LM change is confirmed for s::a only."""
    mb = [*MB[:5], ("Bump Megatron-LM, tweak logging", 6, ["s::b"], False), ("Docs (3)", 6, ["s::b"], False)]
    repos = _build(tmp_path, MLM, mb)
    doc = repos.run(0, 6, tmp_path)
    second = doc.descents[0].doc
    assert second is not None and sorted(doc.descents[0].cases) == ["s::a", "s::b"]
    assert [c.case_id for c in second.cases] == ["s::a"] and second.cases[0].culprit.sha == repos.mlm_shas[5]
    assert second.pin_change.status is PinStatus.PARTLY and "s::b" in second.pin_change.detail


def test_a_bump_that_changes_nothing_observable_is_not_confirmed(tmp_path: Path) -> None:
    """The second level run directly (--mb-at) over a bump that changes nothing the cases see."""
    repos = _build(tmp_path, [{}, {}, {}, {}], [("Import", 0, [], False), ("Bump", 3, [], False)])
    before = repos.digests()
    opts = BisectOptions(
        repo=repos.mlm,
        good=repos.mlm_shas[0],
        bad=repos.mlm_shas[3],
        first_parent=True,
        cache_dir=tmp_path / "cache",
        mb_at=repos.mb_shas[1],
        mb_repo=repos.mb,
    )
    run = run_bisection(
        opts, evaluator=HeldEvaluator(repos.mb, repos.mlm, repos.mb_shas[1], repos.calls), progress=None
    )
    assert run.exit_code == 1 and "nothing to bisect" in run.message
    check = run.doc.pin_change
    assert (
        check is not None and check.status is PinStatus.NOT_CONFIRMED and "nothing the selected cases" in check.detail
    )
    assert run.doc.held is not None and run.doc.held.sha == repos.mb_shas[1] and run.doc.held.subject == "Bump"
    assert "not confirmed as the cause" in "\n".join(bisect_summary_lines(run.doc))
    html = render_bisect_report(run.doc, tmp_path / "report.html").read_text()
    assert 'data-status="not_confirmed"' in html and "not confirmed as the cause" in html
    assert repos.digests() == before


def test_report_shows_both_levels(tmp_path: Path) -> None:
    repos = _build(tmp_path, MLM, MB)
    doc = repos.run(0, 6, tmp_path)
    html = render_bisect_report(doc, tmp_path / "report.html").read_text()
    assert 'id="timeline"' in html and 'id="descent-1-timeline"' in html, "a timeline per level"
    assert f'data-mb-culprit="{repos.mb_shas[5]}"' in html and 'data-descended="true"' in html
    mlm_culprit = repos.mlm_shas[5]
    assert html.count(f'class="culprit-group" data-sha="{mlm_culprit}"') == 1, "in the nested culprit table"
    group_id = "descent-1-" + anchor("culprit-" + mlm_culprit)  # its group, ids unique across the levels
    assert f'<section class="cgroup" id="{group_id}" data-sha="{mlm_culprit}">' in html
    assert "Megatron-LM change 5" in html and 'data-status="confirmed"' in html


@pytest.mark.parametrize(
    "args,words",
    [
        (["--no-descend"], "--no-descend only applies with --megatron-lm"),
        (["--mb-at", "HEAD"], "--mb-at needs --mb-repo"),
        (["--mb-repo", "."], "give --mb-at too"),
        (["--mb-at", "HEAD", "--mb-repo", ".", "--mb-held-src", "."], "not both"),
        (["--mb-at", "HEAD", "--mb-repo", ".", "--megatron-lm", "."], "--megatron-lm is for bisecting"),
        (["--mb-at", "HEAD", "--mb-repo", ".", "--confirm"], "--confirm reverts Megatron-Bridge culprits"),
        (["--mlm-ancestry-path"], "--mlm-ancestry-path walks Megatron-LM's history"),
        (["--mb-src", "."], "holds Megatron-Bridge fixed with --mb-held-src PATH"),  # one name, one meaning
    ],
)
def test_cli_refuses_what_cannot_work_in_one_line(tmp_path: Path, capsys, args: list[str], words: str) -> None:
    repos = _build(tmp_path, [{}, {}], [("Import", 0, [], False), ("Bump", 1, [], False)])
    code = main(
        [
            "bisect",
            f"{repos.mlm_shas[0]}..{repos.mlm_shas[1]}",
            "--repo",
            str(repos.mlm),
            *args,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "out").exists()


def test_the_mb_held_is_a_commit_of_mb_repo_or_a_source_tree_named_by_its_content(tmp_path: Path) -> None:
    from harness.bisect.coreeval import hold_mb
    from harness.errors import UsageError

    repos = _build(tmp_path, [{}, {}], [("Import", 0, [], False), ("Bump", 1, [], False)])
    before = repos.digests()
    opts = BisectOptions(repo=repos.mlm, good="x", bad="y", mb_at=repos.mb_shas[1][:10], mb_repo=repos.mb)
    held, src, release = hold_mb(opts, tmp_path / "cache")
    assert (held.sha, held.subject, held.repo) == (repos.mb_shas[1], "Bump", str(repos.mb))
    assert (src / "megatron" / "bridge" / "__init__.py").is_file() and tmp_path / "cache" in src.parents
    release()
    assert not src.exists(), "the private tree of the MB held is removed afterwards"

    tree = BisectOptions(repo=repos.mlm, good="x", bad="y", mb_held_src=repos.mb)  # a checkout: its src/ is taken
    first, src, _ = hold_mb(tree, tmp_path / "cache")
    assert src == (repos.mb / "src").resolve() and first.sha.startswith("tree-") and first.src == str(src)
    (repos.mb / "src" / "megatron" / "bridge" / "extra.py").write_text("X = 1\n")
    second, _, _ = hold_mb(tree, tmp_path / "cache")
    assert second.sha != first.sha, "an edited tree is another MB: its verdicts are cached apart"
    (repos.mb / "src" / "megatron" / "bridge" / "extra.py").unlink()
    assert repos.digests() == before
    with pytest.raises(UsageError, match="no megatron/bridge"):
        hold_mb(BisectOptions(repo=repos.mlm, good="x", bad="y", mb_held_src=tmp_path), tmp_path / "cache")
