"""The golden assertion of a case: the ``golden`` fixture and its :class:`GoldenChecker`.

Why in the suite-running package: the fixture is pytest wiring (the case's item, the outcome a
mismatch becomes: :class:`~harness.suite.outcome.GoldenMismatch` -> CHANGED, or FAIL with a
violation, the running target's provenance); the golden layer next door (:mod:`harness.golden`:
serializer, storage, comparator) does the comparing and imports nothing of the suite process. The
plugin registers the fixture by importing it. The provenance written into obtained goldens is
computed once per process (it asks git for the MB commit), not once per case.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.contract import Flag
from harness.suite.items import case_of, suite_of
from harness.suite.outcome import GoldenMismatch

if TYPE_CHECKING:
    import numpy as np

    from harness.golden.storage import Golden, Review


class GoldenChecker:
    """The ``golden`` fixture: one golden per case, compared with per-field tolerances."""

    def __init__(
        self,
        fixtures_root: Path,
        obtained_root: Path,
        suite: str,
        case: str,
        record: bool,
        provenance: dict[str, object],
    ) -> None:
        self.fixtures_root = fixtures_root
        self.obtained_root = obtained_root
        self.suite = suite
        self.case = case
        self.record = record
        self.provenance = provenance
        self.regen = False  # --harness-regen: a differing or missing golden is rewritten in place
        self.checked = False

    def check(self, value: object, tolerances: dict[str, tuple[float, float]] | None = None) -> None:
        """Compare ``value`` with the golden; raise :class:`GoldenMismatch` with a diff."""
        __tracebackhide__ = True  # pytest shows the case's line and the diff, not this method
        # numpy and the golden modules load here, not with the plugin: it is loaded by every pytest
        from harness.golden.serializer import encode
        from harness.golden.storage import Golden, golden_path, read_golden, write_golden, write_review
        from harness.suite.compare import Comparator, Tolerance

        if self.checked:
            raise RuntimeError("one golden check per case: put everything in one dict")
        self.checked = True
        tols = {k: Tolerance(*v) for k, v in (tolerances or {}).items()}
        sidecar: dict[str, np.ndarray] = {}
        encoded = encode(value, sidecar)
        obtained = Golden(self.suite, self.case, encoded, sidecar, tols, self.provenance)
        path = golden_path(self.fixtures_root, self.suite, self.case)
        if self.record:
            staged = golden_path(self.obtained_root, self.suite, self.case)
            write_golden(staged, obtained)
            write_review(staged, review(path, obtained))
            return
        if not path.exists() and self.regen:
            write_golden(path, obtained)
            raise GoldenMismatch(f"new golden written (--harness-regen): {path}", None)
        if not path.exists():
            out = golden_path(self.obtained_root, self.suite, self.case)
            write_golden(out, obtained)
            raise GoldenMismatch(
                f"no golden at {path}; obtained value written to {out}; "
                "review and accept it with `harness fixtures record`",
                None,
            )
        golden = read_golden(path)
        merged = {**golden.tolerances, **tols}
        result = Comparator(merged).compare(golden.value, encoded, golden.sidecar, sidecar)
        if not result.ok:
            if self.regen:
                write_golden(path, obtained)
                raise GoldenMismatch(f"golden regenerated (--harness-regen): {path}\n{result.text()}", result.to_json())
            out = golden_path(self.obtained_root, self.suite, self.case)
            write_golden(out, obtained)
            raise GoldenMismatch(f"golden mismatch ({path}):\n{result.text()}", result.to_json())


def review(path: Path, obtained: Golden) -> Review:
    """What ``obtained`` is to the golden at ``path``, for ``harness fixtures record`` to show:
    new, unreadable, changed (with the diff and what the change does to what trains) or the same.
    Compared with the golden's own tolerances, as the recorded value will be."""
    from harness.errors import CorruptFile
    from harness.golden import training as training_terms
    from harness.golden.storage import Review, ReviewStatus, read_golden
    from harness.suite.compare import Comparator

    if not path.exists():
        return Review(ReviewStatus.NEW)
    try:
        old = read_golden(path)
    except CorruptFile as exc:
        return Review(ReviewStatus.REPLACE, str(exc))
    cmp = Comparator(old.tolerances).compare(old.value, obtained.value, old.sidecar, obtained.sidecar)
    if cmp.ok:
        return Review(ReviewStatus.SAME)
    means = training_terms.between(
        {**old.value, **old.sidecar} if isinstance(old.value, dict) else old.value,
        {**obtained.value, **obtained.sidecar} if isinstance(obtained.value, dict) else obtained.value,
    )
    return Review(ReviewStatus.CHANGED, cmp.text(), tuple(means))


def _root(config: pytest.Config, opt: str, default: Path) -> Path:
    value = config.getoption(opt)
    return Path(value) if value else default


def fixtures_root(config: pytest.Config) -> Path:
    from harness import paths

    return _root(config, Flag.FIXTURES, paths.fixtures_dir())


def obtained_root(config: pytest.Config) -> Path:
    from harness import paths

    return _root(config, Flag.OBTAINED, paths.reports_dir() / "obtained")


@functools.cache
def _provenance() -> dict[str, object]:
    """What produced the values of this process (MB version and commit, torch, ...): one git
    query per process, the same for every golden it writes."""
    from harness.target import describe_running_target

    return describe_running_target()


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """Compare a case's obtained value to its golden file (see :class:`GoldenChecker`)."""
    config = request.config
    checker = GoldenChecker(
        fixtures_root(config),
        obtained_root(config),
        suite_of(request.node),
        case_of(request.node),
        bool(config.getoption(Flag.RECORD)),
        _provenance(),
    )
    checker.regen = bool(config.getoption(Flag.REGEN))
    return checker
