"""The answer of a bisection, first: for each culprit, why its cases are red and how to see it.

Why a module: the terminal summary, the bisect page and the nightly's summary show the same
answer: which invariants broke with which training impact, one concrete violation (row,
position, expected, got), the MB frame of a raise, a command that reproduces the failure at
the culprit and the pass at its parent, and links to the commit and the pull request its
subject names. An invariant failure is never called a golden difference.
"""

from __future__ import annotations

import re
import shlex

from harness.bisect.document import BisectDoc, CaseDoc, CulpritGroup
from harness.records.oracle import counts_line
from harness.records.provenance import commit_url
from harness.report.formatting import case_selector

_PR = re.compile(r"\(#(\d+)\)|\bPR #?(\d+)\b|#(\d+)\s*$")

KIND_LABEL = {
    "invariant": "invariant broken",
    "mb-raised": "MB raised",
    "break": "MB broken (import, syntax, hang, crash)",
    "rule": "documented rule",
    "golden": "golden value changed (every invariant held)",
    "failure": "failure",
}


def pr_url(repo_url: str, subject: str) -> str:
    """The pull request a commit subject names (``... (#1234)``, GitHub's squash-merge form)."""
    found = _PR.search(subject or "")
    if not repo_url or not found:
        return ""
    return f"{repo_url}/pull/{next(g for g in found.groups() if g)}"


def reproduce(doc: BisectDoc, sha: str, case_id: str) -> str:
    """A command that runs ``case_id`` at ``sha`` without touching the user's repository (a
    throwaway local clone: it keeps the submodule pins ``--megatron-lm`` reads)."""
    tree = f"/tmp/mb-{sha[:12]}"
    suite, name = case_selector(case_id)
    flags = "".join(f" {shlex.quote(f)}" for f in doc.hint_flags)
    return (
        f"git clone -q --no-checkout {shlex.quote(doc.repo)} {tree} && git -C {tree} checkout -q {sha} && "
        f"harness run --mb-src {tree}{flags} --suite {suite} -k {shlex.quote(name)}"
    )


def _why(cases: list[CaseDoc]) -> str:
    counts: dict[str, int] = {}
    for case in cases:
        for part in filter(None, case.broken.split(", ")):
            name, _, n = part.rpartition(" x")
            counts[name] = counts.get(name, 0) + int(n or 1)
    impacts = sorted({i for c in cases for i in c.impacts})
    if counts:
        what = counts_line(counts)
        return f"{what} [{', '.join(impacts) or 'impact not recorded'}]"
    kinds = sorted({KIND_LABEL[c.kind] for c in cases})
    return "; ".join(kinds) + (f" [{', '.join(impacts)}]" if impacts else "")


def example(case: CaseDoc) -> str:
    """One concrete line: the first violation, else the first line of the message."""
    if case.violation:
        return case.violation
    first = next((ln.strip() for ln in case.golden_diff.splitlines() if ln.strip()), "")
    return first[:300]


def answer(doc: BisectDoc, group: CulpritGroup) -> dict[str, str]:
    """Why a culprit's cases are red, one example, the reproduce commands and links (the page's
    and the terminal's one source)."""
    cul = group.culprit
    shown = next((c for c in group.cases if c.violation), group.cases[0])
    out = {"why": _why(group.cases), "example_case": shown.case_id, "example": example(shown)}
    out["reproduce"] = reproduce(doc, cul.sha, shown.case_id) if doc.held is None and doc.repo else ""
    out["parent"] = reproduce(doc, shown.last_good, shown.case_id) if out["reproduce"] and shown.last_good else ""
    out["link"], out["pull_request"] = commit_url(doc.repo_url, cul.sha), pr_url(doc.repo_url, cul.subject)
    return out


def culprit_lines(doc: BisectDoc, group: CulpritGroup) -> list[str]:
    """The lines under a culprit's header: why, one example, reproduce, links."""
    got = answer(doc, group)
    lines = [f"  why: {got['why']}", f"  e.g. {got['example_case']}: {got['example']}"]
    if got["reproduce"]:
        lines.append(f"  reproduce (fails): {got['reproduce']}")
    if got["parent"]:
        lines.append(f"  parent (passes):   {got['parent']}")
    if got["link"]:
        lines.append(
            f"  link: {got['link']}" + (f"   pull request: {got['pull_request']}" if got["pull_request"] else "")
        )
    return lines
