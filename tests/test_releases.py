"""The golden suites on older MB releases (installed by scripts/setup_releases.sh).

Each release present under .releases/ is run with ``harness run --mb-src`` (0.3.1 through its own
Python 3.11 venv). No case may be ERROR (a harness-side bug); every golden case must pass or be
untestable with a reason, except the real MB behaviour differences listed in
KNOWN_DIFFERENCES (goldens are never changed to hide them; the lead is told about each).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.target import HARNESS_ROOT

REL = HARNESS_ROOT / ".releases"

# (release, case_id) -> why the golden (pinned on MB 0.6.2) legitimately differs there.
# Filled from `harness matrix` / these tests; each entry is a real MB behaviour difference.
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {}

RELEASES = [
    ("0.5.1", [sys.executable], REL / "mb-0.5.1"),
    ("0.4.0", [sys.executable], REL / "mb-0.4.0"),
    ("0.3.1", [str(REL / "venv-0.3.1" / "bin" / "python")], None),
]


def known(release: str) -> dict[str, str]:
    out = {case: why for (rel, case), why in KNOWN_DIFFERENCES.items() if rel == release}
    for (rel, case), why in KNOWN_DIFFERENCES.items():
        if rel == "*":
            out.setdefault(case, why)
    return out


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
    proc = subprocess.run(cmd, cwd=HARNESS_ROOT, capture_output=True, text=True, timeout=3000)
    results = tmp_path / "run" / "results.json"
    assert results.exists(), f"no results ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    doc = json.loads(results.read_text())
    cases = doc.get("cases") or doc.get("data", {}).get("cases") or []
    assert cases, f"no case ran: {proc.stdout[-2000:]}"
    expected_fail = known(release)
    problems = []
    for c in cases:
        verdict, cid = c["verdict"], c["case_id"]
        if verdict == "error":
            problems.append(f"ERROR {cid}: {c['message'][:500]}")
        elif verdict == "untestable" and not c["message"].strip():
            problems.append(f"UNTESTABLE without a reason: {cid}")
        elif verdict == "fail" and cid not in expected_fail:
            problems.append(f"FAIL {cid} (not a known difference): {c['message'][:800]}")
        elif verdict == "pass" and cid in expected_fail:
            problems.append(f"known difference no longer seen (update KNOWN_DIFFERENCES): {cid}")
    assert not problems, "\n".join(problems)
