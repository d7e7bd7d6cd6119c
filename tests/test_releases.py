"""The golden suites on older MB releases (installed by scripts/setup_releases.sh).

Each release present under .releases/ is run with ``harness run --mb-src`` (0.3.1 through its own
Python 3.11 venv). No case may FAIL (a regression nobody reviewed) or be ERROR (a harness-side
bug); a case may pass, be CHANGED (goldens are recorded on 0.6.2: an older release may differ
with every invariant holding), be untestable with a reason, or be a KNOWN_FAIL: a real MB bug of
that release, reviewed in fixtures/known_failures.json (with its MB file and line). A known bug
that no longer shows (FIXED) fails the test: the entry must go.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.paths import ROOT

REL = ROOT / ".releases"

RELEASES = [
    ("0.5.1", [sys.executable], REL / "mb-0.5.1"),
    ("0.4.0", [sys.executable], REL / "mb-0.4.0"),
    ("0.3.1", [str(REL / "venv-0.3.1" / "bin" / "python")], None),
]


@pytest.mark.slow
@pytest.mark.parametrize("release,python,src", RELEASES, ids=[r[0] for r in RELEASES])
def test_release(tmp_path, release, python, src):
    if src is not None and not (src / "megatron" / "bridge").is_dir():
        pytest.skip(f"MB {release} not installed in {src}; run scripts/setup_releases.sh")
    if src is None and not Path(python[0]).exists():
        pytest.skip(f"MB {release} venv missing ({python[0]}); run scripts/setup_releases.sh")
    cmd = [*python, "-m", "harness", "run", "--quiet", "--out", str(tmp_path / "run")]
    if src is not None:
        cmd += ["--mb-src", str(src)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3000)
    results = tmp_path / "run" / "results.json"
    assert results.exists(), f"no results ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    doc = json.loads(results.read_text())
    cases = doc.get("cases") or doc.get("data", {}).get("cases") or []
    assert cases, f"no case ran: {proc.stdout[-2000:]}"
    problems = []
    for c in cases:
        verdict, cid = c["verdict"], c["case_id"]
        if c.get("tier") == "hypothetical":  # inputs no MB producer emits: reported, never failing
            continue
        if verdict in ("error", "fail", "fixed"):
            problems.append(f"{verdict.upper()} {cid}: {c['message'][:800]}")
        elif verdict == "untestable" and not c["message"].strip():
            problems.append(f"UNTESTABLE without a reason: {cid}")
    assert not problems, "\n".join(problems)
