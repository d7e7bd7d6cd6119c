"""Where the code of a run came from, found by looking: git remotes, pip's record of the
installed MB, the repository MB's package declares; :func:`of_run` builds the
:class:`~harness.records.provenance.Provenance` record a run writes.

Why apart from the record: :mod:`harness.records` sits below everything (records are read by
reports that run nowhere near a checkout); inspecting the world needs git and the target.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import harness
from harness.errors import HarnessError
from harness.records.provenance import Provenance, web_url


def remote_url(checkout: Path | None) -> str:
    """Web address of the ``origin`` remote of the git checkout holding ``checkout``."""
    if checkout is None:
        return ""
    from harness.repository import gitcmd  # GitPython only where a remote is asked for

    try:
        return web_url(gitcmd.text_of(gitcmd.git_in(Path(checkout)), "config", "--get", "remote.origin.url"))
    except (HarnessError, OSError):
        return ""


def _installed_distribution_info() -> tuple[str | None, str]:
    """(commit, source) pip recorded for the installed MB (PEP 610 ``direct_url.json``)."""
    import importlib.metadata as md

    try:
        dist = md.distribution("megatron-bridge")
        raw = dist.read_text("direct_url.json")
    except (md.PackageNotFoundError, OSError):
        return None, ""
    try:
        doc = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        return None, ""
    commit = (doc.get("vcs_info") or {}).get("commit_id")
    if not commit:
        return None, ""
    return str(commit), f"installed from {doc.get('url', 'a repository')} (pip's direct_url.json)"


def declared_repo_url(location: Path | None) -> str:
    """The repository URL MB's ``package_info.py`` declares (read, not imported)."""
    if location is None:
        return ""
    try:
        text = (location / "package_info.py").read_text(encoding="utf-8")
    except OSError:
        return ""
    found = re.search(r"^__repository_url__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return web_url(found.group(1)) if found else ""


def of_run(target: Any, repo_url: str = "") -> Provenance:
    """The provenance of a run against ``target`` (a :class:`harness.target.Target`)."""
    from harness.paths import ROOT, mb_location
    from harness.versions import mb_version, tree_commit

    if target.src is not None:
        location = target.src / "megatron" / "bridge"
        commit, ref, source = target.commit, "", "the --mb-src checkout"
        url = repo_url or remote_url(target.src) or declared_repo_url(location)
    else:
        location = mb_location()
        commit, source = _installed_distribution_info() if location else (None, "")
        ref = ""
        if commit is None and location is not None:
            commit = tree_commit(location)
            source = "the git checkout the installed package lives in" if commit else ""
        if commit is None and location is not None:
            version = mb_version(location)
            ref = f"v{version}" if re.fullmatch(r"\d+\.\d+\.\d+\w*", version) else ""
            source = f"installed release {version} (no commit recorded; linked by its release tag)"
        url = repo_url or (remote_url(location) if commit else "") or declared_repo_url(location)
    harness_commit = tree_commit(ROOT / "harness")
    return Provenance(
        mb_commit=commit,
        mb_ref=ref,
        mb_source=source,
        mb_repo_url=url,
        harness_commit=harness_commit,
        harness_version=harness.__version__,
        harness_repo_url=remote_url(ROOT) if harness_commit else "",
    )
