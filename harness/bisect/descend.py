"""Descending into Megatron-LM: when an MB culprit moved the pinned Megatron-LM, bisect between the pins.

Why: MB pins Megatron-LM as the submodule ``3rdparty/Megatron-LM`` and bumps it often; much of
what packing depends on lives there (``PackedSeqParams``, THD attention, RoPE, CP batch
slicing). A first-level bisection with ``--megatron-lm`` that ends at "bump Megatron-LM" does
not say which change broke packing. Like Chromium's Pinpoint descending into a dependency roll,
the harness then bisects Megatron-LM's history from the old pin to the new one, with MB held at
the culprit's tree, re-running only the cases blamed on the bump.

How (no new algorithm): the second level is another
:func:`~harness.bisect.driver.run_bisection` pass whose commits are Megatron-LM commits
(first-parent by default, ``--ancestry-path`` around a pin off that chain), whose evaluator is
:class:`~harness.bisect.coreeval.CoreEvaluator` and whose cache key is (MB commit, Megatron-LM
commit, suites, environment) (:class:`~harness.bisect.axis.Axis`). Endpoint checks, skips, late
starts, retries, parallel probes, the cache and the record are the first level's. A
megatron-core that does not import with the MB held is untestable for the cases it stops.

Which culprits: a found culprit whose diff changes the pin, alone or with MB files outside
packing (:data:`~harness.bisect.axis.PACKING_PATHSPECS`). A bump that also changes packing code
is not descended (its own change is as likely the cause; ``harness bisect --repo MLM --mb-at``
runs the second level anyway), and neither is one that adds or removes the submodule or moves
the pin backwards; each is listed with its reason.

The second level's endpoints also check the bump (:func:`pin_check`): with MB held, a case
good with the old pin and bad with the new one is reproduced by the Megatron-LM change alone;
when no case is, the bump is **not confirmed as the cause**, and the record says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TextIO

from harness.bisect.axis import PACKING_PATHSPECS
from harness.bisect.document import BisectDoc, CulpritGroup, Descent, PinCheck, PinStatus
from harness.bisect.options import BisectOptions
from harness.bisect.scope import suite_of
from harness.errors import HarnessError
from harness.repository.gitrepo import GitRepo, open_repo
from harness.repository.pins import SUBMODULE


def descend(
    opts: BisectOptions, doc: BisectDoc, bisect: Callable[[BisectOptions], BisectDoc], progress: TextIO | None
) -> list[Descent]:
    """One :class:`Descent` per culprit of ``doc`` that moved the pin; ``bisect`` runs a second level
    (:func:`~harness.bisect.driver.run_bisection`'s one-level pass) and returns its record."""
    repo = open_repo(opts.repo)
    out = []
    for group in doc.culprit_groups():
        descent = _plan(repo, group)
        if descent is None:
            continue
        if descent.reason:  # not descended
            _say(progress, f"not descending into Megatron-LM behind {descent.mb_culprit[:12]}: {descent.reason}")
        else:
            _run(opts, descent, bisect, progress)
        out.append(descent)
    return out


def _plan(repo: GitRepo, group: CulpritGroup) -> Descent | None:
    """The descent a culprit calls for (None: it does not move the pin); with a reason when it is not run."""
    sha = group.culprit.sha
    parents = repo.parents(sha)
    old = repo.submodule_pin(parents[0], SUBMODULE) if parents else None
    new = repo.submodule_pin(sha, SUBMODULE)
    if old == new:
        return None
    descent = Descent(sha, [c.case_id for c in group.cases], old, new)
    if old is None or new is None:
        descent.reason = f"the commit {'adds' if old is None else 'removes'} the {SUBMODULE} submodule"
    elif repo.diff(sha, PACKING_PATHSPECS).strip():
        descent.reason = (
            "the commit also changes packing-related Megatron-Bridge files, as likely a cause as the bump "
            f"(harness bisect {old[:12]}..{new[:12]} --repo MEGATRON-LM --mb-at {sha[:12]} --mb-repo "
            f"{repo.path} checks the bump alone)"
        )
    return descent


def _run(
    opts: BisectOptions, descent: Descent, bisect: Callable[[BisectOptions], BisectDoc], progress: TextIO | None
) -> None:
    assert opts.megatron_lm is not None and descent.old_pin and descent.new_pin
    _say(
        progress,
        f"\ndescending into Megatron-LM behind {descent.mb_culprit[:12]}: {SUBMODULE} "
        f"{descent.old_pin[:12]}..{descent.new_pin[:12]}, re-running {len(descent.cases)} case(s)",
    )
    level = dataclasses.replace(
        opts,
        repo=opts.megatron_lm,
        good=descent.old_pin,
        bad=descent.new_pin,
        first_parent=opts.mlm_first_parent,
        megatron_lm=None,
        mb_at=descent.mb_culprit,
        mb_repo=opts.repo,
        mb_held_src=None,
        suites=tuple(sorted({suite_of(c) for c in descent.cases})),
        keyword=None,  # the cases are named exactly
        cases=tuple(descent.cases),
        confirm=False,
        descend=False,
        allow_dirty=True,  # a Megatron-LM clone's working tree is not bisected and not worth a warning
    )
    try:
        nested = bisect(level)
    except HarnessError as exc:  # the pin is missing from the Megatron-LM repository, moved backwards...
        descent.reason = str(exc)
        _say(progress, f"not descending into Megatron-LM behind {descent.mb_culprit[:12]}: {exc}")
        return
    descent.descended, descent.doc = True, nested
    walked = "first-parent" if nested.range.first_parent else "ancestry-path"
    descent.reason = f"{len(nested.commits)} Megatron-LM commits walked ({walked})"
    if nested.pin_change:
        _say(progress, f"the Megatron-LM change is {nested.pin_change.label}: {nested.pin_change.detail}")


def pin_check(doc: BisectDoc) -> PinCheck:
    """Read a second-level record's endpoints as a check of the Megatron-LM change GOOD..BAD.

    The cases bisected are good with GOOD's megatron-core and bad with BAD's (or good from the
    oldest commit where they run), MB held: the change alone reproduces them. Cases bad at both
    ends are MB's side of the culprit (or older); with no case bad at BAD, nothing the selected
    cases observe changed.
    """
    rng = doc.range
    old, new = rng.good[:12], rng.bad[:12]
    reproduced = [c.case_id for c in doc.cases]
    elsewhere = [n.case_id for n in doc.not_bisected]
    one = len(elsewhere) == 1
    already = f"{'is' if one else 'are'} already bad at {old}: the change does not explain {'it' if one else 'them'}"
    if reproduced and not elsewhere:
        return PinCheck(
            PinStatus.CONFIRMED, f"with Megatron-Bridge held, {old}..{new} alone reproduces {_cases(reproduced)}"
        )
    if reproduced:
        return PinCheck(
            PinStatus.PARTLY,
            f"with Megatron-Bridge held, {old}..{new} alone reproduces {_cases(reproduced)}; "
            f"{_cases(elsewhere)} {already}",
        )
    if elsewhere:
        return PinCheck(
            PinStatus.NOT_CONFIRMED,
            f"with Megatron-Bridge held, {_cases(elsewhere)} {already} (an older cause, or Megatron-Bridge's "
            "own side of the commit)",
        )
    return PinCheck(
        PinStatus.NOT_CONFIRMED,
        f"with Megatron-Bridge held, no case is good at {old} and bad at {new}: "
        "nothing the selected cases observe changes between the two",
    )


def _cases(ids: list[str]) -> str:
    shown = ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
    return f"{len(ids)} case(s) ({shown})"


def _say(progress: TextIO | None, text: str) -> None:
    if progress is not None:
        print(text, file=progress, flush=True)
