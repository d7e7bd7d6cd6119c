"""What the helpers of one bisection level may use of its driver.

Why a protocol: :mod:`.confirm` (``--confirm``) and :mod:`.latestart` (cases GOOD cannot run)
drive extra searches through the level's own loop, cache and evidence. Typed against the
concrete driver they formed an import circle with :mod:`.driver`; typed against this, the
driver depends on them and they on nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from harness.bisect.algorithm import Bisection
from harness.bisect.cache import Evaluation
from harness.bisect.evaluator import Evaluator
from harness.bisect.findings import Evidence
from harness.bisect.options import BisectOptions
from harness.bisect.view import CaseView
from harness.repository.gitrepo import GitRepo


class Level(Protocol):
    """One level's driver (:class:`harness.bisect.leveldriver.LevelDriver`) as its helpers see it."""

    opts: BisectOptions
    repo: GitRepo
    commits: list[str]
    index: dict[str, int]  # commit -> its position in ``commits``
    evaluator: Evaluator
    evidence: Evidence
    view: CaseView
    bisection: Bisection | None

    def say(self, text: str) -> None: ...

    def feed(self, sha: str, evaluation: Evaluation) -> None: ...

    def run(self, pick: Callable[[int], list[str]]) -> None: ...

    def picker(self, bisection: Bisection) -> Callable[[int], list[str]]: ...

    def in_progress(self) -> set[str]: ...
