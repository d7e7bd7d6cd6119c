"""Property-based exploration of packing through MB's own code (Hypothesis).

Seven spaces: offline packed SFT in a world of one (data shapes and packing knobs, the packed
set read back from one file or several shards; ``test_explore_offline_packing``), the same data
under one drawn parallel layout or packing path (``test_explore_layouts``: MB's forward, DP,
in-batch packing for a (CP, TP, SP) layout, CP and PP worlds), the same data through MB's direct
HF SFT path with its collate knobs (``test_explore_direct_sft``), documents packed into
pretraining samples with their lengths and knobs drawn (``test_explore_pretraining``), and
image/chat samples through MB's Energon VLM data path with its loader knobs
(``test_explore_energon``), and a user's image folder through MB's MegatronMIMO data and step path
with its lengths and module layouts (``test_explore_mimo``), and whole packing configurations
held to MB's documented rules in combination (``test_explore_config``). Every ``harness run`` draws a small
fixed-seed sample of each (:data:`DEFAULT_BUDGET`, :data:`DEFAULT_LAYOUT_BUDGET`,
:data:`DEFAULT_DIRECT_BUDGET`, :data:`DEFAULT_PRETRAIN_BUDGET`, :data:`DEFAULT_ENERGON_BUDGET`,
:data:`DEFAULT_MIMO_BUDGET` and :data:`DEFAULT_CONFIG_BUDGET` examples, seed 0), so every
commit sees some of it; ``harness explore --budget N --seed S`` draws more. A drawn case that
breaks an invariant is shrunk by Hypothesis to a minimal one, and the failure message ends with
the command that replays it; ``harness explore --replay SPEC --save`` keeps it as a regression
case, checked here from then on (``test_saved_explored_case``). What is drawn and checked:
suites/_explore.py (and _explore_direct.py, _explore_pretrain.py, _explore_energon.py, _explore_mimo.py,
_explore_config.py).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from harness import paths
from harness.contract import Env
from harness.errors import Untestable
from harness.records import explored
from harness.records.impact import ImpactFailure
from harness.records.oracle import InvariantFailure
from harness.suite.adapters import needs
from suites import (
    _explore,
    _explore_check,
    _explore_config,
    _explore_direct,
    _explore_energon,
    _explore_mimo,
    _explore_pretrain,
)

pytestmark = pytest.mark.import_group("light")

DEFAULT_BUDGET = 4
DEFAULT_LAYOUT_BUDGET = 3
DEFAULT_DIRECT_BUDGET = 3
DEFAULT_PRETRAIN_BUDGET = 3
DEFAULT_ENERGON_BUDGET = 3
DEFAULT_MIMO_BUDGET = 3
# a validate() is a few milliseconds, and twelve rules each meet every context: a large sample (about 3 s)
DEFAULT_CONFIG_BUDGET = 1000


def _replayable(case: _explore.ExploredCase) -> None:
    """Check ``case``; a failure carries the command that replays it (MB's own exceptions as a
    note, so they stay MB's, with its frame)."""
    replay = f"replay: harness explore --replay '{_explore.to_spec(case)}'"
    try:
        _explore_check.check_any(case)
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


def _explore_space(strategy: Any, default_budget: int, known_bug: Any) -> None:
    """Draw ``strategy``'s cases (or run the one ``--replay`` names) and check each.

    A drawn case that fails only by a known MB bug (``known_bug``) does not end the search: it is
    set aside and the drawing goes on, so a known bug cannot hide a new one. A new failure is
    shrunk and raised (naming the known bugs met on the way); with none in the budget, the first
    known failure is raised, so the verdict is the known bug's, as for any listed case.
    """
    replay = os.environ.get(Env.EXPLORE_REPLAY)
    if replay:
        _replayable(_explore.from_spec(replay))
        return
    from hypothesis import HealthCheck, given, reject, seed, settings
    from hypothesis.errors import Unsatisfiable

    budget = int(os.environ.get(Env.EXPLORE_BUDGET) or default_budget)
    explore_seed = int(os.environ.get(Env.EXPLORE_SEED) or 0)
    met: list[tuple[tuple[str, ...], BaseException]] = []
    checked = 0  # cases actually checked (Hypothesis may stop short of the budget)

    @seed(explore_seed)
    @settings(
        max_examples=budget,
        report_multiple_bugs=False,  # one (shrunk) failure, the verdict of one case
        database=None,  # nothing written into the user's directory; the seed reproduces a run
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(strategy)
    def explore(case: _explore.ExploredCase) -> None:
        nonlocal checked
        checked += 1
        try:
            _replayable(case)
        except Untestable:
            reject()  # a knob this era lacks: draw another case, never a verdict on this one
        except Exception as exc:
            ids = known_bug(exc)
            if not ids:
                raise
            met.append((ids, exc))
            reject()  # a known MB bug: set aside, keep looking for a new one

    def known_met() -> str:
        ids = sorted({i for found, _ in met for i in found})
        return f"{len(met)} drawn case(s) met known MB bug(s) {', '.join(ids)} on the way" if met else ""

    try:
        explore()
    except Unsatisfiable as exc:
        if not met:
            raise Untestable(f"every drawn case needs what this MB lacks ({budget} drawn): {exc}") from None
    except Exception as exc:
        if met:
            exc.add_note(known_met())
        raise
    if met:
        first = met[0][1]
        first.add_note(f"no new failure in {checked} drawn case(s) ({budget} asked); {known_met()}")
        raise first


def _eos() -> bool:
    return os.environ.get(Env.EXPLORE_EOS) == "1"


@pytest.mark.drawn
def test_explore_offline_packing(known_bug):
    """Drawn data shapes and knobs (or the one case ``--replay`` names) hold every invariant."""
    _explore_space(_explore.cases(eos=_eos()), DEFAULT_BUDGET, known_bug)


@pytest.mark.drawn
@pytest.mark.import_group("full")  # MB's step, its config finalisation and gloo worlds
def test_explore_layouts(known_bug):
    """The same drawn data under one drawn layout or packing path holds that path's invariants."""
    _explore_space(_explore.layout_cases(eos=_eos()), DEFAULT_LAYOUT_BUDGET, known_bug)


@pytest.mark.drawn
@pytest.mark.import_group("full")  # the direct builder imports MB's HF model helpers; config finalisation
def test_explore_direct_sft(known_bug):
    """The same drawn data through MB's direct HF SFT path holds that path's invariants."""
    from harness.suite.adapters.directsft import direct_sft

    needs(direct_sft)  # an era without the direct builder: untestable before drawing anything
    _explore_space(_explore_direct.direct_cases(eos=_eos()), DEFAULT_DIRECT_BUDGET, known_bug)


@pytest.mark.drawn
@pytest.mark.import_group("full")  # a drawn step variant runs MB's gpt_step and MCore's parallel state
def test_explore_pretraining(known_bug):
    """Drawn documents packed into pretraining samples (megatron-core's GPTDataset through MB's config)
    hold the pretraining checks."""
    from harness.suite.adapters.pretrain import pretraining_splits

    needs(pretraining_splits)  # an era without MB's provider: untestable before drawing anything
    _explore_space(_explore_pretrain.pretrain_cases(), DEFAULT_PRETRAIN_BUDGET, known_bug)


@pytest.mark.drawn
@pytest.mark.import_group("full")  # Energon's builder imports MB's HF model helpers
def test_explore_energon(known_bug):
    """Drawn image/chat samples and loader knobs through MB's Energon VLM data path hold the checks of
    the ``energon_dataset`` suite."""
    from harness.suite.adapters.energon import energon_batches

    needs(energon_batches)  # an era without MB's Energon builder: untestable before drawing
    _explore_space(_explore_energon.energon_cases(), DEFAULT_ENERGON_BUDGET, known_bug)


@pytest.mark.drawn
@pytest.mark.import_group("full")  # MB's loader builder reads the training config; the step's worlds
def test_explore_mimo(known_bug):
    """Drawn lengths, batch sizes and module layouts through MB's MegatronMIMO data and step path hold the
    checks of the ``mimo_dataset`` suite."""
    from harness.suite.adapters.mimo import mimo_hf_samples
    from harness.suite.adapters.mimoloader import mimo_train_micro_batches

    needs(mimo_hf_samples)  # an era without MB's MIMO providers: untestable before drawing
    needs(mimo_train_micro_batches)  # nor its MIMO loader path
    _explore_space(_explore_mimo.mimo_cases(), DEFAULT_MIMO_BUDGET, known_bug)


@pytest.mark.drawn
@pytest.mark.import_group("full")  # MB's ConfigContainer and the model's finalisation
def test_explore_config(known_bug):
    """Drawn whole packing configurations: MB's ``validate()`` accepts exactly those that break no documented
    rule, and refuses the others by one of the rules they break (the ``config_validation`` rules in
    combination)."""
    _explore_space(_explore_config.config_cases(), DEFAULT_CONFIG_BUDGET, known_bug)


SAVED = _explore.saved(paths.fixtures_dir() / explored.DIRNAME)
SAVED_DATA = [c for c in SAVED if c.axis is None]
SAVED_LAYOUTS = [c for c in SAVED if c.axis is not None]


def _check_saved(golden: Any, case: _explore.ExploredCase) -> None:
    """An explored case kept as a regression case: invariants, then its golden (change only)."""
    golden.check(_explore_check.check_any(case))


# no saved case: no test (an empty parametrisation would read as an untestable case)
if SAVED_DATA:

    @pytest.mark.parametrize("case", SAVED_DATA, ids=[c.id for c in SAVED_DATA])
    def test_saved_explored_case(golden, case):
        """A saved data case (offline packing, world of one)."""
        _check_saved(golden, case)


if SAVED_LAYOUTS:

    @pytest.mark.import_group("full")
    @pytest.mark.parametrize("case", SAVED_LAYOUTS, ids=[c.id for c in SAVED_LAYOUTS])
    def test_saved_explored_layout_case(golden, case):
        """A saved case with a layout or packing path."""
        _check_saved(golden, case)
