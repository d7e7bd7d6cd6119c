"""MB's text collates of direct Hugging Face SFT, and their rows as the oracle's examples.

Operation ``chat_collate(rows, processor, **kwargs)``: ``data/collators/sft.text_chat_collate_fn``
(the collate MB's direct-HF loader calls on ``messages`` rows); before its era: untestable.
Operation ``prompt_completion_collate(rows, processor, preprocessing=..., **kwargs)``:
``data/collators/sft.text_prompt_completion_collate_fn`` (the one it calls on prompt-completion
rows); both are exported by ``megatron.bridge.data.collators`` for a user's own loader.
:func:`collated_examples` reads an unpacked batch of it as reference examples, each row cut to its
real tokens (the collate's ``token_count``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.records.oracle import Example
from harness.suite.adapters import Candidate, Operation, symbol

if TYPE_CHECKING:
    import torch


def _probe() -> Any:
    return symbol("megatron.bridge.data.collators.sft", "text_chat_collate_fn")


chat_collate = Operation(
    "text_chat_collate",
    [Candidate("data/collators/sft.text_chat_collate_fn", _probe)],
    before="no direct-HF chat collate",
)


def _prompt_completion_probe() -> Any:
    return symbol("megatron.bridge.data.collators.sft", "text_prompt_completion_collate_fn")


prompt_completion_collate = Operation(
    "text_prompt_completion_collate",
    [Candidate("data/collators/sft.text_prompt_completion_collate_fn", _prompt_completion_probe)],
    before="no direct-HF prompt-completion collate",
)


def collated_examples(batch: Mapping[str, torch.Tensor]) -> list[Example]:
    """An unpacked chat-collate batch as the oracle's examples (their real tokens only)."""
    out = []
    for r, n in enumerate(batch["token_count"]):
        tokens, labels, loss_mask, position_ids = (
            tuple(int(x) for x in batch[k][r, :n].tolist()) for k in ("tokens", "labels", "loss_mask", "position_ids")
        )
        out.append(Example(f"#{r}", tokens, labels, loss_mask, position_ids))
    return out
