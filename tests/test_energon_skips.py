"""What Energon's error handling drops is visible: the adapter records it, and its cause reaches the verdict.

Energon's default handler logs an exception raised by a loader stage (a task encoder's ``batch``)
and skips the stage's samples; the batches that do arrive look well formed. The adapter records
each skip (stage, error, sample keys) so the suites can fail it, and names the first skip's error
when Energon gives up, since Energon's own message does not.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.records.verdict import Verdict
from harness.suite import outcome, ownership
from harness.suite.adapters import energon


def test_a_stage_name_loses_its_object_address():
    name = "BatchDataset.<bound method HFTaskEncoder.batch of <megatron.bridge.x.HFTaskEncoder object at 0x7f3>>"
    assert energon._stage(name) == "BatchDataset.HFTaskEncoder.batch"
    assert energon._stage("MapDataset.encode_sample") == "MapDataset.encode_sample"


def test_every_skip_energon_handles_is_recorded_and_the_handler_still_runs():
    errors = pytest.importorskip("megatron.energon.errors")
    handled: list[str] = []
    skipped: list[energon.Skipped] = []
    original = errors.ErrorContext.__init__
    with energon._recording_skips(skipped):
        ctx = errors.ErrorContext("BatchDataset.batch", lambda exc, sample, sources: handled.append(str(exc)))
        batch = [SimpleNamespace(__key__="s-0"), SimpleNamespace(__key__="s-1")]
        with ctx.handle_errors(batch):
            raise ValueError("row too long")
        with ctx.handle_errors(batch):
            pass  # a stage that succeeds records nothing
    assert skipped == [energon.Skipped("BatchDataset.batch", "ValueError: row too long", ("s-0", "s-1"))]
    assert handled == ["row too long"]  # Energon's own handling goes on as before
    assert errors.ErrorContext.__init__ is original  # nothing left patched


def _classified(exc: BaseException, kept: str) -> tuple[Verdict, str]:
    """``exc``'s verdict and message once the note ``kept`` and a note not for the verdict are added."""
    exc.add_note(kept)
    exc.add_note("not for the verdict")
    verdict, message, _ = outcome.verdict_of(pytest.ExceptionInfo.from_exception(exc), False, None)
    return verdict, message


def test_the_cause_note_reaches_the_verdict_of_an_mb_exception(tmp_path, monkeypatch):
    mb = tmp_path / "megatron" / "bridge"
    mb.mkdir(parents=True)
    monkeypatch.setenv(ownership.ENV_ROOTS, str(tmp_path / "megatron"))
    source = mb / "loader.py"
    source.write_text("raise RuntimeError('failed 100 times in a row')\n")
    try:
        exec(compile(source.read_text(), str(source), "exec"), {})
    except RuntimeError as exc:
        verdict, message = _classified(exc, "cause: the first: BatchDataset.batch raised ValueError: row too long")
    assert verdict is Verdict.FAIL and message.startswith("Megatron raised RuntimeError: failed 100 times")
    assert "cause: the first: BatchDataset.batch raised ValueError: row too long" in message
    assert "not for the verdict" not in message


def test_a_broken_world_keeps_its_replay_note():
    """A rank that crashed in a drawn case's world is ``broken:``; the replay command the
    exploration added stays in the verdict, so the shrunk case can be run again."""
    from harness.errors import Broken

    try:
        raise Broken("rank 2 of TP1 CP2 PP1 DP2: Megatron raised IndexError")
    except Broken as exc:
        verdict, message = _classified(exc, "replay: harness explore --replay '{\"cp\": 2}'")
    assert verdict is Verdict.FAIL and message.startswith("broken: rank 2 of TP1 CP2 PP1 DP2")
    assert message.endswith("\n  replay: harness explore --replay '{\"cp\": 2}'")
