"""Exploration draws reproducibly, shrinks a failure to a replayable case, and keeps it when saved.

* a spec round-trips to the same case and id; a bad spec is a one-line usage error;
* the same seed draws the same cases (a nightly's exploration can be repeated);
* end to end on the installed MB: with literal EOS allowed in answers, ``harness explore`` finds
  MB 0.6.2's known EOS masking (the exploration's own negative control: it must turn red on a
  real MB bug), prints a minimal case as ``replay:``; the printed reproduce command fails the
  same way; ``--save`` keeps it, and the next ``harness run`` of the suite checks it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from harness.records import explored
from suites import _explore


def test_a_spec_names_one_case_and_round_trips():
    case = _explore.from_spec('{"seed": 3, "kind": "chat", "mult": 4, "seq": 32, "n": 2}')
    again = _explore.from_spec(_explore.to_spec(case))
    assert again == case
    assert case.id == again.id and case.id.startswith("explored-")
    with pytest.raises(ValueError, match="not an explored case spec"):
        _explore.from_spec('{"no_such_field": 1}')
    with pytest.raises(ValueError, match="not a JSON object"):
        explored.parse("[1, 2]")


def test_the_same_seed_draws_the_same_cases():
    from hypothesis import given, seed, settings

    def draw(s: int) -> list[str]:
        out: list[str] = []

        @seed(s)
        @settings(max_examples=6, database=None, deadline=None)
        @given(_explore.cases())
        def collect(case):
            out.append(case.id)

        collect()
        return out

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


def _cli(*argv: str, cwd) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv], cwd=cwd, capture_output=True, text=True, timeout=900, env=clean
    )


@pytest.mark.slow
def test_exploration_finds_a_real_mb_bug_shrinks_replays_and_saves(tmp_path):
    from harness import paths

    fixtures = tmp_path / "fixtures"
    shutil.copytree(paths.fixtures_dir(), fixtures)
    found = _cli("explore", "--eos", "--budget", "20", "--seed", "0", "--fixtures", str(fixtures), "-q", cwd=tmp_path)
    assert found.returncode == 1, found.stdout + found.stderr
    replay = re.search(r"replay: harness explore --replay '([^']*)'", found.stdout)
    assert replay, found.stdout
    spec = explored.parse(replay.group(1))
    assert spec["eos"] is True and spec["n"] <= 3, spec  # shrunk: a handful of examples at most
    assert "loss-mask-equals-unpacked" in found.stdout
    reproduce = re.search(r"reproduce: (harness explore .*)", found.stdout)
    assert reproduce, found.stdout
    again = _cli(*shlex.split(reproduce.group(1))[1:], "--save", cwd=tmp_path)
    assert again.returncode == 1 and "loss-mask-equals-unpacked" in again.stdout, again.stdout + again.stderr
    saved = list((fixtures / "explored").glob("explored-*.json"))
    assert [json.loads(p.read_text())["spec"] for p in saved] == [spec]
    run = _cli("run", "--suite", "explore", "--fixtures", str(fixtures), "-q", cwd=tmp_path)
    assert f"explore::test_saved_explored_case[{saved[0].stem}]" in run.stdout, run.stdout


def test_bad_explore_input_is_a_one_line_usage_error(tmp_path):
    for argv in (("explore", "--budget", "0"), ("explore", "--replay", "{not json"), ("explore", "--save")):
        proc = _cli(*argv, cwd=tmp_path)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.strip().count("\n") == 0, proc.stderr
