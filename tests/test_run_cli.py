"""`harness run` end to end against the real installed Megatron-Bridge (subprocesses)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.paths import ROOT, mb_location
from harness.records.results import RUN_SCHEMA

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(mb_location() is None, reason="no megatron.bridge installed (run scripts/setup.sh)"),
]

FAST = ["--suite", "packed_seq_params", "--suite", "in_batch_packing"]


def harness(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self.diff_cells = 0

    def handle_starttag(self, tag, attrs):
        if "diff-cell" in (dict(attrs).get("class") or ""):
            self.diff_cells += 1

    def handle_data(self, data):
        self.chunks.append(data)


def _html(path: Path) -> _Text:
    p = _Text()
    p.feed(path.read_text())
    return p


def test_run_passes_on_installed_mb(tmp_path):
    proc = harness("run", "--quiet", "--out", str(tmp_path / "r"), *FAST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert doc["kind"] == "harness-run" and doc["schema_version"] == RUN_SCHEMA
    assert doc["versions"]["megatron-bridge"] != "unknown" and doc["versions"]["torch"]
    verdicts = {c["verdict"] for c in doc["cases"]}
    # the installed MB's known bugs (fixtures/known_failures.json) are listed, never failing the run
    assert doc["cases"] and "pass" in verdicts and verdicts <= {"pass", "known-fail"}, verdicts
    assert (tmp_path / "r" / "junit.xml").exists()
    text = " ".join(_html(tmp_path / "r" / "report.html").chunks)
    assert doc["versions"]["megatron-bridge"] in text
    assert "in_batch_packing" in proc.stdout and "total" in proc.stdout
    # the installed MB is recorded by commit or (a release from an index) its release tag, the
    # harness by commit or version; the header shows the CPU the runner described
    prov = doc["provenance"]
    assert (prov["mb_commit"] or prov["mb_ref"]) and (prov["harness_commit"] or prov["harness_version"]), prov
    assert (prov["mb_commit"] or prov["mb_ref"]) in text and "tested: MB " in proc.stdout
    assert doc["machine"]["cpus"] and f"{doc['machine']['cpus']} CPU" in text


def test_changed_golden_fails_with_readable_diff(tmp_path):
    fixtures = tmp_path / "fixtures"
    shutil.copytree(ROOT / "fixtures", fixtures)
    path = next((fixtures / "packed_seq_params").glob("test_offline_sentinel_stripped-*.json"))
    doc = json.loads(path.read_text())
    doc["value"]["cu_seqlens_q"][1] += 1  # a hand edit: the golden now disagrees with MB
    path.write_text(json.dumps(doc))
    proc = harness(
        "run", "--quiet", "--out", str(tmp_path / "r"), "--fixtures", str(fixtures), "--suite", "packed_seq_params"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "golden mismatch" in proc.stdout and "$.cu_seqlens_q" in proc.stdout
    assert "first at index [1]" in proc.stdout
    report = _html(tmp_path / "r" / "report.html")
    assert report.diff_cells >= 2, "the differing position is highlighted in the HTML diff (golden and obtained rows)"


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "--suite", "nope"], "unknown suite"),
        (["run", "--mb-src", "/nonexistent/mb"], "no megatron/bridge package"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, needle):
    proc = harness(*args, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error:") and needle in lines[0]


def test_corrupt_golden_fails_the_case_not_the_harness(tmp_path):
    fixtures = tmp_path / "fixtures"
    shutil.copytree(ROOT / "fixtures", fixtures)
    path = next((fixtures / "packed_seq_params").glob("*.json"))
    path.write_text("{ this is not json")
    proc = harness(
        "run", "--quiet", "--out", str(tmp_path / "r"), "--fixtures", str(fixtures), "--suite", "packed_seq_params"
    )
    assert proc.returncode == 1
    assert "not valid JSON" in proc.stdout and path.name in proc.stdout
