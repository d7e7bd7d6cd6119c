"""Seeded SFT examples shaped like users' data, written as the JSONL files MB's datasets read.

Two layouts, the ones MB's SFT datasets take from a local ``dataset_root``:

* ``prompt``: ``{"input": ..., "output": ...}`` rows (prompt template / prompt-completion paths;
  the prompt's key is ``prompt_key``: a user's own template names its own fields);
* ``chat``: ``{"messages": [...]}`` multi-turn conversations (chat-template path).

What real data has and a packing bug trips over: a genuine EOS inside an answer and as the last
answer token (a literal ``</s>``), the pad token inside content (a literal ``<pad>``), an
end-of-turn token inside an assistant turn, examples longer than the pack (MB truncates them),
several turns. Every example starts its first user text with a unique marker (``id<k>``) so the
oracle can tell packed segments apart by content. Each generator owns its
``random.Random(seed)``: inputs never depend on global random state.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from harness.suite.oracle.tokenizer import EOS, MARKERS, PAD, TURN_END, WORDS

SPLITS = ("training", "validation", "test")


@dataclass(frozen=True)
class CorpusSpec:
    """How many examples, how long, and how often the hard cases appear."""

    seed: int
    n: int = 12
    layout: str = "prompt"  # "prompt" or "chat"
    min_words: int = 2
    max_words: int = 12
    eos_inside_rate: float = 0.3  # an answer holds a literal EOS between words
    eos_last_rate: float = 0.25  # an answer ends with a literal EOS (then MB may add its own)
    pad_rate: float = 0.2  # content holds a literal pad token
    turn_end_rate: float = 0.2  # an assistant turn holds a literal end-of-turn token (chat)
    long_rate: float = 0.0  # an example longer than ``long_words`` words (truncated by MB)
    long_words: int = 80
    long_answer_rate: float = 0.0  # an answer longer than ``long_words`` words (prompt layout)
    prompt_key: str = "input"  # the prompt's field in a prompt-layout row
    max_turns: int = 3  # user/assistant pairs per conversation (chat)
    system_rate: float = 0.5  # a conversation starts with a system turn (chat)

    def __post_init__(self) -> None:
        if self.n > len(MARKERS):
            raise ValueError(f"at most {len(MARKERS)} examples (one unique marker each)")
        if self.layout not in ("prompt", "chat"):
            raise ValueError(f"unknown layout {self.layout!r}")


def _words(rng: random.Random, lo: int, hi: int) -> list[str]:
    return [rng.choice(WORDS[:150]) for _ in range(rng.randint(lo, hi))]


def _answer(rng: random.Random, spec: CorpusSpec, extra: str | None = None) -> str:
    # drawn only when asked for: every corpus written before the rate existed stays what it was
    long = bool(spec.long_answer_rate) and rng.random() < spec.long_answer_rate
    words = _words(rng, max(1, spec.min_words - 1), spec.long_words if long else spec.max_words)
    if rng.random() < spec.eos_inside_rate and len(words) > 1:
        words.insert(rng.randrange(1, len(words)), EOS)
    if rng.random() < spec.pad_rate:
        words.insert(rng.randrange(0, len(words) + 1), PAD)
    if extra and rng.random() < spec.turn_end_rate and len(words) > 1:
        words.insert(rng.randrange(1, len(words)), extra)
    if rng.random() < spec.eos_last_rate:
        words.append(EOS)
    return " ".join(words)


def _prompt(rng: random.Random, spec: CorpusSpec, k: int) -> str:
    hi = spec.long_words if rng.random() < spec.long_rate else spec.max_words
    words = [MARKERS[k]] + _words(rng, spec.min_words, hi)
    if rng.random() < spec.pad_rate:
        words.insert(rng.randrange(1, len(words) + 1), PAD)
    return " ".join(words)


def examples(spec: CorpusSpec) -> list[dict[str, object]]:
    """The spec's examples (the same list for the same spec, in every process)."""
    rng = random.Random(spec.seed)
    out: list[dict[str, object]] = []
    for k in range(spec.n):
        if spec.layout == "prompt":
            out.append({spec.prompt_key: _prompt(rng, spec, k), "output": _answer(rng, spec)})
            continue
        messages = []
        if rng.random() < spec.system_rate:
            messages.append({"role": "system", "content": " ".join(_words(rng, 1, 4))})
        for turn in range(rng.randint(1, spec.max_turns)):
            user = _prompt(rng, spec, k) if turn == 0 else " ".join(_words(rng, 1, spec.max_words))
            messages.append({"role": "user", "content": user})
            messages.append({"role": "assistant", "content": _answer(rng, spec, TURN_END)})
        out.append({"messages": messages})
    return out


def write_dataset_root(root: Path, spec: CorpusSpec) -> Path:
    """``training.jsonl``, ``validation.jsonl`` and ``test.jsonl`` under ``root`` (same rows each).

    MB's builders look for these names in ``dataset_root``; validation and test are only
    written so builders that open them find them.
    """
    root.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row) + "\n" for row in examples(spec))
    for split in SPLITS:
        (root / f"{split}.jsonl").write_text(text, encoding="utf-8")
    return root
