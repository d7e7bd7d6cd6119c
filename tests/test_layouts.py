"""Parallel layouts on CPU: the TE partition stand-in and the forked gloo world the CP suite runs in.

The stand-in is checked for the properties TE documents (each rank holds chunks ``r`` and
``2*CP-1-r`` of every sequence; the ranks together hold the stream once; unaligned lengths are
refused) and, where CUDA and Transformer Engine are present, index for index against the
kernel (untestable elsewhere: skipped with its reason). The world runner is checked for what a
user relies on: ranks see their own rank in MCore's real groups, an exception raised in MB is
MB's failure with its frame, a harness exception stays the harness's, and a hang or a crash
of one rank fails the case instead of hanging the run.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import signal
import textwrap
import time

import pytest
import torch

from harness.errors import Broken
from harness.paths import mb_location
from harness.records.impact import Impact, ImpactFailure, fail
from harness.suite.adapters.world import Layout, run_world
from harness.suite.standins.thd_partition import PartitionRefused, thd_partitioned_indices
from tests import suite_child


def _chunks(bounds: list[int], cp: int, rank: int) -> list[int]:
    out: list[int] = []
    for start, end in itertools.pairwise(bounds):
        size = (end - start) // (2 * cp)
        for chunk in (rank, 2 * cp - 1 - rank):
            out += range(start + chunk * size, start + (chunk + 1) * size)
    return out


@pytest.mark.parametrize("cp", [2, 4])
def test_each_rank_holds_chunks_r_and_mirror_and_together_the_stream(cp):
    rng = random.Random(cp)
    for _ in range(20):
        lengths = [2 * cp * rng.randint(0, 6) for _ in range(rng.randint(1, 5))]
        bounds = [0]
        for n in lengths:
            bounds.append(bounds[-1] + n)
        total = bounds[-1] or 2 * cp
        if bounds[-1] == 0:
            bounds = [0, total]
        held = []
        for rank in range(cp):
            idx = thd_partitioned_indices(torch.tensor(bounds), total, cp, rank).tolist()
            assert idx == _chunks(bounds, cp, rank), (bounds, rank)
            held += idx
        assert sorted(held) == list(range(total))


def test_unaligned_boundaries_are_refused_as_te_asserts():
    with pytest.raises(PartitionRefused, match="not divisible by 2\\*CP = 4"):
        thd_partitioned_indices(torch.tensor([0, 6, 16]), 16, 2, 0)
    with pytest.raises(PartitionRefused, match="total tokens 18"):
        thd_partitioned_indices(torch.tensor([0, 8, 16]), 18, 2, 1)


def test_boundaries_short_of_the_stream_do_not_cover_it():
    """Slots past the last boundary go to the last sequence (TE's search): the stream is not held once."""
    held = torch.cat([thd_partitioned_indices(torch.tensor([0, 8]), 16, 2, r) for r in range(2)])
    assert sorted(held.tolist()) != list(range(16))


def test_standin_equals_the_te_kernel():
    """Index for index against TE's kernel (only where CUDA and Transformer Engine are present)."""
    if not torch.cuda.is_available():
        pytest.skip("untestable: no CUDA device here (the kernel is CUDA-only)")
    tex = pytest.importorskip("transformer_engine_torch", reason="untestable: Transformer Engine is not installed")
    rng = random.Random(7)
    for cp in (2, 4, 8):
        for _ in range(50):
            bounds = [0]
            for _ in range(rng.randint(1, 8)):
                bounds.append(bounds[-1] + 2 * cp * rng.randint(1, 16))
            cu = torch.tensor(bounds, dtype=torch.int32, device="cuda")
            for rank in range(cp):
                want = tex.thd_get_partitioned_indices(cu, bounds[-1], cp, rank).cpu().tolist()
                got = thd_partitioned_indices(torch.tensor(bounds), bounds[-1], cp, rank).tolist()
                assert got == want, (bounds, cp, rank)


# ----------------------------------------------------------------------------- the world


def test_every_rank_runs_with_its_own_rank_in_mcores_groups():
    def on_rank(rank: int) -> tuple[int, int, int, int]:
        import torch.distributed as dist
        from megatron.core import parallel_state as ps

        group = ps.get_context_parallel_group()
        gathered = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size(group))]
        dist.all_gather(gathered, torch.tensor([rank]), group=group)
        return rank, dist.get_rank(group), dist.get_world_size(group), sum(int(g) for g in gathered)

    assert run_world(Layout(cp=4), on_rank) == [(r, r, 4, 6) for r in range(4)]


def test_mb_raising_on_one_rank_is_mbs_failure_with_its_frame():
    def on_rank(rank: int) -> None:
        if rank == 1:
            from harness.suite.adapters import load_module
            from harness.suite.standins import te

            te.install()  # as the suite process does on a machine without Transformer Engine
            specs = load_module("megatron.bridge.data.packing.config").PackedSequenceSpecs
            specs(packed_sequence_size=64, pad_seq_to_mult=0)  # MB refuses it in __post_init__

    where = r"\[at megatron/bridge/data/packing/config.py"
    said = r"rank 1 of TP1 CP2 PP1 DP1: Megatron raised ValueError: pad_seq_to_mult .* "
    with pytest.raises(Broken, match=said + where):
        run_world(Layout(cp=2), on_rank)


def test_a_harness_exception_stays_the_harness_s():
    def on_rank(rank: int) -> None:
        raise KeyError("a harness bug")

    with pytest.raises(RuntimeError, match="KeyError: 'a harness bug'"):
        run_world(Layout(cp=2), on_rank)


def test_a_contract_a_rank_checks_stays_a_failure_with_its_impact():
    """A rank that checks a contract itself (MB's loader running out inside a rank's step) reports a
    failure with the impact it named, not a harness error; other ranks' results are not mistaken."""

    def on_rank(rank: int) -> int:
        if rank == 1:
            raise fail(Impact.CRASH, "MB's loader ran out in step 2 of 3")
        return rank

    with pytest.raises(ImpactFailure, match=r"rank 1 of TP1 CP2 PP1 DP1: MB's loader ran out") as caught:
        run_world(Layout(cp=2), on_rank)
    assert caught.value.impact is Impact.CRASH


def test_a_hung_or_killed_rank_fails_the_case_and_leaves_nothing_running():
    def hangs(rank: int) -> None:
        if rank == 0:
            time.sleep(60)

    with pytest.raises(Broken, match="rank 0 of TP1 CP2 PP1 DP1 did not finish within 2 s"):
        run_world(Layout(cp=2), hangs, timeout=2)
    assert not multiprocessing.active_children(), "the hung rank is killed, not left running"

    def dies(rank: int) -> None:
        if rank == 1:
            os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(60)  # the others would wait on it forever

    # named as killed (not "did not finish"): the run stopped at the death, not at the timeout
    with pytest.raises(Broken, match="rank 1 of TP1 CP2 PP1 DP1 was killed by signal 11"):
        run_world(Layout(cp=2), dies, timeout=60)
    assert not multiprocessing.active_children(), "the ranks waiting on the dead one are killed"


def test_tp_weights_split_as_mcore_holds_them_and_put_back_are_the_whole() -> None:
    """The TP world's weights: every part has the TP model's shape, the parts put back along the
    split dimension are the TP 1 tensor, and a shape that does not split in TP parts is refused."""
    from suites import _tpsp

    class Model(torch.nn.Module):
        def __init__(self, rows: int, cols: int) -> None:
            super().__init__()
            self.column = torch.nn.Parameter(torch.zeros(rows, 4))
            self.row = torch.nn.Parameter(torch.zeros(4, cols))
            self.norm = torch.nn.Parameter(torch.zeros(4))

    whole = {k: torch.randn(v.shape) for k, v in Model(8, 6).state_dict().items()}
    parts = [_tpsp.split_like(whole, Model(4, 3), 2, r) for r in range(2)]
    assert torch.equal(torch.cat([p["column"] for p in parts], 0), whole["column"])
    assert torch.equal(torch.cat([p["row"] for p in parts], 1), whole["row"])
    assert all(torch.equal(p["norm"], whole["norm"]) for p in parts)
    with pytest.raises(AssertionError, match="does not split into TP 2"):
        _tpsp.split_like(whole, Model(3, 3), 2, 0)


def test_the_tp_world_turns_red_on_a_wrong_split_and_on_an_odd_width() -> None:
    """Negative controls of the TP with SP world (suites/_tpsp.py) on MB's real micro-batches, in a
    child with the suite process's stand-ins: with the ranks' weight parts swapped the logits put
    together are not the TP 1 ones; a packed width TP does not divide is refused before any rank
    runs (SP's scatter would crash on it)."""
    if mb_location() is None:
        pytest.skip("megatron.bridge is not installed here")
    script = textwrap.dedent(
        """
        import dataclasses, json
        from harness.suite.adapters import step
        from harness.suite.adapters.world import Layout
        from suites import _forward, _sftcases, _tpsp

        case = next(c for c in _sftcases.CASES if c.id == "chat-mult1")
        got = {"clean": [v.invariant.value for v in _tpsp.run_tp_sp(case, 2).violations]}
        split = _tpsp.split_like
        _tpsp.split_like = lambda full, model, tp, rank: split(full, model, tp, tp - 1 - rank)
        got["swapped"] = sorted({v.invariant.value for v in _tpsp.run_tp_sp(case, 2).violations})
        _tpsp.split_like = split
        runs = [step.gpt_step(_forward.models()[0], b) for b in _sftcases.built(case).batches[:2]]
        ids = runs[0].kwargs["input_ids"]
        odd = dataclasses.replace(runs[0], kwargs={**runs[0].kwargs, "input_ids": ids[:, :-1]})
        refused = _tpsp.misaligned(Layout(tp=2), [runs[1], odd])
        got["odd"] = [[v.invariant.value, v.row, v.got, v.training_impact.value] for v in refused]
        got["width"] = int(ids.shape[-1])
        print("RESULT=" + json.dumps(got))
        """
    )
    got = suite_child.run(script)
    assert got["clean"] == [], got
    assert "logits-equal-unpacked" in got["swapped"], got  # (the loss totals move with them)
    assert got["odd"] == [["alignment", 1, got["width"] - 1, "crash"]], got


def test_a_gloo_connection_failing_at_setup_starts_the_world_again(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Gloo's localhost mesh now and then fails to connect while MCore creates its groups (before
    any MB code runs): the world starts again; a failure that persists is the harness's error after
    the last attempt, and any other setup error is not retried."""
    from harness.suite.adapters import world

    real_init = world._init_rank
    tries = tmp_path / "tries"

    def flaky(layout: Layout, rank: int, store: str, seed: int) -> None:
        with open(tries, "a") as f:
            f.write(f"{rank}\n")
        if rank == 1 and tries.read_text().count("1\n") == 1:
            raise RuntimeError("Gloo connectFullMesh failed with [...] Connection closed by peer")
        real_init(layout, rank, store, seed)

    monkeypatch.setattr(world, "_init_rank", flaky)
    assert run_world(Layout(cp=2), lambda rank: rank * 10) == [0, 10]
    assert tries.read_text().count("1\n") == 2, "rank 1 set up twice: the world started again"

    def always(layout: Layout, rank: int, store: str, seed: int) -> None:
        raise RuntimeError("Gloo connectFullMesh failed with [...]")

    monkeypatch.setattr(world, "_init_rank", always)
    with pytest.raises(RuntimeError, match="could not connect the ranks in 3 attempts"):
        run_world(Layout(cp=2), lambda rank: rank)

    def broken(layout: Layout, rank: int, store: str, seed: int) -> None:
        raise RuntimeError("something else")

    monkeypatch.setattr(world, "_init_rank", broken)
    with pytest.raises(RuntimeError, match="something else"):
        run_world(Layout(cp=2), lambda rank: rank)
