"""Property-based exploration of offline packed SFT through MB's builder (Hypothesis).

Every ``harness run`` draws a small fixed-seed sample (:data:`DEFAULT_BUDGET` examples, seed 0),
so every commit sees some of it; ``harness explore --budget N --seed S`` draws more. A drawn case
that breaks an invariant is shrunk by Hypothesis to a minimal one, and the failure message ends
with the command that replays it; ``harness explore --replay SPEC --save`` keeps it as a
regression case, checked here from then on (``test_saved_explored_case``). What is drawn and
checked: suites/_explore.py.
"""

from __future__ import annotations

import os

import pytest

from harness import paths
from harness.errors import Untestable
from harness.oracle.impact import ImpactFailure
from harness.oracle.records import InvariantFailure
from harness.suiterun.contract import Env
from suites import _explore

pytestmark = pytest.mark.import_group("light")

DEFAULT_BUDGET = 4


def _replayable(case: _explore.ExploredCase) -> None:
    """Check ``case``; a failure carries the command that replays it (MB's own exceptions as a
    note, so they stay MB's, with its frame)."""
    replay = f"replay: harness explore --replay '{_explore.to_spec(case)}'"
    try:
        _explore.check(case)
    except (InvariantFailure, AssertionError) as exc:
        violations = getattr(exc, "violations", [])
        text = f"{exc}\n  {replay}"
        if violations:
            raise InvariantFailure(text, violations) from exc
        raise ImpactFailure(text, exc.impact) if isinstance(exc, ImpactFailure) else AssertionError(text) from exc
    except Untestable:
        raise
    except Exception as exc:
        exc.add_note(replay)
        raise


def test_explore_offline_packing():
    """Drawn data shapes and knobs (or the one case ``--replay`` names) hold every invariant."""
    replay = os.environ.get(Env.EXPLORE_REPLAY)
    if replay:
        _replayable(_explore.from_spec(replay))
        return
    from hypothesis import HealthCheck, given, reject, seed, settings
    from hypothesis.errors import Unsatisfiable

    budget = int(os.environ.get(Env.EXPLORE_BUDGET) or DEFAULT_BUDGET)
    explore_seed = int(os.environ.get(Env.EXPLORE_SEED) or 0)

    @seed(explore_seed)
    @settings(
        max_examples=budget,
        report_multiple_bugs=False,  # one (shrunk) failure, the verdict of one case
        database=None,  # nothing written into the user's directory; the seed reproduces a run
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(_explore.cases(eos=os.environ.get(Env.EXPLORE_EOS) == "1"))
    def explore(case: _explore.ExploredCase) -> None:
        try:
            _replayable(case)
        except Untestable:
            reject()  # a knob this era lacks: draw another case, never a verdict on this one

    try:
        explore()
    except Unsatisfiable as exc:
        raise Untestable(f"every drawn case needs what this MB lacks ({budget} drawn): {exc}") from None


SAVED = _explore.saved(paths.fixtures_dir() / "explored")


if SAVED:  # no saved case: no test (an empty parametrisation would read as an untestable case)

    @pytest.mark.parametrize("case", SAVED, ids=[c.id for c in SAVED])
    def test_saved_explored_case(golden, case):
        """An explored case kept as a regression case: invariants, then its golden (change only)."""
        from suites import _oracle

        b = _explore.check(case)
        golden.check({"rows": _oracle.canonical_rows(b.rows)})
