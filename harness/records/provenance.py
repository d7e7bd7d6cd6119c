"""Where the code of a run came from, and the web addresses its commits link to.

Every run records the Megatron-Bridge commit it tested and the harness's own commit
(:class:`Provenance`, in ``results.json``), the installed MB included:

* MB from ``--mb-src``: the checkout's commit (the target's, ``-dirty`` when modified);
* the installed MB: the commit pip recorded when it was installed from git
  (``direct_url.json``, PEP 610), else the commit of the git checkout it lives in (an editable
  install), else none is knowable offline: a release from a package index is recorded as its
  release tag (``v0.6.2``), which is what the report links to;
* the harness: the commit of its checkout (``-dirty`` when modified), else (an installed wheel)
  its package version.

Web links (:func:`web_url`, :func:`commit_url`): ``--repo-url`` when given, else the ``origin``
remote of the MB checkout (``--mb-src`` / ``--repo``), else the repository URL MB's package
declares. Only ``https://`` pages of a host are produced: a remote that is a local path or an
unknown scheme gives no link (a report is opened from anywhere, and a ``file:`` or
``javascript:`` address in it would be wrong or unsafe).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from harness.errors import UsageError
from harness.records.atomicio import record_from
from harness.records.commit import clean_sha

_SCP_LIKE = re.compile(r"^(?:[\w.-]+@)?([\w.-]+\.[a-z]{2,}):(?!//)(.+)$", re.I)  # git@github.com:owner/repo.git
_URL = re.compile(r"^(?:https?|ssh|git|git\+ssh|git\+https)://(?:[^@/]+@)?([^/:]+)(?::\d+)?/(.+)$", re.I)


@dataclass(frozen=True)
class Provenance:
    """The code a run ran: MB's commit (or release tag) and the harness's."""

    mb_commit: str | None = None  # full sha, "-dirty" when the checkout was modified
    mb_ref: str = ""  # a release tag when no commit is known (an installed release)
    mb_source: str = ""  # how the MB commit or tag was found, in words
    mb_repo_url: str = ""  # the web repository its links go to ("" = no link)
    harness_commit: str | None = None
    harness_version: str = ""
    harness_repo_url: str = ""

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, object] | None) -> Provenance:
        """Lenient: a results.json written before provenance was recorded has none."""
        return record_from(cls, doc)


# ------------------------------------------------------------------------------ web links


def web_url(remote: str | None) -> str:
    """``https://HOST/OWNER/REPO`` for a git remote or web address ("" when it is none:
    a local path, ``file:``, an unknown scheme)."""
    text = (remote or "").strip()
    if not text:
        return ""
    match = _URL.match(text) or _SCP_LIKE.match(text)
    if not match:
        return ""
    host, path = match.group(1), match.group(2).strip("/")
    path = path[:-4] if path.endswith(".git") else path
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        return ""
    return f"https://{host}/{path}"


def commit_url(repo_url: str, sha: str | None) -> str:
    """Address of a commit's page ("" when there is no repository or no full commit)."""
    clean = clean_sha(sha) or ""
    if not repo_url or not re.fullmatch(r"[0-9a-f]{7,40}", clean):
        return ""
    return f"{repo_url}/commit/{clean}"


def ref_url(repo_url: str, ref: str) -> str:
    """Address of a tag's (or branch's) tree."""
    return f"{repo_url}/tree/{ref}" if repo_url and ref else ""


def add_repo_url_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--repo-url",
        metavar="URL",
        help="web address of the Megatron-Bridge repository commits link to in the reports "
        "(default: the checkout's origin remote, else the address MB's package declares)",
    )


def checked_repo_url(given: str | None) -> str:
    """``--repo-url`` as a link base; a value that is no web repository is a usage error."""
    if not given:
        return ""
    url = web_url(given)
    if not url:
        raise UsageError(f"--repo-url {given!r} is not the web address of a repository (https://HOST/OWNER/REPO)")
    return url
