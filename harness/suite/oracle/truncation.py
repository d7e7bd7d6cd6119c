"""Which side of an overlong example MB kept: a truncated example against the same example untruncated.

MB cuts an example that does not fit ``seq_length`` in the field its ``truncation_field`` names
(``GPTSFTDataset``; MB's builder names the prompt, ``input``; prompt-completion preprocessing cuts
its prompt), on the side ``truncation_method`` names: ``right`` keeps the field's beginning,
``left`` its end. While the prompt absorbs the cut, every answer token still trains; when the
field is the answer (``truncation_field="output"``), the prompt stays whole and the answer's named
side trains. Rows are read as MB emits them: a loss mask aligned with the shifted labels, so the
first trained position ``i`` trains the token at ``i + 1``, the first answer token.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.records.impact import Impact, ImpactFailure


def split(tokens: Sequence[int], loss_mask: Sequence[float]) -> tuple[list[int], list[int]]:
    """An answer-only row's context (up to and including the last untrained input) and its answer."""
    first = next((i for i, m in enumerate(loss_mask) if m), len(tokens) - 1)
    return list(tokens[: first + 1]), list(tokens[first + 1 :])


def check_kept_side(
    what: str,
    full: tuple[Sequence[int], Sequence[float]],
    cut: tuple[Sequence[int], Sequence[float]],
    method: str,
) -> bool:
    """Raise when ``cut`` (tokens, loss mask) kept the wrong side of ``full``'s prompt or lost an answer
    token while the prompt could still absorb the cut; False when nothing was cut."""
    if list(cut[0]) == list(full[0]):
        return False
    (ctx, answer), (full_ctx, full_answer) = split(*cut), split(*full)
    if not ctx or len(ctx) >= len(full_ctx):  # the answer itself was cut: no prompt side to judge
        return True
    kept = full_ctx[-len(ctx) :] if method == "left" else full_ctx[: len(ctx)]
    if ctx != kept:
        raise ImpactFailure(
            f"{what}: truncation_method={method!r} kept prompt {ctx}, expected {kept} of {full_ctx}",
            Impact.WRONG_TARGETS,
        )
    if answer != full_answer:
        raise ImpactFailure(
            f"{what}: answer {answer} after truncating the prompt, untruncated {full_answer}",
            Impact.DROPS_TRAINED_TOKEN,
        )
    return True


def check_cut_answer(
    what: str,
    full: tuple[Sequence[int], Sequence[float]],
    cut: tuple[Sequence[int], Sequence[float]],
    method: str,
) -> bool:
    """Raise when ``cut`` (tokens, loss mask), whose named truncation field is the answer, lost prompt
    tokens or kept the wrong side of ``full``'s answer; False when nothing was cut."""
    if list(cut[0]) == list(full[0]):
        return False
    (ctx, answer), (full_ctx, full_answer) = split(*cut), split(*full)
    if not answer:  # an answer shorter than the cut goes whole, then the prompt: no answer side to judge
        return True
    if ctx != full_ctx:
        raise ImpactFailure(
            f"{what}: prompt {ctx} cut to {len(ctx)} of {len(full_ctx)} tokens, but truncation_field names the answer",
            Impact.WRONG_TARGETS,
        )
    kept = full_answer[-len(answer) :] if method == "left" else full_answer[: len(answer)]
    if answer != kept:
        raise ImpactFailure(
            f"{what}: truncation_method={method!r} trained answer {answer}, expected {kept} of {full_answer}",
            Impact.WRONG_TARGETS,
        )
    return True
