"""Property-based exploration of offline packed SFT: Hypothesis draws the data and the knobs.

The hand-written cases pin shapes their authors thought of; a packing bug lives where a length, a
knob and a layout meet in a way nobody listed. So Hypothesis draws an :class:`ExploredCase`: the
data (how many examples, how many words an answer has, the rate of overlong examples and how long
they are, pad tokens and end-of-turn tokens inside content, chat turns and system prompts) and the
knobs (preprocessing kind, pack size, ``pad_seq_to_mult``, ``pad_to_max_length``,
``pad_cu_seqlens``, answer-only or full loss, ``truncation_method``, and in this space the
preparation's ``packing_algorithm``, whether the packed set is one file or several Parquet shards,
and the dataset's life: a root prepared before under another knob, a validation split beside the
training one, MB's loader over several epochs and a restart, suites/_explore_life.py), and the case
is built the way a user's data is, through MB's dataset builder, and held to the differential
oracle (packed == MB's own unpacked path per real token, padding never trains, boundaries and
alignment), the documented shape rule of ``pad_to_max_length``, and for shards the checks of the
``packed_files`` suite (suites/_shards.py).

Answers hold no literal EOS by default (``eos=False``): MB 0.6.2's known EOS masking
(fixtures/known_failures.json) would otherwise be the first thing every exploration finds.

:func:`layout_cases` draws the same data with one parallel layout or packing path on top
(:data:`AXES`): MB's CPU forward against its unpacked path, data parallelism (DP 2/4, micro and
global batch sizes) through MB's batch sampler, in-batch packing with the multiple MB chooses for
a (CP, TP, SP) layout, context parallelism (CP 2/4, with MB's documented ``pad_seq_to_mult`` of
``2*CP``; CP 2 also on two data-parallel ranks, through MB's own loader) and pipeline parallelism
(PP 3/4) in gloo worlds of CPU processes. Each is held to the checks of its hand-written suite
(suites/_forward.py, _dataparallel.py, _inbatch.py, _layouts.py, _dpcp.py), so a drawn layout is
judged exactly as a listed one; suites/_explore_check.py dispatches a drawn case of any space to
its checks.

A drawn case prints as one JSON object (:func:`to_spec`): ``harness explore --replay SPEC``
runs it again, ``--save`` keeps it as a regression case (``<fixtures>/explored/<id>.json``) that
``harness run`` checks from then on, and that bisects like any other case.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.records import explored
from harness.suite.adapters import sft
from harness.suite.oracle import corpus
from suites import _explore_life, _sftcases, _shards

KINDS = tuple(sft.KINDS)
# the layouts and packing paths a layout case draws one of, cheapest first (Hypothesis shrinks
# toward the first): MB's forward at CP 1, data parallelism, in-batch packing, CP, PP
AXES = ("forward", "dp", "in_batch", "cp", "pp")


@dataclass(frozen=True)
class ExploredCase(_sftcases.SFTCase):
    """An :class:`~suites._sftcases.SFTCase` whose corpus shape is drawn too."""

    min_words: int = 2
    max_words: int = 12
    long_words: int = 80
    pad_rate: float = 0.2
    turn_end_rate: float = 0.2
    max_turns: int = 3
    system_rate: float = 0.5
    eos: bool = False  # literal EOS inside answers (MB 0.6.2's known bug)
    # one layout or packing path on top of the data (layout_cases); the defaults: none
    forward: bool = False  # MB's gpt_step forward of each pack == each example's unpacked forward
    # data-parallel ranks sampling the packed rows (MB's batch sampler, drop_last=False); with cp > 1 a DP x CP
    # world training through MB's own loader (the dataset config's drop_last: MB's default, or off)
    dp: int = 1
    mbs: int = 1  # micro-batch size (data parallelism; rows per in-batch packed micro-batch)
    gbs: int = 0  # global batch size (data parallelism; a multiple of mbs * dp)
    keep_last: bool = False  # DP x CP world: the dataset config's drop_last off (the last global batch padded)
    in_batch: bool = False  # MB's unpacked examples packed in batch instead of offline (MIMO: in MB's step)
    cp: int = 1  # context parallelism (offline: a gloo world; in batch: the multiple MB chooses)
    tp: int = 1  # tensor parallelism (in batch: the multiple MB chooses with sequence parallelism)
    sp: bool = False  # sequence parallelism
    pp: int = 1  # pipeline stages (a gloo world)
    # MB's direct Hugging Face SFT path instead (suites/_explore_direct.py): the rows as a user's JSONL through
    # DirectHFSFTDatasetConfig and its text collate; mult is the user's pad multiple there
    direct: bool = False
    # the packed set read back as this many Parquet shards named by a glob (suites/_shards.py; 1: MB's one file)
    shards: int = 1
    # the dataset's life (suites/_explore_life.py): the root prepared before with this knob set otherwise ("": a
    # fresh root), and a validation split prepared into it from other rows
    reprepared: str = ""
    validation: bool = False
    # and a run's life past its first epoch (suites/_epochs.py): MB's loader of this kind ("": none) over the
    # packed rows for this many epochs (loader_batch: its global batch, keep_last: drop_last off), restarted
    # from a checkpoint after this many steps (0: no restart)
    loader: str = ""
    loader_batch: int = 1
    epochs: int = 1
    resume: int = 0
    # pretraining instead (suites/_explore_pretrain.py): n documents packed into samples of seq tokens by
    # megatron-core's GPTDataset through MB's GPTDatasetConfig, with its packing knobs
    pretrain: bool = False
    eod_mask_loss: bool = False
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    keep_partial_validation: bool = False  # drop_last_partial_validation_sequence=False
    step: str = ""  # with reset_attention_mask: MB's gpt_step variant whose model input is checked (_pretrain.STEP)
    # MB's Energon VLM data path instead (suites/_explore_energon.py): n image/chat samples with answers of up to
    # max_words words through Energon's loader and a task encoder; in_batch, mult, pad_to_max_length, mbs, seq and
    # shards are its loader knobs
    energon: bool = False
    encoder: str = "hf"  # the task encoder: MB's HF encoder or the model-owned "qwen-vl" one
    defer: bool = False  # with in_batch: defer_in_batch_packing_to_step
    multi_turn_rate: float = 0.3  # the share of samples with a second turn
    # MB's MegatronMIMO path instead (suites/_explore_mimo.py): n marked texts with one image each through MB's
    # Hugging Face MIMO provider, its loader and its MIMO forward step; mbs, gbs and seq are its training's
    mimo: bool = False
    encoder_length: int = 0  # placeholders per image (encoder_seq_lengths); 0: MB's default, no length named
    module_dps: str = ""  # "E-L": the encoder's and the language module's data-parallel sizes; "": the loader alone
    # a whole packing configuration for MB's validate() instead (suites/_explore_config.py): the fields of
    # harness.suite.adapters.config.PackingConfigSpec that differ from its defaults; no data
    config: dict[str, Any] = field(default_factory=dict, hash=False)  # compared, but a dict has no hash

    @property
    def axis(self) -> str | None:
        """The layout or packing path this case runs on top of its data (None: offline, world of one)."""
        other = explored.marked({s.field: getattr(self, s.field) for s in explored.MARKED if s.field})
        if other is not None:  # another data path or a configuration (the registry, harness/records/explored.py)
            return other.name
        if self.in_batch:
            return "in_batch"
        if self.dp > 1 and self.cp > 1:
            return "dp_cp"
        for name, on in (("forward", self.forward), ("dp", self.dp > 1), ("cp", self.cp > 1), ("pp", self.pp > 1)):
            if on:
                return name
        return None

    @property
    def corpus(self) -> corpus.CorpusSpec:
        return corpus.CorpusSpec(
            seed=self.seed,
            n=self.n,
            layout="chat" if self.kind == "chat" else "prompt",
            min_words=self.min_words,
            max_words=self.max_words,
            eos_inside_rate=0.3 if self.eos else 0.0,
            eos_last_rate=0.25 if self.eos else 0.0,
            pad_rate=self.pad_rate,
            turn_end_rate=self.turn_end_rate,
            long_rate=self.long_rate,
            long_words=self.long_words,
            max_turns=self.max_turns,
            system_rate=self.system_rate,
        )


SEQS = (32, 64, 128)
# MB's unpacked reference rows are collated wider than the pack: the tiny model's learned position
# table (harness.suite.adapters.forward.MAX_POS = 128 positions) holds them for packs up to 64
FORWARD_SEQS = (32, 64)


def draw_data(d: Any, eos: bool, seqs: tuple[int, ...] = SEQS) -> dict[str, Any]:
    """Draw the data shape and the offline packing knobs of a case."""
    from hypothesis import strategies as st

    seq = d(st.sampled_from(seqs))
    min_words = d(st.integers(1, 6))
    pad_cu = d(st.booleans())
    kind = d(st.sampled_from(KINDS))
    return {
        "seed": d(st.integers(0, 2**31 - 1)),
        "kind": kind,
        # the side an overlong prompt is cut on (chat preprocessing has no such knob)
        "truncation_method": None if kind == "chat" else d(st.sampled_from((None, "left", "right"))),
        "mult": d(st.sampled_from((1, 2, 4, 8))),
        "full_loss": d(st.booleans()),
        "pad_cu_seqlens": pad_cu,
        "pad_to_max_length": pad_cu or d(st.booleans()),  # MB's rule: pad_cu_seqlens needs it
        "n": d(st.integers(1, 20)),
        "long_rate": d(st.sampled_from((0.0, 0.25, 1.0))),
        "seq": seq,
        "min_words": min_words,
        "max_words": d(st.integers(min_words, 20)),
        # around the boundary values (the pack length, one under, one over) and far past it
        "long_words": d(st.sampled_from((seq // 4, seq - 2, seq - 1, seq, seq + 1, 2 * seq))),
        "pad_rate": d(st.sampled_from((0.0, 0.2, 0.6))),
        "turn_end_rate": d(st.sampled_from((0.0, 0.2, 0.6))),
        "max_turns": d(st.integers(1, 4)),
        "system_rate": d(st.sampled_from((0.0, 0.5, 1.0))),
        "eos": eos,
    }


def _layout(d: Any, axis: str) -> dict[str, Any]:
    """Draw the knobs one layout or packing path (:data:`AXES`) brings."""
    from hypothesis import strategies as st

    if axis == "forward":
        return {"forward": True}
    if axis == "dp":
        dp, mbs = d(st.sampled_from((2, 4))), d(st.integers(1, 2))
        return {"dp": dp, "mbs": mbs, "gbs": dp * mbs * d(st.integers(1, 3))}
    if axis == "in_batch":
        tp = d(st.sampled_from((1, 2, 3)))
        return {
            "in_batch": True,
            "cp": d(st.sampled_from((1, 2, 4))),
            "tp": tp,
            "sp": tp > 1 and d(st.booleans()),
            "mbs": d(st.integers(1, 6)),
            # offline packing's knobs do not reach in-batch packing: held at their defaults
            "mult": 1,
            "pad_to_max_length": False,
            "pad_cu_seqlens": False,
        }
    if axis == "cp":
        cp = d(st.sampled_from((2, 4)))
        out: dict[str, Any] = {"cp": cp, "mult": 2 * cp}  # MB documents pad_seq_to_mult = 2*CP for THD with CP
        # CP 2 on two data-parallel ranks too (a world of four: suites/_dpcp.py), shrunk toward a world of
        # CP alone; like any new draw it changes which cases a seed draws after it
        if cp == 2 and d(st.booleans()):
            out.update(dp=2, gbs=2, keep_last=d(st.booleans()))
        return out
    return {"pp": d(st.sampled_from((3, 4)))}


def cases(eos: bool = False) -> Any:
    """The Hypothesis strategy of explored cases: data and offline packing knobs, world of one."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: Any) -> ExploredCase:
        fields = draw_data(d, eos)
        # the algorithm MB's preparation packs with (None: its default, first_fit_shuffle); drawn last,
        # and in this space only, so the layouts space draws what it drew before
        fields["packing_algorithm"] = d(st.sampled_from((None, "first_fit_decreasing")))
        # then how many shards the packed set is read back from (an MB without Parquet shards: one file)
        fields["shards"] = d(st.sampled_from((1, 2, 3))) if _shards.available() else 1
        # then the dataset's life: a root prepared before under another knob, a validation split beside it
        # (not with an algorithm of the harness's choosing: a root MB rightly reuses is packed by no call it sees)
        fields["reprepared"] = d(st.sampled_from(("", *_explore_life.KNOBS))) if not fields["packing_algorithm"] else ""
        fields["validation"] = d(st.booleans())
        fields["loader"] = d(st.sampled_from(("", "batch", "cyclic")))
        if fields["loader"]:
            fields["loader_batch"] = d(st.integers(1, 3))
            fields["keep_last"] = fields["loader"] == "batch" and d(st.booleans())  # a cyclic loader drops it
            fields["epochs"] = d(st.integers(1, 3))
            fields["resume"] = d(st.integers(0, 3))
        # then the length caps: a pack size a few tokens off the multiple (MB caps a segment at the largest
        # multiple that fits), one example's cap below the pack (max_single_sequence_length; an MB without it:
        # the case is drawn again), each at, just past and well below the examples' lengths
        fields["seq"] += d(st.sampled_from((0, 1, 2, 3)))
        cap = d(st.sampled_from((None, "half", "under-multiple", "one-under")))
        if cap is not None and not fields["reprepared"]:
            seq, mult = fields["seq"], fields["mult"]
            fields["max_single"] = {"half": seq // 2, "under-multiple": seq - mult, "one-under": seq - 1}[cap]
        return named(ExploredCase(id="", **fields))

    return draw()


def layout_cases(eos: bool = False) -> Any:
    """The Hypothesis strategy of explored cases with one layout or packing path (:data:`AXES`)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: Any) -> ExploredCase:
        axis = d(st.sampled_from(AXES))
        fields = draw_data(d, eos, FORWARD_SEQS if axis == "forward" else SEQS)
        fields.update(_layout(d, axis))
        return named(ExploredCase(id="", **fields))

    return draw()


# fields added after cases were first saved, left out of a spec at their default so a saved spec keeps its id
# (every layout field: a data case's spec carries none of them)
_LATER: dict[str, Any] = {
    "truncation_method": None,
    "packing_algorithm": None,
    "truncation_field": None,
    "prompt_key": "input",
    "long_answer_rate": 0.0,
    "max_single": None,
    "other_tokenizer": False,
    "chat_template": None,
    "shards": 1,
    "reprepared": "",
    "validation": False,
    "loader": "",
    "loader_batch": 1,
    "epochs": 1,
    "resume": 0,
    "eod_mask_loss": False,
    "reset_position_ids": False,
    "reset_attention_mask": False,
    "keep_partial_validation": False,
    "step": "",
    "encoder": "hf",
    "defer": False,
    "multi_turn_rate": 0.3,
    "encoder_length": 0,
    "module_dps": "",
    "config": {},
    **explored.LAYOUT_DEFAULTS,
    "mbs": 1,
    "gbs": 0,
    "tp": 1,
    "sp": False,
    "keep_last": False,
}


def _fields(case: ExploredCase) -> dict[str, Any]:
    if case.config:  # a configuration has no data: its spec is the config (and the seed every case has)
        return {"config": dict(case.config), "seed": case.seed}
    return {k: v for k, v in dataclasses.asdict(case).items() if k != "id" and not (k in _LATER and v == _LATER[k])}


def named(case: ExploredCase) -> ExploredCase:
    """The case with its id: derived from every field, so a spec and its full form name one case."""
    return dataclasses.replace(case, id=explored.case_id(_fields(case)))


def to_spec(case: ExploredCase) -> str:
    """One line of JSON that :func:`from_spec` turns back into the same case."""
    return explored.dumps(_fields(case))


def from_spec(text: str | dict[str, Any]) -> ExploredCase:
    """The case a spec names (an unknown field is a one-line error)."""
    doc = explored.parse(text) if isinstance(text, str) else text
    try:
        return named(ExploredCase(id="", **doc))
    except TypeError as exc:
        raise ValueError(f"not an explored case spec ({exc})") from exc


def saved(directory: Path) -> list[ExploredCase]:
    """The explored cases kept as regression cases (``harness explore --save``), each named by the id its
    file has: the id of the spec as saved (a spec that leaves fields at their defaults out names the same
    case as the full one, but its file, the test id and the golden all carry the one id ``--save`` printed)."""
    return [dataclasses.replace(from_spec(spec), id=explored.case_id(spec)) for spec in explored.load_all(directory)]
