"""The rendered reports in a real browser: no console errors, no request leaves the machine.

Why a browser and not only the HTML parser: the parser cannot tell that an inline script
throws, that the Content-Security-Policy blocks something we rely on, or that a CSS rule
makes the page unreadable. Headless Chromium runs with DNS resolution disabled and a
NetLog, so any request the page makes is recorded (and fails) instead of leaking. Console
messages are read from Chromium's stderr log. A canary page with a deliberate console
error and an external stylesheet proves both detectors work, so a green run means
"nothing found", not "nothing looked".

Screenshots land in ``reports/screenshots/<name>.png`` for a person to look at.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.bisect.document import BisectDoc
from harness.nightly import history
from harness.nightly.history import write_trend_page
from harness.report import render_bisect_report, render_run_report

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parent.parent
SCREENSHOTS = REPO / "reports" / "screenshots"
TIMEOUT_S = 90

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (apt-get install chromium)")

_CONSOLE = re.compile(r":CONSOLE(?:\(\d+\))?[:\]]\s*(.*)")
_LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome:", "chrome-untrusted:", "devtools:")


def _samples() -> ModuleType:
    """The recorded results of test_reports.py, loaded by path so any import mode works."""
    path = Path(__file__).with_name("test_reports.py")
    spec = importlib.util.spec_from_file_location("_report_samples", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-extensions",
        "--disable-default-apps",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def page_requests(netlog: Path) -> list[str]:
    """URLs of the network requests made on behalf of a file:// page (browser chatter such as
    update checks carries no file:// isolation key and is ignored)."""
    data = json.loads(netlog.read_text(encoding="utf-8"))
    start_job = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in data.get("events", []):
        params: dict[str, Any] = event.get("params") or {}
        if event.get("type") != start_job or "url" not in params:
            continue
        if "file://" in str(params.get("network_isolation_key", "")) and not params["url"].startswith(_LOCAL_SCHEMES):
            urls.append(params["url"])
    return urls


def load_page(page: Path, work: Path) -> dict[str, Any]:
    """Load ``page`` headless; return its DOM, console messages and external requests."""
    work.mkdir(parents=True, exist_ok=True)
    netlog = work / f"{page.stem}.netlog.json"
    proc = _chromium(work / "profile", f"--log-net-log={netlog}", "--dump-dom", page.resolve().as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [m.group(1) for line in proc.stderr.splitlines() if (m := _CONSOLE.search(line))]
    return {"dom": proc.stdout, "console": console, "requests": page_requests(netlog)}


def screenshot(page: Path, name: str, work: Path) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    out = SCREENSHOTS / f"{name}.png"
    proc = _chromium(
        work / "profile-shot",
        f"--screenshot={out}",
        "--window-size=1280,2000",
        "--hide-scrollbars",
        page.resolve().as_uri(),
    )
    assert proc.returncode == 0 and out.exists(), proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    samples = _samples()
    d = tmp_path_factory.mktemp("pages")
    store = d / "history.parquet"
    history.append_run(store, samples.sample_run(), "a" * 40)
    history.append_run(store, samples._second_run(), "b" * 40)
    return {
        "run": render_run_report(samples.sample_run(), d / "run.html"),
        "bisect": render_bisect_report(BisectDoc.from_json(samples.sample_bisect()), d / "bisect.html"),
        "trend": write_trend_page(store, d / "trend.html", {"packing::basic": "bisect.html"}),
    }


def test_detectors_catch_console_errors_and_external_requests(tmp_path: Path) -> None:
    canary = tmp_path / "canary.html"
    canary.write_text(
        '<!DOCTYPE html><html><head><link rel="stylesheet" href="https://cdn.invalid/x.css"></head>'
        '<body><script>console.error("canary-error")</script></body></html>',
        encoding="utf-8",
    )
    result = load_page(canary, tmp_path / "work")
    assert any("canary-error" in m for m in result["console"]), result["console"]
    assert result["requests"] == ["https://cdn.invalid/x.css"]


def test_run_report_filter_buttons_hide_other_verdicts(pages: dict[str, Path], tmp_path: Path) -> None:
    """Click the "fail" filter (a script appended to a copy of the page) and read the DOM."""
    clicked = tmp_path / "clicked.html"
    html = pages["run"].read_text(encoding="utf-8")
    click = "<script>document.querySelector('.filters button[data-filter=\"fail\"]').click();</script>"
    clicked.write_text(html.replace("</body>", click + "</body>"), encoding="utf-8")
    result = load_page(clicked, tmp_path / "work")
    assert result["console"] == [], result["console"]
    dom = tmp_path / "dom.html"
    dom.write_text(result["dom"], encoding="utf-8")
    rows = _samples().parse_html(dom).find_all("tr", cls="case-row")
    shown = {r.attrs["data-verdict"] for r in rows if "hidden" not in r.classes}
    hidden = {r.attrs["data-verdict"] for r in rows if "hidden" in r.classes}
    assert shown == {"fail"} and hidden == {"pass", "untestable", "error"}


@pytest.mark.parametrize("name", ["run", "bisect", "trend"])
def test_report_is_quiet_and_self_contained_in_a_browser(name: str, pages: dict[str, Path], tmp_path: Path) -> None:
    result = load_page(pages[name], tmp_path / "work")
    assert result["console"] == [], f"{name}: console output {result['console']}"
    assert result["requests"] == [], f"{name}: external requests {result['requests']}"
    assert "<footer>" in result["dom"] and "harness-report-kind" in result["dom"]
    shot = screenshot(pages[name], name, tmp_path / "work")
    assert shot.stat().st_size > 10_000  # a blank page compresses to a few hundred bytes
