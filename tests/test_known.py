"""Known MB bugs: a reviewed entry explains a failure only completely, only where the bug exists,
and a listed case that passes again is reported as FIXED (strict), never silently green."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from harness.errors import CorruptFile
from harness.paths import ROOT
from harness.records import known as known_file
from harness.records.verdict import Verdict
from harness.suite import known, knownscope

EOS_MASKED = {"invariant": "loss-mask-equals-unpacked", "tags": ["input:eos", "label:eos"]}
OTHER_MASK = {"invariant": "loss-mask-equals-unpacked", "tags": ["input:pad"]}
PADDING = {"invariant": "padding-never-trains", "tags": ["padding:eod"]}


def entry(**over) -> known_file.KnownFailure:
    doc = {
        "id": "eos-masked",
        "cases": ["offline::*[prompt-*]"],
        "invariants": ["loss-mask-equals-unpacked"],
        "tags": ["input:eos"],
        "mb_versions": ">=0.6.0,<0.7",
        "reason": "packed collate masks EOS inputs",
        "upstream": "data/packing/gpt_sft.py: loss_mask[tokens == eos_id] = 0",
        "impact": "drops-trained-token",
        "fix_mutant": "fix_eos_kept_padding_masked",
    }
    doc.update(over)
    return known_file.KnownFailure.from_json(doc)


def test_a_failure_is_known_only_when_every_violation_is_explained():
    e = entry()
    got = known.against_known_bugs("offline::test[prompt-mult1]", Verdict.FAIL, [EOS_MASKED, EOS_MASKED], [e])
    assert got is not None and got.verdict is Verdict.KNOWN_FAIL and got.entries == ("eos-masked",)
    assert known.against_known_bugs("offline::test[prompt-mult1]", Verdict.FAIL, [EOS_MASKED, OTHER_MASK], [e]) is None
    assert known.against_known_bugs("offline::test[prompt-mult1]", Verdict.FAIL, [EOS_MASKED, PADDING], [e]) is None
    assert known.against_known_bugs("offline::test[chat-mult1]", Verdict.FAIL, [EOS_MASKED], [e]) is None  # not listed
    assert known.against_known_bugs("offline::test[prompt-mult1]", Verdict.FAIL, [], [e]) is None  # MB raised: stands


def test_two_entries_can_explain_one_case_together():
    pad = entry(id="eod-padding-trains", invariants=["padding-never-trains"], tags=["padding:eod"])
    got = known.against_known_bugs("offline::test[prompt-mult4]", Verdict.FAIL, [EOS_MASKED, PADDING], [entry(), pad])
    assert got is not None and got.entries == ("eod-padding-trains", "eos-masked")


def test_a_listed_case_that_passes_is_fixed_and_others_stand():
    got = known.against_known_bugs("offline::test[prompt-mult1]", Verdict.PASS, [], [entry()])
    assert got is not None and got.verdict is Verdict.FIXED and "remove the entry" in got.message
    changed = known.against_known_bugs("offline::test[prompt-mult1]", Verdict.CHANGED, [], [entry()])
    assert changed is not None and changed.verdict is Verdict.FIXED  # invariants hold, only the golden is new
    for verdict in (Verdict.UNTESTABLE, Verdict.ERROR):
        assert known.against_known_bugs("offline::test[prompt-mult1]", verdict, [], [entry()]) is None


def test_a_drawn_case_that_passes_is_never_fixed():
    """An exploration that did not draw a known bug's input says nothing about the bug: its pass
    stands as a pass; a failure the entry explains is still known."""
    listed = entry(cases=["explore::test_explore_layouts"], invariants=["rule"], tags=[], message="ZeroDivisionError")
    case = "explore::test_explore_layouts"
    assert known.against_known_bugs(case, Verdict.PASS, [], [listed], drawn=True) is None
    assert known.against_known_bugs(case, Verdict.CHANGED, [], [listed], drawn=True) is None
    failed = known.against_known_bugs(case, Verdict.FAIL, [], [listed], "crashed: ZeroDivisionError", drawn=True)
    assert failed is not None and failed.verdict is Verdict.KNOWN_FAIL
    assert known.against_known_bugs(case, Verdict.PASS, [], [listed]).verdict is Verdict.FIXED  # type: ignore[union-attr]


def test_where_the_bug_exists_versions_and_commit_ranges():
    e = entry()
    assert e.applies("0.6.2", None) and e.applies("0.6.1rc1", None)
    assert not e.applies("0.5.1", None) and not e.applies("0.7.0", None) and not e.applies(None, None)
    ranged = entry(commits="aaa..bbb", mb_versions=None)
    assert ranged.applies(None, "c1", lambda commit, bad, fixed: True)
    assert not ranged.applies(None, "c1", lambda commit, bad, fixed: False)
    assert not ranged.applies("0.6.2", "c1", None)  # no repository to ask and no versions: does not apply
    both = entry(commits="aaa..bbb")
    assert both.applies("0.6.2", "c1", lambda commit, bad, fixed: None)  # repository cannot tell: versions decide
    assert both.applies("0.6.2", "c1", lambda commit, bad, fixed: False)  # a release tag off the main-line range
    assert both.applies("0.7.0rc0", "c1", lambda commit, bad, fixed: True)  # a commit between releases
    assert not both.applies("0.7.0rc0", "c1", lambda commit, bad, fixed: False)


def test_entries_are_validated_and_a_corrupt_file_is_one_error(tmp_path):
    with pytest.raises(ValueError, match="mb_versions and/or commits"):
        entry(mb_versions=None)
    with pytest.raises(ValueError, match="bad mb_versions"):
        entry(mb_versions="not a spec")
    with pytest.raises(ValueError, match=re.escape("FIRST_BAD..FIRST_FIXED")):
        entry(commits="abc")
    assert known_file.load(tmp_path / "absent.json") == []
    bad = tmp_path / "known_failures.json"
    bad.write_text("{not json")
    with pytest.raises(CorruptFile, match="not a readable known-failures file"):
        known_file.load(bad)
    bad.write_text(json.dumps({"kind": known_file.KIND, "schema_version": 99, "entries": []}))
    with pytest.raises(CorruptFile, match="schema 99"):
        known_file.load(bad)
    good = tmp_path / "ok.json"
    good.write_text(json.dumps(known_file.dump([entry()])))
    assert known_file.load(good) == [entry()]


def test_the_repository_decides_commit_ranges(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    shas = []
    for i in range(4):
        (repo / "f").write_text(str(i))
        subprocess.run(git + ["add", "f"], check=True)
        subprocess.run(git + ["commit", "-qm", f"c{i}"], check=True)
        shas.append(subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    in_range = knownscope.git_in_range(repo)
    assert [in_range(s, shas[1], shas[3]) for s in shas] == [False, True, True, False]
    assert in_range(shas[3], shas[1], None) is True
    assert in_range("f" * 40, shas[1], None) is None  # unknown commit: cannot tell


SUITE = """
from harness.suite.oracle.differential import Invariant, InvariantFailure, Violation

def _fail(*tags_per_violation):
    raise InvariantFailure("broken", [Violation(Invariant.LOSS_MASK, 0, i, 1, 0, "", tags)
                                      for i, tags in enumerate(tags_per_violation)])

def test_known():
    _fail(("input:eos",), ("input:eos", "label:eos"))

def test_known_plus_new():
    _fail(("input:eos",), ("input:pad",))

def test_listed_but_passing():
    pass

def test_not_listed():
    _fail(("input:eos",))
"""


def test_the_plugin_applies_known_failures_to_verdicts(tmp_path):
    suite_dir = tmp_path / "suites"
    suite_dir.mkdir()
    (suite_dir / "test_demo.py").write_text(SUITE)
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    entries = [
        entry(id="eos", cases=["demo::test_known*", "demo::test_listed_but_passing"], mb_versions=">=0"),
        entry(id="never-here", cases=["demo::*"], mb_versions="<0.0.1"),
    ]
    (fixtures / known_file.FILENAME).write_text(json.dumps(known_file.dump(entries)))
    results = tmp_path / "cases.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(suite_dir),
            "-p",
            "harness.suite.plugin",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--harness-results",
            str(results),
            "--harness-fixtures",
            str(fixtures),
            "--harness-obtained",
            str(tmp_path / "obtained"),
        ],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    cases = {c["case_id"].split("::")[1]: c for c in json.loads(results.read_text())["cases"]}
    assert {k: c["verdict"] for k, c in cases.items()} == {
        "test_known": "known-fail",
        "test_known_plus_new": "fail",
        "test_listed_but_passing": "fixed",
        "test_not_listed": "fail",
    }
    assert cases["test_known"]["known"] == ["eos"]
    assert cases["test_known_plus_new"]["violations"][1]["tags"] == ["input:pad"]


def test_a_rule_failure_is_known_only_through_its_message():
    rule = entry(
        id="left-pad-accepted",
        cases=["in_batch::test_left_padding_is_refused"],
        invariants=["rule"],
        tags=[],
        message="DID NOT RAISE",
    )
    got = known.against_known_bugs(
        "in_batch::test_left_padding_is_refused",
        Verdict.FAIL,
        [],
        [rule],
        "assertion failed: DID NOT RAISE <class 'ValueError'>",
    )
    assert got is not None and got.verdict is Verdict.KNOWN_FAIL
    assert (
        known.against_known_bugs(
            "in_batch::test_left_padding_is_refused", Verdict.FAIL, [], [rule], "Megatron raised TypeError: boom"
        )
        is None
    )


def test_several_version_ranges_mean_any_of_them():
    e = entry(mb_versions=["==0.4.0", ">=0.6.0,<0.7"])
    assert e.applies("0.4.0", None) and e.applies("0.6.2", None) and not e.applies("0.5.1", None)
    assert known_file.KnownFailure.from_json(e.to_json()) == e


def test_every_entry_names_its_impact_and_its_fix():
    """Issue 22: an entry is a training defect with a known fix: impact from the closed set, a fix
    mutant of the catalogue (kind fix) or where MB fixed it; nothing harmless is listed."""
    from harness.mutations import load_catalogue
    from harness.records.impact import Impact

    fixes = {f.id for f in load_catalogue() if f.is_fix}
    entries = known_file.load(ROOT / "fixtures" / known_file.FILENAME)
    assert entries
    for e in entries:
        assert Impact(e.impact), e.id
        assert e.fix_mutant or e.fixed_in, e.id
        assert e.fix_mutant is None or e.fix_mutant in fixes, f"{e.id}: {e.fix_mutant} is no fix of the catalogue"
        assert not {"counts-shifted-out-token", "counts-padding", "no-sentinel"} & set(e.tags), (
            f"{e.id}: a causal-tail count or an input no MB producer emits is not a bug"
        )


def test_an_entry_without_impact_or_fix_is_refused_and_schema_1_upgrades(tmp_path):
    with pytest.raises(ValueError, match="unknown impact 'slow'"):
        entry(impact="slow")
    with pytest.raises(ValueError, match="a bug is known by its fix"):
        entry(fix_mutant=None)
    assert entry(fix_mutant=None, fixed_in="0.6.0").fixed_in == "0.6.0"
    old = {k: v for k, v in entry().to_json().items() if k not in ("impact", "fix_mutant")}
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"kind": known_file.KIND, "schema_version": 1, "entries": [old]}))
    (up,) = known_file.load(path)
    assert up.impact == "drops-trained-token" and up.fix_mutant is None


def test_commit_ranges_resolve_through_the_targets_repository(tmp_path):
    """Known bugs resolve on any commit: the target names its repository (HARNESS_MB_REPO), and
    git_in_range answers by ancestry there (issue 22: 'commits' ranges could never match)."""
    from harness.target import Target

    repo = tmp_path / "mb"
    (repo / "src" / "megatron" / "bridge").mkdir(parents=True)
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)  # noqa: E731
    run("init", "-q")
    run("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "one")
    (repo / "src" / "megatron" / "bridge" / "__init__.py").write_text("")
    run("add", ".")
    run("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "two")
    first, second = run("rev-list", "--reverse", "HEAD").stdout.split()
    tgt = Target.from_args(str(repo))
    assert tgt.repo == repo.resolve() and tgt.env()["HARNESS_MB_REPO"] == str(repo.resolve())
    in_range = knownscope.git_in_range(tgt.repo)
    e = entry(mb_versions=None, commits=f"{second}..")
    assert e.applies(None, second, in_range) and not e.applies(None, first, in_range)
    assert "HARNESS_MB_REPO" not in Target().env()
