"""The MIMO space of exploration: a user's image folder through MB's MegatronMIMO data and step path.

A MIMO sample is its encoder's placeholders, then its text cut to the room left, then padding to
``seq_length``; the bugs live where the text ends one short of, at, and one past that room, where
the encoder's length leaves one text token or none (MB must refuse a ``seq_length`` with no room),
and where MB's forward step slices each global micro-batch among a module's data-parallel ranks.
The hand-written cases (suites/test_mimo_dataset.py) fix a few lengths and two module layouts.
Here Hypothesis draws the sample length, the encoder's length (MB's default, a few lengths, one
short of ``seq_length`` and ``seq_length`` itself), each text's length around the room it has, the
micro-batch and global batch sizes and the module layout: MB's loader alone (a world of one), or a
heterogeneous world with the encoder's and the language module's data-parallel sizes (1-2, 2-1;
a micro-batch that does not divide among a module's ranks must be refused by MB's own check),
and there, where MB's step packs (feature ``mimo-step-packing``), its step-time in-batch packing
(``in_batch``), held to the same world unpacked; in the 2-1 world, the language module's replica
on two context-parallel ranks (``cp``; every MIMO sequence length here is on ``2*CP``, as MB's
unpacked CP path requires), unpacked and packed.

A drawn case is an :class:`~suites._explore.ExploredCase` with ``mimo=True``: ``gbs x steps``
samples (``n``), each a marked text of ``min_words`` to ``max_words`` words, a share ``long_rate``
of them ``long_words`` long; ``encoder_length`` (0: MB's default, no length named) placeholders per
image, ``module_dps`` the layout ("": the loader alone). It is held to the checks of the
``mimo_dataset`` suite (suites/_mimo.py, suites/_mimo_dp.py).
"""

from __future__ import annotations

import random
from typing import Any

from harness.suite.oracle import tokenizer
from suites import _mimo, _mimo_dp, _mimo_pack
from suites._explore import ExploredCase, named

MIMO_SEQS = (8, 12, 16, 24)
MODULE_LAYOUTS = ("", "1-2", "2-1")  # cheapest first: Hypothesis shrinks toward the loader alone


def mimo_cases() -> Any:
    """The Hypothesis strategy of the MIMO space (see the module docstring)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: Any) -> ExploredCase:
        seq = d(st.sampled_from(MIMO_SEQS))
        enc = d(st.sampled_from((0, 1, 4, seq - 1, seq)))
        room = max(seq - (enc or 1), 0)  # the text tokens that fit after the placeholders
        mbs = d(st.sampled_from((1, 2, 4)))
        gbs = mbs * d(st.integers(1, 2))
        min_words = d(st.integers(0, 3))
        fields: dict[str, Any] = {
            "seed": d(st.integers(0, 2**31 - 1)),
            "seq": seq,
            "encoder_length": enc,
            "mbs": mbs,
            "gbs": gbs,
            "n": gbs * d(st.integers(1, 2)),
            "min_words": min_words,
            "max_words": d(st.integers(min_words, 2 * seq)),
            "long_rate": d(st.sampled_from((0.0, 0.5, 1.0))),
            # a text is its marker and its words: these end it one short of, at and one past its room
            "long_words": d(st.sampled_from(tuple(max(room + k, 0) for k in (-2, -1, 0)))),
            "module_dps": d(st.sampled_from(MODULE_LAYOUTS)),
        }
        # then, drawn last (earlier draws keep their cases), in a heterogeneous world of an MB whose step packs:
        # MB's step-time in-batch packing, held to the same world unpacked (suites/_mimo_pack.py)
        fields["in_batch"] = bool(fields["module_dps"]) and _mimo_pack.available() and d(st.booleans())
        # and, drawn after that, the language module under context parallelism in the 2-1 world (a world of 4)
        fields["cp"] = 2 if fields["module_dps"] == "2-1" and d(st.booleans()) else 1
        return named(ExploredCase(id="", kind="prompt", mimo=True, **fields))

    return draw()


def texts(case: ExploredCase) -> tuple[str, ...]:
    """The case's rows as a user's image folder has them: ``n`` marked texts, lengths as drawn, seeded."""
    rng = random.Random(case.seed)
    lengths = [
        case.long_words if rng.random() < case.long_rate else rng.randint(case.min_words, case.max_words)
        for _ in range(case.n)
    ]
    return _mimo.marked_texts(lengths, offset=rng.randrange(len(tokenizer.WORDS)))


def modules(case: ExploredCase) -> dict[str, int]:
    """The drawn heterogeneous layout: the encoder's ranks, then the language module's ({}: none)."""
    if not case.module_dps:
        return {}
    encoder, language = (int(x) for x in case.module_dps.split("-"))
    return {_mimo.ENCODER: encoder, _mimo_dp.LANGUAGE: language}


def check(case: ExploredCase) -> dict[str, Any]:
    """Hold ``case`` to the ``mimo_dataset`` suite's checks (raises on a violation); what trained where."""
    rows = texts(case)
    enc = case.encoder_length or None
    if enc is not None and enc >= case.seq:
        _mimo.require_no_room_refused(
            lambda: _mimo.hf_built(rows, case.seq, enc), f"{enc} encoder tokens in seq_length {case.seq}"
        )
        return {"refused": f"{enc} encoder tokens leave no text in seq_length {case.seq}"}
    built = _mimo.hf_built(rows, case.seq, enc)
    golden: dict[str, Any] = {"samples": _mimo.check_hf_samples(built.samples, rows, case.seq, enc)}
    steps = case.n // case.gbs
    layout = modules(case)
    if not layout:
        golden["loader"] = _mimo.loader_epoch(built, seq=case.seq, mbs=case.mbs, gbs=case.gbs, steps=steps)
        return golden
    cp = {_mimo_dp.LANGUAGE: case.cp} if case.cp > 1 else None
    ranks = _mimo_dp.world(built, layout, seq=case.seq, mbs=case.mbs, gbs=case.gbs, steps=steps, cp=cp)
    if any(case.mbs % dp for dp in layout.values()):
        golden["refused"] = _mimo_dp.require_refused(ranks, f"micro-batches of {case.mbs} under module DPs {layout}")
        return golden
    golden["world"] = _mimo_dp.check_world(built, ranks, mbs=case.mbs, gbs=case.gbs, steps=steps)
    if case.in_batch:
        packed = _mimo_dp.world(built, layout, seq=case.seq, mbs=case.mbs, gbs=case.gbs, steps=steps, pack=True, cp=cp)
        golden["packed"] = _mimo_pack.check(ranks, packed)
    return golden
