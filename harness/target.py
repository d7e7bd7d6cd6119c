"""What Megatron-Bridge a run tests, and how to describe it.

A target is either the MB importable in the environment (the default) or a source tree given
with ``--mb-src`` (an MB checkout's ``src/``, or a tree the bisect driver materialised), put
first on the subprocess's ``PYTHONPATH``. Identity is read without importing MB (its package
``__init__`` costs ~20 s): version from ``package_info.py``, commit from git
(:func:`harness.versions.tree_commit`) or from the ``HARNESS_TARGET_COMMIT`` variable the bisect
driver sets.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

import harness
from harness.contract import KNOBS_LOG, VERSIONS_FILE, Env
from harness.errors import EnvironmentProblem, UsageError
from harness.owners import ENV_ROOTS, ENV_VARYING, encode_roots
from harness.paths import ROOT, SITE_DIR, mb_location, suites_dir
from harness.versions import _dist_version, mb_version


@dataclass(frozen=True)
class Target:
    """The MB under test: ``src`` None means the installed one."""

    src: Path | None = None
    commit: str | None = None
    core: Path | None = None  # a tree holding megatron/core pinned by the MB commit (harness.repository.pins)
    core_pin: str | None = None  # the Megatron-LM commit of ``core``
    # ``core`` is what a bisection varies with MB held fixed (its second level): a megatron-core
    # that does not import with this MB is a mismatch, untestable (harness.suite.adapters.failures)
    core_varies: bool = False
    # the git repository the commit belongs to: known-bug ``commits`` ranges resolve by ancestry in
    # it (harness.suite.known.git_in_range), so triaged bugs are known on every commit, not only releases
    repo: Path | None = None

    @classmethod
    def from_args(cls, mb_src: str | None, commit: str | None = None) -> Target:
        if mb_src is None:
            return cls()
        src = Path(mb_src).expanduser().resolve()
        if (src / "src" / "megatron" / "bridge").is_dir():
            src = src / "src"  # accept the checkout root too
        if not (src / "megatron" / "bridge").is_dir():
            raise UsageError(
                f"--mb-src {mb_src}: no megatron/bridge package under it (give an MB checkout or its src/)"
            )
        from harness.versions import tree_commit

        commit = commit or tree_commit(src)
        return cls(src, commit, repo=_repo_root(src) if commit else None)

    def pythonpath(self, extra: list[str] | None = None) -> str:
        """PYTHONPATH for a subprocess: target source, stand-ins, the harness itself and the
        parent of its suites package (``import suites``: the checkout, or the wheel's data)."""
        parts = ([str(self.src)] if self.src else []) + ([str(self.core)] if self.core else [])
        suites_parent = str(suites_dir().parent)
        parts += [str(SITE_DIR), str(ROOT)] + ([suites_parent] if suites_parent != str(ROOT) else []) + (extra or [])
        old = os.environ.get("PYTHONPATH")
        return os.pathsep.join(parts + ([old] if old else []))

    def megatron_roots(self) -> list[Path]:
        """Where the code under test lives (blame, see :mod:`harness.suite.ownership`): the MB package
        tree, and the pinned Megatron-LM tree when there is one."""
        mb = self.src / "megatron" / "bridge" if self.src else mb_location()
        return ([mb] if mb else []) + ([self.core / "megatron"] if self.core else [])

    def env(self, standins_log: Path | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = self.pythonpath()
        env[ENV_ROOTS] = encode_roots(self.megatron_roots())
        if self.core_varies and self.core:
            env[ENV_VARYING] = encode_roots([self.core / "megatron"])
        else:
            env.pop(ENV_VARYING, None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # never write __pycache__ into a user's checkout
        if self.commit:
            env[Env.TARGET_COMMIT] = self.commit
        if self.core_pin:
            env[Env.CORE_PIN] = self.core_pin
        if self.repo:
            env[Env.MB_REPO] = str(self.repo)
        else:
            env.pop(Env.MB_REPO, None)
        if standins_log:
            env[Env.STANDINS_LOG] = str(standins_log)
            env[Env.VERSIONS_FILE] = str(standins_log.parent / VERSIONS_FILE)
            env[Env.KNOBS_LOG] = str(standins_log.parent / KNOBS_LOG)
        return env


def _repo_root(path: Path) -> Path | None:
    """The top of the git work tree holding ``path`` (None outside one)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def describe_running_target() -> dict[str, object]:
    """Provenance of values produced in this process (goes into goldens)."""
    from harness.versions import tree_commit

    loc = mb_location()
    return {
        "mb_version": mb_version(loc),
        "mb_commit": os.environ.get(Env.TARGET_COMMIT) or (tree_commit(loc) if loc else None),
        "torch": _dist_version("torch"),
        "megatron_core": (
            f"Megatron-LM {os.environ[Env.CORE_PIN]}"
            if os.environ.get(Env.CORE_PIN)
            else _dist_version("megatron-core")
        ),
        "harness": harness.__version__,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def require_mb(target: Target) -> None:
    """Fail early, in one line, when no MB is importable for this target."""
    if target.src is None and mb_location() is None:
        raise EnvironmentProblem(
            "no megatron.bridge importable in this environment; run scripts/setup.sh or give --mb-src"
        )
