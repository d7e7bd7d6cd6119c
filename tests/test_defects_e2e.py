"""One injected fault, one defect, one bisection (issue 45), on a generated MB history.

The history is the installed MB's sources in a git repository of the test's own, with one commit
injecting a fault (in-batch alignment padding that trains) that breaks cases in three suites.
Two nightlies run on it, at the good commit and at the bad one: the second reads as **one**
defect in the terminal's last block, the Markdown summary and ``compare``, and its automatic
bisection probes that defect's one case and names the injecting commit. A second, unrelated
fault is a second defect.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import faults
from gitrepos import git
from test_bisect_command import build_repo

pytestmark = pytest.mark.slow

HARNESS = [sys.executable, "-m", "harness"]
HISTORY = [
    ("Import Megatron-Bridge sources", None),
    ("Update README", "noise"),
    ("Pad aligned tokens consistently", faults.ALIGNMENT_PAD_LOSS_MASK_ONE),  # the culprit
    ("Bump changelog", "noise"),
]
# suites the fault reaches (each with passing cases beside the broken ones)
SELECTION = ["--suite", "in_batch_packing", "--suite", "direct_sft", "--suite", "forward_cpu"]


def _night(repo: Path, sha: str, work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    git(repo, "checkout", "-q", sha)
    cmd = [*HARNESS, "nightly", "--mb-src", str(repo), "--history", str(work / "history.parquet")]
    cmd += ["--out", str(work / "night"), "--cache-dir", str(work / "cache"), "-q", *SELECTION, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500)


def test_one_injected_fault_is_one_defect_and_one_bisection(tmp_path: Path) -> None:
    mb = build_repo(tmp_path, HISTORY)
    good, bad = mb.shas[0], mb.shas[-1]
    first = _night(mb.path, good, tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    summary = tmp_path / "summary.md"
    second = _night(mb.path, bad, tmp_path, "--auto-bisect", "--repo", str(mb.path), "--summary-md", str(summary))
    assert second.returncode == 1, second.stdout[-3000:] + second.stderr[-3000:]
    out = second.stdout
    block = out[out.index("=" * 30 + " defects ") :]
    assert "defects: 1 (" in block, block
    (line,) = [ln for ln in block.splitlines() if ln.startswith("DEFECT ")]
    assert "padding-never-trains" in line and "3 suites" in line, line
    assert "1 defect(s), one case bisected each" in out, out[-3000:]
    text = summary.read_text()
    assert text.startswith("### harness run: ❌ 1 defect(s) to act on") and text.count("| `D-") == 1, text
    # the bisection probed one case and named the injecting commit
    doc = json.loads((tmp_path / "night" / "bisect" / "bisect.json").read_text())
    found = {c["case_id"]: (c.get("culprit") or {}).get("sha") for c in doc["cases"]}
    culprit = mb.shas[mb.culprit[faults.ALIGNMENT_PAD_LOSS_MASK_ONE.name]]
    assert len(found) == 1 and set(found.values()) == {culprit}
    # the defect's other cases, checked at that culprit and its parent, flip there: one defect still
    (row,) = json.loads((tmp_path / "night" / "bisect" / "defects.json").read_text())["defects"]
    assert row["culprit"] == culprit and len(row["same"]) > 2 and row["split"] == [], row
    assert f"-> {culprit[:12]}" in out and 'id="defect-culprits"' in (tmp_path / "night" / "trend.html").read_text()
    # compare: the two nights' runs, one new defect
    runs = sorted((tmp_path / "night" / "runs").glob("*/results.json"))
    assert len(runs) == 2
    diff = subprocess.run([*HARNESS, "compare", str(runs[0]), str(runs[1])], capture_output=True, text=True)
    assert "new defects (1):" in diff.stdout and "environment differs:" in diff.stdout, diff.stdout
