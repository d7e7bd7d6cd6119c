"""How values look in a report, and the one template environment every page is rendered with.

Why one HTML file with everything inline: reports are attached to CI jobs, mailed and opened
from artefact stores that serve no neighbouring files and may sit behind no network, so a
report must never load a stylesheet, font, script or image from anywhere. The templates carry
a Content-Security-Policy that forbids every external load, so a regression here is caught
by the browser test rather than by a user on a broken page.

Templates stay dumb: everything that needs a decision is computed into plain values by the
view modules (:mod:`~harness.report.diffview`, :mod:`~harness.report.pages`,
:mod:`~harness.report.trend`), so it can be tested without parsing HTML. Autoescaping is
always on: case messages and diffs come from a library under test and can contain anything,
including markup.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any

import jinja2

import harness
from harness.contract import split_case_id
from harness.records.atomicio import atomic_write_text
from harness.records.results import CaseResult
from harness.records.verdict import Verdict

TEMPLATE_DIR = Path(__file__).parent / "templates"

#: Longest text shown for an expected/obtained scalar before it is cut.
MAX_VALUE_CHARS = 300
#: Version of the report formats (HTML meta tag, JUnit property); bump on a breaking change.
REPORT_SCHEMA = 1
#: Verdicts in the order reports list them.
VERDICT_ORDER = [v.value for v in Verdict]


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """One shared environment (templates compile once), autoescape forced on for every
    template rather than chosen by file extension."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["short"] = short_sha
    env.filters["secs"] = format_seconds
    env.filters["num"] = format_number
    return env


def render_template(name: str, context: dict[str, object], out_path: Path) -> Path:
    """Render ``name`` with ``context`` and write it atomically to ``out_path``."""
    html = (
        _environment()
        .get_template(name)
        .render(harness_version=harness.__version__, report_schema=REPORT_SCHEMA, **context)
    )
    out_path = Path(out_path)
    atomic_write_text(out_path, html)
    return out_path


def short_sha(sha: object) -> str:
    """First 10 characters of a commit hash: unique in practice, readable in a table."""
    return str(sha or "")[:10]


def format_seconds(value: Any) -> str:
    """Durations as a person reads them: 0.42 s, 12.3 s, 4 min 05 s."""
    try:
        secs = float(value)
    except (TypeError, ValueError):
        return ""
    if math.isnan(secs):
        return ""
    if secs < 10:
        return f"{secs:.2f} s"
    if secs < 120:
        return f"{secs:.1f} s"
    minutes, rest = divmod(round(secs), 60)
    if minutes < 120:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def format_number(value: object) -> str:
    """Errors in a compact, exact-enough form (``3.2e-07``) and ints unchanged."""
    if value is None:
        return ""
    if isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def format_value(value: object) -> str:
    """Short display text of an expected/obtained value (JSON for structures, cut if long)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + "…"
    return text


def case_name(case: CaseResult) -> str:
    """The case part of ``<suite>::<case>`` (the whole id when it has no suite prefix)."""
    prefix = f"{case.suite}::"
    return case.case_id[len(prefix) :] if case.case_id.startswith(prefix) else case.case_id


def anchor(case_id: str) -> str:
    """A stable HTML id for a case (ids in reports must not contain spaces or quotes)."""
    return "case-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", case_id).strip("-")


def case_selector(case_id: str) -> tuple[str, str]:
    """(suite, -k expression) that selects exactly this case with ``harness run``."""
    suite, name = split_case_id(case_id)
    return suite, name.split(".")[-1]
