"""``harness nightly``: history, trend page, exit codes and the automatic bisection.

The command is driven through ``nightly.run(args)`` with the suite runner replaced by
recorded results (one per night), so a night takes milliseconds and its verdicts are chosen
by the test. ``harness bisect`` is a subprocess; ``subprocess.run`` is intercepted for that
one command line (git still runs for real on a small repository made here). One slow test
runs the real ``harness nightly`` on the installed Megatron-Bridge.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

import pytest

from harness.commands import nightly
from harness.errors import CorruptFile, GitError, UsageError
from harness.nightly import history
from harness.paths import ROOT
from harness.records.machine import Machine
from harness.records.results import CaseResult, RunResult
from harness.records.verdict import Verdict
from harness.suiterun import runner

CASES = ("packing_algorithms::first_fit", "packing_algorithms::greedy", "packed_seq_params::cu_seqlens")
BROKEN = "packing_algorithms::greedy"

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    """Arguments exactly as the CLI would build them (only this command is registered)."""
    parser = argparse.ArgumentParser(prog="harness")
    nightly.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["nightly", *argv])


def recorded(verdicts: dict[str, Verdict], version: str = "0.6.2") -> RunResult:
    cases = [
        CaseResult(
            case_id=cid,
            suite=cid.split("::")[0],
            verdict=v,
            duration_s=0.5,
            message="cu_seqlens differ at index 3" if v is Verdict.FAIL else "",
        )
        for cid, v in verdicts.items()
    ]
    return RunResult(
        run_id="",
        target={"kind": "installed", "path": None, "commit": None},
        versions={"megatron-bridge": version},
        machine=Machine(cpus=2),
        import_mode="full",
        cases=cases,
        duration_s=3.0,
    )


def night(broken: tuple[str, ...] = (), untestable: tuple[str, ...] = ()) -> RunResult:
    """One night's verdicts: every case passes unless named."""
    return recorded(
        {
            cid: Verdict.FAIL if cid in broken else Verdict.UNTESTABLE if cid in untestable else Verdict.PASS
            for cid in CASES
        }
    )


class FakeRunner:
    """Stands in for runner.run_suites: hands out the queued results in order, saving each as
    the real runner does (run id = output directory name, results.json inside)."""

    def __init__(self) -> None:
        self.queue: list[RunResult] = []
        self.calls: list[dict[str, Any]] = []

    def __call__(self, tgt, opts, out_dir: Path, progress=None) -> RunResult:
        result = self.queue.pop(0)
        self.calls.append({"target": tgt, "suites": opts.suites, "out_dir": out_dir})
        result.run_id = out_dir.name
        result.started = f"2025-03-{len(self.calls):02d}T02:00:00Z"
        out_dir.mkdir(parents=True, exist_ok=True)
        result.save(out_dir / "results.json")
        return result


class FakeBisect:
    """Intercepts ``python -m harness bisect ...``; every other command (git) runs for real."""

    def __init__(self, real, rc: int = 0, writes_report: bool = True) -> None:
        self.real, self.rc, self.writes_report = real, rc, writes_report
        self.commands: list[list[str]] = []

    def __call__(self, cmd, *args, **kwargs):
        if list(cmd[1:4]) == ["-m", "harness", "bisect"]:
            self.commands.append(list(cmd))
            out_dir = Path(cmd[cmd.index("--out") + 1])
            if self.writes_report:
                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / "report.html").write_text("<html><body>bisect</body></html>")
            return subprocess.CompletedProcess(cmd, self.rc)
        return self.real(cmd, *args, **kwargs)


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    fake = FakeRunner()
    monkeypatch.setattr(runner, "run_suites", fake)
    return fake


@pytest.fixture
def fake_bisect(monkeypatch: pytest.MonkeyPatch) -> FakeBisect:
    fake = FakeBisect(subprocess.run)
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


@pytest.fixture
def mb_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """A small git repository with three commits (oldest first)."""
    repo = tmp_path / "mb"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
    }

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *a], check=True, capture_output=True, text=True, env=env
        ).stdout.strip()

    git("init", "-q")
    shas = []
    for i in range(3):
        (repo / "f.txt").write_text(str(i))
        git("add", "f.txt")
        git("commit", "-q", "-m", f"c{i}")
        shas.append(git("rev-parse", "HEAD"))
    return repo.resolve(), shas


def go(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    rc = nightly.run(parse(argv), out=out)
    return rc, out.getvalue()


class Page(HTMLParser):
    """Elements of an HTML page with their attributes and the ids of their ancestors."""

    VOID: ClassVar[set[str]] = {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
    }

    def __init__(self, text: str) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.elements: list[tuple[str, dict[str, str], set[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a, {x.get("id", "") for _, x in self.stack} - {""}))
        if tag not in self.VOID:
            self.stack.append((tag, a))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def rows(self, table_id: str) -> list[str]:
        return [
            a["data-case-id"] for t, a, anc in self.elements if t == "tr" and table_id in anc and "data-case-id" in a
        ]

    def links(self) -> dict[str, str]:
        """href of each bisect link, keyed by the case of the row it sits in."""
        out, row = {}, None
        for t, a, _ in self.elements:
            if t == "tr":
                row = a.get("data-case-id")
            if t == "a" and "bisect-link" in a.get("class", "").split():
                out[row] = a["href"]
        return out


def auto_bisect_args(tmp_path: Path, repo: Path, out_dir: Path) -> list[str]:
    """The nightly flags of a two-night auto-bisect scenario: one history, one --out, the repo."""
    return ["--history", str(tmp_path / "h.parquet"), "--out", str(out_dir), "--auto-bisect", "--repo", str(repo)]


def trend_page(out_dir: Path) -> Page:
    return Page((out_dir / "trend.html").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------
# History, trend, exit codes
# --------------------------------------------------------------------------------------------


def test_two_nightlies_fill_history_and_trend(tmp_path: Path, fake_runner: FakeRunner) -> None:
    store, out_dir = tmp_path / "h" / "history.parquet", tmp_path / "nightly"
    fake_runner.queue += [night(), night(broken=(BROKEN,)), night()]

    rc, text = go(["--history", str(store), "--out", str(out_dir), "--commit", "aaa111"])
    assert rc == 0
    assert "first run in this history" in text
    assert trend_page(out_dir).rows("newly-failing") == []
    assert (out_dir / "junit.xml").is_file() and (out_dir / "report.html").is_file()

    rc, text = go(["--history", str(store), "--out", str(out_dir), "--commit", "bbb222"])
    assert rc == 1
    assert "newly failing (1):" in text and f"{BROKEN}  (previous nightly: pass)" in text
    df = history.load(store)
    assert len(df) == 2 * len(CASES)
    assert df["run_id"].nunique() == 2, "a reused --out must still give every night its own run id"
    assert sorted(df["commit"].unique()) == ["aaa111", "bbb222"]
    last = df[df["commit"] == "bbb222"].set_index("case_id")["verdict"]
    assert last[BROKEN] == "fail" and (last.drop(BROKEN) == "pass").all()
    page = trend_page(out_dir)
    assert page.rows("newly-failing") == [BROKEN]
    assert page.links() == {}, "no bisect link without --auto-bisect"
    junit = (out_dir / "junit.xml").read_text()
    assert "<failure" in junit and "greedy" in junit

    rc, text = go(["--history", str(store), "--out", str(out_dir), "--commit", "ccc333"])
    assert rc == 0
    assert "newly fixed (1):" in text and "newly failing: none" in text
    assert trend_page(out_dir).rows("newly-fixed") == [BROKEN]
    assert len(history.load(store)) == 3 * len(CASES)


def test_error_verdict_fails_the_nightly(tmp_path: Path, fake_runner: FakeRunner) -> None:
    fake_runner.queue.append(recorded({CASES[0]: Verdict.PASS, CASES[1]: Verdict.ERROR}))
    rc, _ = go(["--history", str(tmp_path / "h.parquet"), "--out", str(tmp_path / "o")])
    assert rc == 1


def test_installed_mb_is_filed_under_its_version(tmp_path: Path, fake_runner: FakeRunner) -> None:
    fake_runner.queue.append(recorded(dict.fromkeys(CASES, Verdict.PASS), version="0.6.2"))
    rc, text = go(
        ["--history", str(tmp_path / "h.parquet"), "--out", str(tmp_path / "o"), "--suite", "packed_seq_params"]
    )
    assert rc == 0 and "filed under 0.6.2" in text
    assert set(history.load(tmp_path / "h.parquet")["commit"]) == {"0.6.2"}
    assert fake_runner.calls[0]["suites"] == ["packed_seq_params"]
    assert fake_runner.calls[0]["out_dir"].parent == tmp_path / "o" / "runs"


def test_usage_errors_come_before_the_suites(tmp_path: Path, fake_runner: FakeRunner, mb_repo) -> None:
    store = tmp_path / "h.parquet"
    with pytest.raises(UsageError, match="--auto-bisect needs --repo"):
        go(["--history", str(store), "--auto-bisect"])
    with pytest.raises(UsageError, match="only used with --auto-bisect"):
        go(["--history", str(store), "--repo", str(mb_repo[0])])
    with pytest.raises(UsageError, match="unknown suite"):
        go(["--history", str(store), "--suite", "no_such_suite"])
    with pytest.raises(GitError, match="not a git repository"):
        go(["--history", str(store), "--auto-bisect", "--repo", str(tmp_path)])
    store.write_bytes(b"not parquet")
    with pytest.raises(CorruptFile):
        go(["--history", str(store)])
    assert fake_runner.calls == []


# --------------------------------------------------------------------------------------------
# Automatic bisection
# --------------------------------------------------------------------------------------------


def test_auto_bisect_runs_harness_bisect_and_links_it(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo
) -> None:
    repo, (c0, _, c2) = mb_repo
    store, out_dir = tmp_path / "history.parquet", tmp_path / "nightly"
    fake_runner.queue += [night(), night(broken=(BROKEN,))]
    common = ["--history", str(store), "--out", str(out_dir), "--auto-bisect", "--repo", str(repo)]

    rc, text = go(common + ["--commit", c0])
    assert rc == 0 and fake_bisect.commands == []
    assert "auto-bisect: no bisect: no previous nightly in the history" in text

    rc, text = go(common + ["--commit", c2])
    assert rc == 1
    assert fake_bisect.commands == [
        [
            sys.executable,
            "-m",
            "harness",
            "bisect",
            f"{c0}..{c2}",
            "--repo",
            str(repo),
            "--out",
            str(out_dir / "bisect"),
            "--timeout",
            "1800",
            "-j",
            "1",
            "--suite",
            "packing_algorithms",
            "--case",
            BROKEN,
            "--confirm",
        ]
    ], "culprits are confirmed by default in a nightly"
    assert "harness bisect exited 0 (every culprit found)" in text
    page = trend_page(out_dir)
    assert page.rows("newly-failing") == [BROKEN]
    assert page.links() == {BROKEN: "bisect/report.html"}
    assert (out_dir / page.links()[BROKEN]).is_file()


def test_auto_bisect_gives_one_case_per_defect(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo
) -> None:
    """Two cases broken alike (one defect, in two suites) are one bisection target: its quickest
    case; the trend links both to the bisection."""
    repo, (c0, c1, _) = mb_repo
    out_dir = tmp_path / "o"
    tonight = night(broken=("packed_seq_params::cu_seqlens", BROKEN))
    tonight.cases[2].duration_s = 0.1  # packed_seq_params::cu_seqlens: the quickest of the defect
    fake_runner.queue += [night(), tonight]
    common = auto_bisect_args(tmp_path, repo, out_dir)
    go(common + ["--commit", c0])
    rc, text = go(common + ["--commit", f"{c1}-dirty"])  # a modified tree is bisected at its commit
    assert rc == 1
    (cmd,) = fake_bisect.commands
    assert cmd[4] == f"{c0}..{c1}"
    assert cmd[-5:] == ["--suite", "packed_seq_params", "--case", "packed_seq_params::cu_seqlens", "--confirm"]
    assert "2 regression(s) of 1 defect(s), one case bisected each" in text
    assert set(trend_page(out_dir).links()) == {"packed_seq_params::cu_seqlens", BROKEN}


def test_auto_bisect_gives_every_defect_its_case(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo
) -> None:
    """A second, unrelated defect is a second target of the same bisection."""
    repo, (c0, c1, _) = mb_repo
    out_dir = tmp_path / "o"
    tonight = night(broken=("packed_seq_params::cu_seqlens", BROKEN))
    tonight.cases[2].message = "Megatron raised IndexError: list index out of range [at megatron/bridge/x.py:4 in f]"
    fake_runner.queue += [night(), tonight]
    common = auto_bisect_args(tmp_path, repo, out_dir)
    go(common + ["--commit", c0])
    go(common + ["--commit", c1])
    (cmd,) = fake_bisect.commands
    cases = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--case"]
    assert sorted(cases) == sorted(["packed_seq_params::cu_seqlens", BROKEN])
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--suite"] == ["packed_seq_params", "packing_algorithms"]


def test_auto_bisect_links_commits_like_the_night_and_trend_links_each_night_to_its_kept_report(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo
) -> None:
    repo, (c0, c1, _) = mb_repo
    out_dir = tmp_path / "o"
    url = "https://github.com/NVIDIA-NeMo/Megatron-Bridge"
    fake_runner.queue += [night(), night(broken=(BROKEN,))]
    common = auto_bisect_args(tmp_path, repo, out_dir)
    go(common + ["--commit", c0, "--repo-url", url])
    go(common + ["--commit", c1, "--repo-url", url])
    (cmd,) = fake_bisect.commands
    assert cmd[cmd.index("--repo-url") + 1] == url, "the bisect report links commits to the same repository"
    nights = [r["report"] for r in history.trend(history.load(tmp_path / "h.parquet"))["runs"]]
    assert len(nights) == 2 and len(set(nights)) == 2
    for rel in nights:  # each night's own page, kept under runs/<run-id>/, stored relative to the history
        assert rel.startswith("o/runs/") and (tmp_path / rel).is_file(), rel
    shown = [a["href"] for t, a, _ in trend_page(out_dir).elements if t == "a" and "night-report" in a.get("class", "")]
    assert sorted(shown) == sorted(r.removeprefix("o/") for r in nights), "rebased onto the trend page"


def test_nights_under_different_outs_keep_links_to_each_other_and_history_defaults_under_out(
    tmp_path: Path, fake_runner: FakeRunner
) -> None:
    """Issue 24: one --out per night with a shared --history linked earlier nights to dead pages;
    and --history defaulted to the current directory's reports/, not under --out."""
    fake_runner.queue += [night(), night(), night()]
    shared = ["--history", str(tmp_path / "h.parquet")]
    go(shared + ["--out", str(tmp_path / "n1"), "--commit", "a" * 40])
    go(shared + ["--out", str(tmp_path / "n2"), "--commit", "b" * 40])
    page = trend_page(tmp_path / "n2")
    hrefs = [a["href"] for t, a, _ in page.elements if t == "a" and "night-report" in a.get("class", "")]
    assert len(hrefs) == 2 and all((tmp_path / "n2" / h).resolve().is_file() for h in hrefs), hrefs
    go(["--out", str(tmp_path / "n3"), "--commit", "c" * 40])
    assert (tmp_path / "n3" / "history.parquet").is_file(), "the history lives under --out by default"


@pytest.mark.parametrize(
    "first_commit, second_commit, expected",
    [
        ("0.6.2", "{c2}", "previous nightly's commit '0.6.2' is not a commit"),  # installed MB: a version
        ("{c2}", "{c2}", "both nightlies tested"),
        ("{c2}", "{c0}", "is not an ancestor"),
    ],
)
def test_auto_bisect_without_a_usable_range_says_why(
    tmp_path: Path,
    fake_runner: FakeRunner,
    fake_bisect: FakeBisect,
    mb_repo,
    first_commit: str,
    second_commit: str,
    expected: str,
) -> None:
    repo, (c0, _, c2) = mb_repo
    out_dir = tmp_path / "o"
    fake_runner.queue += [night(), night(broken=(BROKEN,))]
    common = auto_bisect_args(tmp_path, repo, out_dir)
    go(common + ["--commit", first_commit.format(c0=c0, c2=c2)])
    rc, text = go(common + ["--commit", second_commit.format(c0=c0, c2=c2)])
    assert rc == 1
    assert fake_bisect.commands == []
    (line,) = [ln for ln in text.splitlines() if ln.startswith("auto-bisect:")]
    assert line.startswith("auto-bisect: no bisect:") and expected in line
    assert trend_page(out_dir).rows("newly-failing") == [BROKEN]
    assert trend_page(out_dir).links() == {}


def test_auto_bisect_only_for_cases_that_passed_before(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo
) -> None:
    repo, (c0, _, c2) = mb_repo
    fake_runner.queue += [night(untestable=(BROKEN,)), night(broken=(BROKEN,))]
    common = auto_bisect_args(tmp_path, repo, tmp_path / "o")
    go(common + ["--commit", c0])
    rc, text = go(common + ["--commit", c2])
    assert rc == 1 and fake_bisect.commands == []
    assert f"{BROKEN}  (previous nightly: untestable)" in text
    assert "no bisect: nothing that was green in the previous nightly (pass, changed or fixed) fails" in text


def test_newly_untestable_is_listed_fails_the_night_and_is_bisected(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo
) -> None:
    """A case that ran last night and cannot run tonight lost its coverage: listed in the
    terminal and the trend page, exit 1, bisected with --bisect-untestable."""
    repo, (c0, _, c2) = mb_repo
    out_dir = tmp_path / "o"
    fake_runner.queue += [night(), night(untestable=(BROKEN,))]
    common = auto_bisect_args(tmp_path, repo, out_dir)
    assert go(common + ["--commit", c0])[0] == 0
    rc, text = go(common + ["--commit", c2])
    assert rc == 1, "a newly untestable case fails the nightly"
    assert "newly untestable (1):" in text and f"{BROKEN}  (previous nightly: pass)" in text
    assert "newly failing: none" in text
    (cmd,) = fake_bisect.commands
    assert cmd[4] == f"{c0}..{c2}" and cmd[-2:] == ["--bisect-untestable", "--confirm"]
    page = trend_page(out_dir)
    assert page.rows("newly-untestable") == [BROKEN] and page.rows("newly-failing") == []
    assert page.links() == {BROKEN: "bisect/report.html"}


def test_no_confirm_leaves_the_culprits_unchecked(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo
) -> None:
    repo, (c0, _, c2) = mb_repo
    fake_runner.queue += [night(), night(broken=(BROKEN,))]
    common = [*auto_bisect_args(tmp_path, repo, tmp_path / "o"), "--no-confirm"]
    go(common + ["--commit", c0])
    go(common + ["--commit", c2])
    (cmd,) = fake_bisect.commands
    assert "--confirm" not in cmd and cmd[-4:] == ["--suite", "packing_algorithms", "--case", BROKEN]


def test_auto_bisect_runs_in_the_nightlys_environment(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo, monkeypatch
) -> None:
    """The bisection gets the nightly's --megatron-lm, --timeout, -j and --cache-dir: a bisection
    against another megatron-core or with a shorter time limit can blame the wrong commit."""
    repo, (c0, _, c2) = mb_repo
    mlm = tmp_path / "Megatron-LM"
    pinned = dataclasses.replace(runner.Target(), core=tmp_path / "core", core_pin="f" * 40)
    monkeypatch.setattr(nightly._args, "target_from_args", lambda args, commit=None: pinned)
    fake_runner.queue += [night(), night(broken=(BROKEN,))]
    common = ["--history", str(tmp_path / "h.parquet"), "--out", str(tmp_path / "o"), "--auto-bisect"]
    common += ["--repo", str(repo), "--mb-src", str(repo), "--megatron-lm", str(mlm)]
    common += ["--timeout", "600", "-j", "3", "--cache-dir", str(tmp_path / "cache")]
    go(common + ["--commit", c0])
    go(common + ["--commit", c2])
    (cmd,) = fake_bisect.commands
    flags = cmd[cmd.index("--out") + 2 : cmd.index("--suite")]
    assert flags == ["--timeout", "600", "-j", "3", "--megatron-lm", str(mlm), "--cache-dir", str(tmp_path / "cache")]
    assert fake_runner.calls[0]["target"] is pinned


def test_megatron_lm_without_mb_src_is_a_usage_error(tmp_path: Path, fake_runner: FakeRunner) -> None:
    """It used to be ignored silently: the nightly then tested the installed megatron-core."""
    with pytest.raises(UsageError, match="--megatron-lm needs --mb-src"):
        go(["--history", str(tmp_path / "h.parquet"), "--megatron-lm", str(tmp_path)])
    assert fake_runner.calls == []


def test_untestable_two_nights_running_is_not_new(tmp_path: Path, fake_runner: FakeRunner) -> None:
    fake_runner.queue += [night(untestable=(BROKEN,)), night(untestable=(BROKEN,))]
    common = ["--history", str(tmp_path / "h.parquet"), "--out", str(tmp_path / "o")]
    go(common + ["--commit", "aaa"])
    rc, text = go(common + ["--commit", "bbb"])
    assert rc == 0 and "newly untestable: none" in text


@pytest.mark.parametrize("rc, writes_report, linked", [(1, True, True), (2, False, False)])
def test_auto_bisect_outcome_decides_the_link(
    tmp_path: Path, fake_runner: FakeRunner, monkeypatch, mb_repo, rc: int, writes_report: bool, linked: bool
) -> None:
    fake = FakeBisect(subprocess.run, rc=rc, writes_report=writes_report)
    monkeypatch.setattr(subprocess, "run", fake)
    repo, (c0, _, c2) = mb_repo
    out_dir = tmp_path / "o"
    (out_dir / "bisect").mkdir(parents=True)
    (out_dir / "bisect" / "report.html").write_text("stale report of an earlier night")
    fake_runner.queue += [night(), night(broken=(BROKEN,))]
    common = auto_bisect_args(tmp_path, repo, out_dir)
    go(common + ["--commit", c0])
    code, text = go(common + ["--commit", c2])
    assert code == 1 and len(fake.commands) == 1
    assert f"harness bisect exited {rc}" in text
    assert trend_page(out_dir).links() == ({BROKEN: "bisect/report.html"} if linked else {})


# --------------------------------------------------------------------------------------------
# End to end on the installed Megatron-Bridge
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_nightly_end_to_end_on_installed_mb(tmp_path: Path) -> None:
    store, out_dir = tmp_path / "history.parquet", tmp_path / "nightly"
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "nightly",
        "--suite",
        "packed_seq_params",
        "--history",
        str(store),
        "--out",
        str(out_dir),
        "--quiet",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "first run in this history" in proc.stdout
    df = history.load(store)
    assert len(df) > 0 and set(df["suite"]) == {"packed_seq_params"} and set(df["verdict"]) <= {"pass", "known-fail"}
    assert df["commit"].nunique() == 1 and df["commit"].iloc[0][0].isdigit()  # the installed MB's version
    page = trend_page(out_dir)
    assert len(page.rows("trend-grid")) == len(df)
    assert (out_dir / "junit.xml").is_file() and (out_dir / "report.html").is_file()
    assert len(list((out_dir / "runs").glob("*/results.json"))) == 1


def test_a_case_gone_from_tonights_run_is_newly_failing(tmp_path: Path, fake_runner: FakeRunner) -> None:
    """Issue 23: a suite that stops collecting removes its cases; the nightly saw nothing. A case
    that was decided last night and is missing tonight is listed as newly failing and fails it."""
    gone = CASES[-1]
    tonight = night()
    tonight.cases = [c for c in tonight.cases if c.case_id != gone]
    fake_runner.queue += [night(), tonight]
    common = ["--history", str(tmp_path / "h.parquet"), "--out", str(tmp_path / "o")]
    assert go(common + ["--commit", "c0"])[0] == 0
    rc, text = go(common + ["--commit", "c1"])
    assert rc == 1, text
    assert "newly failing (1):" in text and f"{gone}  (previous nightly: pass) (gone: not in tonight's run)" in text


def test_changed_last_night_and_failing_tonight_is_bisected(
    tmp_path: Path, fake_runner: FakeRunner, fake_bisect: FakeBisect, mb_repo
) -> None:
    """Issue 24: night 1 changed (every invariant held), night 2 fail: listed as newly failing but
    never bisected, while harness bisect itself treats changed at GOOD as good."""
    repo, (c0, _, c2) = mb_repo
    first = night()
    for c in first.cases:
        if c.case_id == BROKEN:
            c.verdict = Verdict.CHANGED
    fake_runner.queue += [first, night(broken=(BROKEN,))]
    common = auto_bisect_args(tmp_path, repo, tmp_path / "o")
    go(common + ["--commit", c0])
    rc, text = go(common + ["--commit", c2])
    assert rc == 1 and f"{BROKEN}  (previous nightly: changed)" in text
    (cmd,) = fake_bisect.commands
    assert cmd[4] == f"{c0}..{c2}"


def test_summary_md_gives_the_night_and_what_changed(tmp_path: Path, fake_runner: FakeRunner) -> None:
    fake_runner.queue += [night(), night(broken=(BROKEN,))]
    md = tmp_path / "summary.md"
    common = ["--history", str(tmp_path / "h.parquet"), "--out", str(tmp_path / "o"), "--summary-md", str(md)]
    go(common + ["--commit", "c0"])
    assert "First run in this history" in md.read_text()
    go(common + ["--commit", "c1"])
    text = md.read_text()
    assert text.startswith("### harness run: ❌ 1 defect(s) to act on")
    assert f"- newly failing: `{BROKEN}` (pass → fail)" in text
