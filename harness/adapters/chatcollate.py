"""MB's text chat collate of direct Hugging Face SFT, and its rows as the oracle's examples.

Operation ``chat_collate(rows, processor, **kwargs)``: ``data/collators/sft.text_chat_collate_fn``
(the collate MB's direct-HF loader calls on ``messages`` rows); before its era: untestable.
:func:`collated_examples` reads an unpacked batch of it as reference examples, each row cut to its
real tokens (the collate's ``token_count``).
"""

from __future__ import annotations

from typing import Any

from harness.adapters import Candidate, Operation, symbol
from harness.oracle.records import Example


def _probe() -> Any:
    return symbol("megatron.bridge.data.collators.sft", "text_chat_collate_fn")


chat_collate = Operation(
    "text_chat_collate",
    [Candidate("data/collators/sft.text_chat_collate_fn", _probe)],
    before="no direct-HF chat collate",
)


def collated_examples(batch: dict[str, Any]) -> list[Example]:
    """An unpacked chat-collate batch as the oracle's examples (their real tokens only)."""
    out = []
    for r, n in enumerate(batch["token_count"]):
        tokens, labels, loss_mask, position_ids = (
            tuple(int(x) for x in batch[k][r, :n].tolist()) for k in ("tokens", "labels", "loss_mask", "position_ids")
        )
        out.append(Example(f"#{r}", tokens, labels, loss_mask, position_ids))
    return out
