"""The direct space of exploration: the drawn data through MB's direct Hugging Face SFT path.

Another dataset class (``DirectSFTDataset`` over a user's JSONL, ``DirectHFSFTDatasetConfig``)
and MB's text collates, with their knobs drawn: ``pad_to_multiple_of`` (MB's default 128
included), ``pad_to_max_length``, in-batch packing in the collate and its multiple, and an
optional (CP, TP, SP) layout whose multiples MB's config finalisation chooses, with 1 or 2
pipeline stages on top (rows then ``seq_length`` wide: the fixed shape stages exchange). A drawn case is an
:class:`~suites._explore.ExploredCase` with ``direct=True``, judged by the checks of the
``direct_sft`` suite (suites/_directsft.py).
"""

from __future__ import annotations

from typing import Any

from harness.suite.oracle import corpus
from suites._explore import ExploredCase, draw_data, named

# the direct path's preprocessing kinds: prompt-completion columns or chat messages (no prompt template)
DIRECT_KINDS = ("completion", "chat")


def direct_cases(eos: bool = False) -> Any:
    """The Hypothesis strategy of the direct space: the same data through MB's direct HF SFT path
    (another dataset class, ``DirectSFTDataset``, and the text collates), with its collate knobs
    (``pad_to_multiple_of``, ``pad_to_max_length``, in-batch packing and its multiple) and an
    optional (CP, TP, SP) layout MB's config finalisation chooses the multiples for."""
    from hypothesis import strategies as st

    from harness.suite.adapters import vlmstep  # torch: not at collection, where the light suite process has none

    @st.composite
    def draw(d: Any) -> ExploredCase:
        fields = draw_data(d, eos)
        kind = d(st.sampled_from(DIRECT_KINDS))
        in_batch, layout = d(st.booleans()), d(st.booleans())
        cp = d(st.sampled_from((1, 2, 4))) if layout else 1
        tp = d(st.sampled_from((1, 2, 3))) if layout else 1
        sp = tp > 1 and d(st.booleans())
        # MB's rule: seq_length divisible by the CP/SP collate multiple. The drawn pack size is rounded up to
        # the documented multiple (data the user sizes), never the multiple MB chooses for the collate
        split = vlmstep.in_batch_multiple(cp, tp, sp)
        fields.update(
            kind=kind,
            truncation_method=fields["truncation_method"] if kind != "chat" else None,
            full_loss=False,  # the direct path trains what its preprocessing's default loss mode marks
            pad_cu_seqlens=False,  # offline packing's knob: no meaning here
            pad_to_max_length=not in_batch and fields["pad_to_max_length"],
            mult=d(st.sampled_from((1, 2, 8, 128))),  # 128: MB's default pad_to_multiple_of
            direct=True,
            in_batch=in_batch,
            cp=cp,
            tp=tp,
            sp=sp,
            seq=-(-fields["seq"] // split) * split,
            # pipeline stages on top of a drawn layout (MB's finalisation then forces every row to
            # seq_length); drawn last, so the draws before it are what they were
            pp=d(st.sampled_from((1, 2))) if layout else 1,
        )
        return named(ExploredCase(id="", **fields))

    return draw()


def direct_request(case: ExploredCase) -> Any:
    """The direct-HF request ``case`` names: its rows, MB's offline tokenizer as the processor."""
    from harness.suite.adapters.directsft import DirectSFTRequest
    from harness.suite.oracle import tokenizer

    if case.in_batch:
        knobs: dict[str, Any] = {"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": case.mult}
    else:
        knobs = {"pad_to_multiple_of": case.mult, "pad_to_max_length": case.pad_to_max_length}
    layout = (case.cp, case.tp, case.sp) if (case.cp, case.tp) != (1, 1) else None
    return DirectSFTRequest(
        tuple(corpus.examples(case.corpus)),
        tokenizer.write_tokenizer_dir(),
        case.seq,
        kind=case.kind,
        layout=layout,
        truncation_method=case.truncation_method,
        knobs=knobs,
        pipeline=case.pp,
    )
