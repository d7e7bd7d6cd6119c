"""Property-based exploration of offline packed SFT: Hypothesis draws the data and the knobs.

The hand-written cases pin shapes their authors thought of; a packing bug lives where a length,
a knob and a layout meet in a way nobody listed. So Hypothesis draws an :class:`ExploredCase`:
the data (how many examples, how many words an answer has, the rate of overlong examples and
how long they are, pad tokens and end-of-turn tokens inside content, chat turns and system
prompts) and the knobs (preprocessing kind, pack size, ``pad_seq_to_mult``, ``pad_to_max_length``,
``pad_cu_seqlens``, answer-only or full loss, ``truncation_method``), and the case is built the way a user's data is,
through MB's dataset builder, and held to the differential oracle (packed == MB's own unpacked
path per real token, padding never trains, boundaries and alignment) and the documented shape
rule of ``pad_to_max_length``.

Answers hold no literal EOS by default (``eos=False``): MB 0.6.2's known EOS masking
(fixtures/known_failures.json) would otherwise be the first thing every exploration finds.

A drawn case prints as one JSON object (:func:`to_spec`): ``harness explore --replay SPEC``
runs it again, ``--save`` keeps it as a regression case (``<fixtures>/explored/<id>.json``) that
``harness run`` checks from then on, and that bisects like any other case.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.adapters import sft
from harness.oracle import corpus
from harness.oracle.impact import Impact, fail
from harness.records import explored
from suites import _oracle

KINDS = tuple(sft.KINDS)


@dataclass(frozen=True)
class ExploredCase(_oracle.SFTCase):
    """An :class:`~suites._oracle.SFTCase` whose corpus shape is drawn too."""

    min_words: int = 2
    max_words: int = 12
    long_words: int = 80
    pad_rate: float = 0.2
    turn_end_rate: float = 0.2
    max_turns: int = 3
    system_rate: float = 0.5
    eos: bool = False  # literal EOS inside answers (MB 0.6.2's known bug)

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


def cases(eos: bool = False) -> Any:
    """The Hypothesis strategy of explored cases."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d: Any) -> ExploredCase:
        seq = d(st.sampled_from((32, 64, 128)))
        min_words = d(st.integers(1, 6))
        pad_cu = d(st.booleans())
        kind = d(st.sampled_from(KINDS))
        fields = {
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
        return _named(ExploredCase(id="", **fields))

    return draw()


# fields added after cases were first saved, left out of a spec at their default so a saved spec keeps its id
_LATER = {"truncation_method": None}


def _fields(case: ExploredCase) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(case).items() if k != "id" and not (k in _LATER and v == _LATER[k])}


def _named(case: ExploredCase) -> ExploredCase:
    """The case with its id: derived from every field, so a spec and its full form name one case."""
    return dataclasses.replace(case, id=explored.case_id(_fields(case)))


def to_spec(case: ExploredCase) -> str:
    """One line of JSON that :func:`from_spec` turns back into the same case."""
    return explored.dumps(_fields(case))


def from_spec(text: str | dict[str, Any]) -> ExploredCase:
    """The case a spec names (an unknown field is a one-line error)."""
    doc = explored.parse(text) if isinstance(text, str) else text
    try:
        return _named(ExploredCase(id="", **doc))
    except TypeError as exc:
        raise ValueError(f"not an explored case spec ({exc})") from exc


def check(case: ExploredCase) -> _oracle.Built:
    """Build ``case`` through MB and hold it to the oracle and the documented shape rule."""
    b = _oracle.built(case)
    if case.pad_to_max_length:
        widths = [len(r.tokens) for r in b.rows]
        if any(w != case.seq for w in widths):
            # a fixed shape is what pipeline parallelism and CUDA graphs rely on: a ragged row crashes them
            raise fail(Impact.CRASH, f"pad_to_max_length pads every packed row to {case.seq}: row widths {widths}")
    b.report.assert_ok()
    return b


def saved(directory: Path) -> list[ExploredCase]:
    """The explored cases kept as regression cases (``harness explore --save``)."""
    return [from_spec(spec) for spec in explored.load_all(directory)]
