"""MB's Energon VLM data path: image/chat WebDataset shards to the micro-batches the step receives.

The contract and the reference (MB's own unpadded path, rows matched to samples by marker
token) are in suites/_energon.py, which the Energon space of exploration shares. Here the
hand-written cases: unpacked rows at MB's default multiple, a user's multiple and
``pad_to_max_length``, two shards, both task encoders, ``drop_last`` off; in-batch packing at its default and
chosen multiples; deferred packing; and the loader settings ``validate`` refuses.
"""

from __future__ import annotations

import pytest

from harness.records.impact import Impact, fail
from harness.suite.adapters import needs, qwenvl, rules
from harness.suite.adapters.energon import energon_batches
from harness.suite.adapters.refusal import up_front_check
from suites import _qwen_vl_step, _vlm_cp
from suites._energon import Case, check_deferred, check_packed, check_padded, check_reference
from suites._energon_step import check_step

pytestmark = pytest.mark.import_group("full")  # the builder imports MB's HF model helpers


PADDED = [
    Case("mbs3-default-multiple-seq2048", 201, seq=2048),  # MB's default multiple 128 (and the loader's seq)
    Case("mbs2-multiple8", 202, mbs=2, knobs={"pad_to_multiple_of": 8}),
    Case("mbs3-pad-to-max-seq96", 203, seq=96, knobs={"pad_to_max_length": True, "pad_to_multiple_of": 8}),
    Case("mbs2-two-shards", 204, mbs=2, n=8, shards=2, knobs={"pad_to_multiple_of": 16}),
    Case("qwen-vl-mbs3-multiple8", 205, knobs={"pad_to_multiple_of": 8}, encoder="qwen-vl"),
    Case(
        "qwen-vl-mbs2-pad-to-max",
        206,
        mbs=2,
        knobs={"pad_to_max_length": True, "pad_to_multiple_of": 8},
        encoder="qwen-vl",
    ),
    # DataloaderConfig's drop_last, which a user may set on any dataset config: Energon's loader is
    # its own ("external" to MB's samplers), so keeping the incomplete last batch changes nothing
    Case("mbs3-keep-last-n5", 207, n=5, knobs={"drop_last": False, "pad_to_multiple_of": 8}),
]
PACKED = [
    Case("mbs3-seq4096", 211, seq=4096, knobs={"enable_in_batch_packing": True}),  # the task encoder's default
    Case(
        "mbs3-mult8-seq128",
        212,
        seq=128,
        knobs={"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 8},
    ),
    Case("mbs2-mult4", 213, mbs=2, knobs={"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 4}),
    Case(
        "qwen-vl-mbs3-mult8",
        214,
        knobs={"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 8},
        encoder="qwen-vl",
    ),
]


def _ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]


@pytest.mark.parametrize("case", PADDED, ids=_ids(PADDED))
def test_padded_rows(golden, case):
    """Unpacked rows: the documented width, equal to the unpadded path per real token, padding untrained."""
    needs(energon_batches)  # untestable before the builder, before anything is built
    ref = check_reference(case)
    widths = check_padded(case, energon_batches(case.request()))
    golden.check({"widths": widths, "token_count": {k: len(e.tokens) for k, e in sorted(ref.items())}})


@pytest.mark.parametrize("case", PACKED, ids=_ids(PACKED))
def test_in_batch_packed_rows(golden, case):
    """In-batch packing in the task encoder: one THD row per micro-batch, held to the oracle."""
    needs(energon_batches)
    golden.check(check_packed(case, energon_batches(case.request())))


@pytest.mark.parametrize("encoder", ["hf", "qwen-vl"])
def test_deferred_packing_leaves_rows_unpacked(golden, encoder):
    """``defer_in_batch_packing_to_step``: the loader hands the step right-padded rows, not a THD row."""
    needs(energon_batches)
    deferred = {"enable_in_batch_packing": True, "defer_in_batch_packing_to_step": True}
    case = Case(f"mbs3-deferred-{encoder}", 221, knobs=deferred, encoder=encoder)
    golden.check(check_deferred(case, energon_batches(case.request())))


# one invalid setting each: (knob, value, what MB's message names)
REFUSED = [
    ("pad_to_multiple_of", 0, "pad_to_multiple_of"),
    ("in_batch_packing_pad_to_multiple_of", 0, "in_batch_packing_pad_to_multiple_of"),
    ("packing_buffer_size", 0, "packing_buffer_size"),
]


@pytest.mark.parametrize("knob,value,named", REFUSED, ids=[r[0] for r in REFUSED])
def test_invalid_setting_is_refused(knob, value, named):
    """A multiple or buffer of 0 divides nothing: ``EnergonDatasetConfig.validate`` refuses it by name."""
    needs(energon_batches)
    case = Case(f"refused-{knob}", 231, knobs={knob: value})
    try:
        energon_batches(case.request(batches=1))
    except (ValueError, AssertionError, TypeError) as exc:
        if rules.raising_check(exc) is None or named not in str(exc):
            raise fail(Impact.CRASH, f"{knob}={value} refused, but not by MB's check on it: {exc}") from exc
        return
    raise fail(Impact.ACCEPTS_INVALID_CONFIG, f"{knob}={value} accepted")


def test_energon_sample_packing_needs_an_encoder_that_packs():
    """``packing_buffer_size`` turns on Energon's own sample packing, which calls the task encoder's
        ``select_samples_to_pack`` and ``pack_selected_samples``; MB's HF task encoder packs in its collate
        and has neither. Refused before any batch is made, by Energon's check or MB's own (MB documents that
    Energon's native packing needs micro-batches of 1, checked in the builder's ``validate``), the
    setting is safe; a loader
        that accepts it must still hand the step rows that hold every invariant of the unpacked path."""
    needs(energon_batches)
    case = Case("packing-buffer-4", 241, mbs=2, knobs={"packing_buffer_size": 4, "pad_to_multiple_of": 8})
    try:
        build = energon_batches(case.request())
    except AssertionError as exc:
        if "select_samples_to_pack" not in str(exc):
            raise fail(
                Impact.CRASH, f"packing_buffer_size 4 refused, but not for the encoder's packing: {exc}"
            ) from exc
        return
    except Exception as exc:  # MB's own check refusing the setting before any batch is as safe
        if up_front_check(exc) is None:
            raise
        return
    check_padded(case, build)


def test_dp_cp_ranks_of_one_replica_read_the_same_samples():
    """Energon under context parallelism, as MB's setup builds its loaders (the builder handed each
    rank's process groups): in a DP 2 x CP 2 world the CP ranks of one data-parallel replica split
    one sequence, so they must read the same samples, batch by batch; the two replicas read
    different samples (else each sample trains twice a step). Checked on the rows' tokens."""
    from harness.suite.adapters.world import Layout, run_world

    needs(energon_batches)  # an era without the builder: untestable before a world starts
    from harness.suite.adapters.energon import write_dataset

    case = Case("dp2-cp2", 251, mbs=1, n=8, shards=2)
    # indexed once, here: MB's preparation starts processes, which a forked rank may not
    req = case.request(batches=2, data_parallel=True, prepared=write_dataset(case.samples, 2))

    def on_rank(_rank: int) -> tuple[int, list[list[tuple[int, ...]]]]:
        from megatron.core import parallel_state

        return parallel_state.get_data_parallel_rank(), [_vlm_cp.row_tokens(b) for b in energon_batches(req).batches]

    layout = Layout(dp=2, cp=2)
    replicas: dict[int, list[list[list[tuple[int, ...]]]]] = {}
    for dp_rank, rows in run_world(layout, on_rank):  # rank order: CP ranks in order within a replica
        replicas.setdefault(dp_rank, []).append(rows)
    _vlm_cp.check_replicas(replicas, layout)


@pytest.mark.import_group("full")  # MB's VLM step and a tiny model
@pytest.mark.parametrize("case", PACKED[:2], ids=_ids(PACKED[:2]))
def test_energon_step_trains_what_the_unpacked_step_trains(case):
    """Energon-fed VLM training to the loss: each micro-batch MB's loader packs in batch goes through
    MB's ``vlm_step.forward_step`` into a small real model (MCore's GPTModel on CPU with a reference
    THD attention; the images' embeddings are not part of it) and MB's loss function, beside the
    same samples through the loader without packing (MB's own unpacked path): the same trained
    tokens with the same per-token losses (``wrong-logits``), and the same loss sum and token count
    (``wrong-loss-normalisation``)."""
    needs(energon_batches)
    packed = energon_batches(case.request())
    check_packed(case, packed)  # the batch first: a defect there is named by the oracle's invariants
    check_step(case, packed)


@pytest.mark.import_group("full")  # MB's VLM step and Qwen2.5-VL's model
@pytest.mark.parametrize("case", [PACKED[1], PACKED[3]], ids=_ids([PACKED[1], PACKED[3]]))
def test_qwen_vl_model_sees_each_packed_sample_as_unpacked(case):
    """Qwen2.5-VL under in-batch packing, through its own model: MB's ``vlm_step.forward_step`` hands
    Qwen2.5-VL's ``Qwen25VLModel`` (tiny, its real vision tower; the language model recorded) one
    packed row, and the model computes each sample's multimodal rotary positions and splices its
    image embeddings itself. Per sample, the positions relative to its first token (each axis) and
    the input embeddings per real token equal MB's unpacked run's, and so do the loss totals."""
    needs(energon_batches, qwenvl.qwen25_vl_model)
    packed = energon_batches(case.request())
    check_packed(case, packed)  # the batch first: a defect there is named by the oracle's invariants
    _qwen_vl_step.check(case, packed)


# the loader's default multiple (rows already a multiple of the step's 16), and a multiple of 8 the step pads again
QWEN3_STEP = [("hf", {}), ("qwen-vl", {"pad_to_multiple_of": 8})]


@pytest.mark.import_group("full")  # MB's Qwen3-VL step
@pytest.mark.parametrize(("encoder", "knobs"), QWEN3_STEP, ids=["hf-default-multiple", "qwen-vl-multiple8"])
def test_qwen3_vl_step_packs_what_its_unpacked_step_trains(encoder, knobs):
    """Qwen3-VL packs in its own step: the loader defers packing (right-padded rows), and MB's
    ``qwen3_vl_step.forward_step`` pads the rows and hands its model one sequence per row with the
    labels and loss mask as one packed row. Per row the real tokens, labels and loss mask reach the
    model in place inside one sequence starting at the row, padding trains nothing, and MB's loss
    totals equal the same step with packing off. Qwen3-VL's model is recorded (Transformer Engine
    only), named in the result."""
    from harness.suite.adapters import qwen3vlstep

    needs(energon_batches, qwen3vlstep.qwen3_vl_step)
    deferred = {"enable_in_batch_packing": True, "defer_in_batch_packing_to_step": True, **knobs}
    case = Case(f"mbs3-deferred-{encoder}-{len(knobs)}", 222, knobs=deferred, encoder=encoder)
    build = energon_batches(case.request())
    check_deferred(case, build)  # the rows first: a defect there is the loader's
    _qwen_vl_step.check_qwen3_step(case, build)


@pytest.mark.import_group("full")  # MB's Qwen3-VL step
def test_qwen3_vl_step_under_cp_splits_what_its_cp1_step_trains():
    """Qwen3-VL under context parallelism (a recipe trains it at CP 2): every rank of a gloo CP world
    runs MB's ``qwen3_vl_step.forward_step`` with in-batch packing. Each rank is handed the rows of
    tokens whole, and the labels and loss mask of the CP 1 step at the positions of MCore's
    load-balanced CP layout; the ranks' loss totals sum to the CP 1 totals. Qwen3-VL's model is
    recorded (Transformer Engine only), named in the result; how it splits the tokens is not judged."""
    from harness.suite.adapters import qwen3vlstep

    needs(energon_batches, qwen3vlstep.qwen3_vl_step)
    # rows of any length (multiple 1: micro-batches 34 and 41 wide): the step itself pads them to a
    # multiple of 2 * CP (and of 16), which its split needs
    deferred = {"enable_in_batch_packing": True, "defer_in_batch_packing_to_step": True, "pad_to_multiple_of": 1}
    case = Case("mbs3-deferred-hf-multiple1-cp2", 201, knobs=deferred, encoder="hf")
    build = energon_batches(case.request())
    _vlm_cp.check_qwen3_step_under_cp(build, cp=2)


@pytest.mark.import_group("full")  # MB's Qwen3-VL step
def test_qwen3_vl_step_under_dp_cp_splits_each_replica_s_own_samples():
    """Qwen3-VL under data and context parallelism at once: every rank of a DP 2 x CP 2 gloo world
    reads its micro-batches from MB's Energon loader (built with the rank's process groups, as MB's
    setup builds it) and runs MB's ``qwen3_vl_step.forward_step`` with in-batch packing. The CP ranks
    of a replica read the same samples, the replicas different ones, and each replica's CP ranks
    hold, together, what the CP 1 step trains of that replica's micro-batches (labels and loss mask
    in MCore's load-balanced layout, loss totals summed). Qwen3-VL's model is recorded (Transformer
    Engine only), named in the result."""
    from harness.suite.adapters import qwen3vlstep
    from harness.suite.adapters.energon import write_dataset
    from harness.suite.adapters.world import Layout

    needs(energon_batches, qwen3vlstep.qwen3_vl_step)  # an era without them: untestable before a world starts
    deferred = {"enable_in_batch_packing": True, "defer_in_batch_packing_to_step": True, "pad_to_multiple_of": 1}
    case = Case("dp2-cp2-deferred-hf-multiple1", 252, mbs=2, n=8, shards=2, knobs=deferred)
    # indexed once, here: MB's preparation starts processes, which a forked rank may not
    req = case.request(batches=2, data_parallel=True, prepared=write_dataset(case.samples, 2))
    _vlm_cp.check_qwen3_step_under_dp_cp(req, Layout(dp=2, cp=2))
