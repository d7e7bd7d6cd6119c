"""Offline packed SFT cases built through MB's own data path, and the oracle's view of them.

A :class:`SFTCase` is what a user configures: the data (a seeded corpus written as JSONL), the
preprocessing (prompt template, prompt-completion, chat template), the loss policy, the offline
packing specs and the tokenizer. :func:`built` runs MB's builder twice on it (packed, and with
the unpacked reference captured from MB's own packing preparation) and compares them with the
differential oracle; results are cached per process so the forward suites reuse the same builds.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import mbtokenizer, sft
from harness.suite.oracle import corpus, differential, tokenizer

SEQ = 64  # sequence length = pack size: every example that fits a sequence fits a pack


@dataclass(frozen=True)
class SFTCase:
    id: str
    seed: int
    kind: str = "prompt"  # sft.KINDS
    mult: int = 1  # pad_seq_to_mult (2 * CP for THD context parallelism)
    full_loss: bool = False
    pad_to_max_length: bool = False
    pad_cu_seqlens: bool = False
    distinct_eod: bool = False
    n: int = 14
    long_rate: float = 0.1
    max_samples: int | None = None  # max_train_samples: a samples mapping over the packed rows
    mb_seed: int | None = None  # the seed MB is configured with (default: the corpus seed)
    seq: int = SEQ  # sequence length = pack size (exploration varies it)
    truncation_method: str | None = None  # an overlong prompt cut "left" or "right" (None: MB's default)
    packing_algorithm: str | None = None  # handed to MB's packing preparation (None: MB's default)
    truncation_field: str | None = None  # the template field cut first (None: MB's builder default, the prompt)
    prompt_key: str = "input"  # the rows' prompt field (a user's own template "{<key>} {output}")
    long_answer_rate: float = 0.0  # answers longer than the pack (for a cut answer field)
    max_single: int | None = None  # max_single_sequence_length (None: MB's default, the sequence length)
    other_tokenizer: bool = False  # a second tokenizer: the same text under other ids (tokenizer.vocab)
    chat_template: str | None = None  # the user's own TokenizerConfig.chat_template (None: the shipped one)

    @property
    def corpus(self) -> corpus.CorpusSpec:
        layout = "chat" if self.kind == "chat" else "prompt"
        return corpus.CorpusSpec(
            seed=self.seed,
            n=self.n,
            layout=layout,
            long_rate=self.long_rate,
            long_answer_rate=self.long_answer_rate,
            prompt_key=self.prompt_key,
        )

    @property
    def packing(self) -> sft.OfflinePacking:
        return sft.OfflinePacking(
            self.seq,
            self.mult,
            self.pad_cu_seqlens,
            self.pad_to_max_length or self.pad_cu_seqlens,
            algorithm=self.packing_algorithm,
            max_single=self.max_single,
        )


@dataclass(frozen=True)
class CleanCase(SFTCase):
    """An SFT case whose answers hold no literal EOS (so 0.6.2's EOS handling is never reached).

    MB 0.6.2's packed collate masks genuine EOS inputs by token id and cuts logical boundaries at
    a segment's last non-EOS token; these inputs avoid both, so a check of something else (the
    forward machinery, the data-parallel sampler) is shown to pass where MB is right and cannot
    be hidden by that known bug.
    """

    @property
    def corpus(self) -> corpus.CorpusSpec:
        base = super().corpus
        return corpus.CorpusSpec(
            seed=base.seed,
            n=base.n,
            layout=base.layout,
            long_rate=base.long_rate,
            long_answer_rate=base.long_answer_rate,
            prompt_key=base.prompt_key,
            eos_inside_rate=0.0,
            eos_last_rate=0.0,
        )


def _cases() -> list[SFTCase]:
    out = []
    for k, kind in enumerate(sft.KINDS):
        for mult in (1, 2, 4, 8):
            out.append(SFTCase(f"{kind}-mult{mult}", seed=10 * k + mult, kind=kind, mult=mult))
        out.append(SFTCase(f"{kind}-mult1-full-loss", seed=10 * k + 5, kind=kind, full_loss=True))
        out.append(SFTCase(f"{kind}-mult4-full-loss", seed=10 * k + 6, kind=kind, mult=4, full_loss=True))
        out.append(SFTCase(f"{kind}-mult1-eod-not-eos", seed=10 * k + 7, kind=kind, distinct_eod=True))
        out.append(SFTCase(f"{kind}-mult4-eod-not-eos", seed=10 * k + 9, kind=kind, mult=4, distinct_eod=True))
    out.append(SFTCase("prompt-mult2-pad-to-max", seed=41, mult=2, pad_to_max_length=True))
    out.append(SFTCase("chat-mult4-pad-to-max", seed=42, kind="chat", mult=4, pad_to_max_length=True))
    return out


CASES = _cases()
FIXED_SHAPE_CASES = [
    SFTCase("prompt-mult1-pad-cu-seqlens", seed=51, pad_cu_seqlens=True, n=24),
    SFTCase("chat-mult4-pad-cu-seqlens", seed=52, kind="chat", mult=4, pad_cu_seqlens=True, n=24),
]
# no example near the pack size: a short last pack leaves a tail-padding segment longer than any
# sequence, which pad_cu_seqlens' static max_seqlen must still bound (offline suite only)
SHORT_PACK_CASES = [
    SFTCase("prompt-mult2-pad-cu-seqlens-short", seed=53, mult=2, pad_cu_seqlens=True, n=24, long_rate=0.0),
]


# the preparation's packing_algorithm, as a user who packs offline with it passes it: "first_fit_shuffle"
# (MB's default, named) and "first_fit_decreasing" (the other algorithm it documents); answers without
# a literal EOS, so 0.6.2's EOS masking (a known bug of its own) cannot hide what the algorithm does
ALGORITHM_CASES = [
    CleanCase("prompt-mult2-first-fit-decreasing", seed=61, mult=2, packing_algorithm="first_fit_decreasing"),
    CleanCase(
        "chat-mult4-first-fit-decreasing", seed=62, kind="chat", mult=4, packing_algorithm="first_fit_decreasing"
    ),
    CleanCase(
        "completion-mult1-first-fit-shuffle-named", seed=63, kind="completion", packing_algorithm="first_fit_shuffle"
    ),
]


HYPOTHETICAL_EOD = (
    "a tokenizer whose eod differs from eos_id: no tokenizer MB ships (HF, SentencePiece, tiktoken, "
    "byte-level) answers eod != eos_id, so this is the real tokenizer re-classed"
)


def case_param(case: SFTCase, *values: Any, id: str | None = None) -> Any:
    """``pytest.param`` of ``case`` (and any further values), in the hypothetical tier when its
    input needs a tokenizer MB does not ship: such cases run and are reported apart, never failing
    a run or a nightly."""
    import pytest

    marks = [pytest.mark.hypothetical(HYPOTHETICAL_EOD)] if case.distinct_eod else []
    return pytest.param(case, *values, id=id or case.id, marks=marks)


@functools.cache
def load_tokenizer(distinct_eod: bool = False, other_ids: bool = False, chat_template: str | None = None) -> Any:
    """MB's tokenizer over the offline tokenizer directory (the eod wrapper when asked; the second
    tokenizer with ``other_ids``; the user's own ``chat_template``)."""
    directory = tokenizer.write_tokenizer_dir(other_ids=other_ids)
    tok = (
        mbtokenizer.load_tokenizer(directory, chat_template) if chat_template else mbtokenizer.load_tokenizer(directory)
    )
    return tokenizer.with_distinct_eod(tok) if distinct_eod else tok


def case_tokenizer(case: SFTCase) -> Any:
    """The tokenizer ``case`` configures MB with."""
    return load_tokenizer(case.distinct_eod, case.other_tokenizer, case.chat_template)


@dataclass
class Built:
    case: SFTCase
    build: sft.SFTBuild
    examples: list[differential.Example]
    rows: list[differential.PackedRow]
    batches: list[dict[str, Any]]  # one collated micro-batch per packed row (offline packing: MBS 1)
    report: differential.Report
    special_ids: dict[str, int | None] = field(default_factory=dict)

    @property
    def padding_ids(self) -> set[int]:
        return {v for v in self.special_ids.values() if v is not None}


def _workdir(name: str) -> Path:
    """A fresh directory per build: MB's builder reuses packed artifacts it finds in dataset_root."""
    return Path(tempfile.mkdtemp(prefix=f"harness-sft-{name}-"))


def compare(
    case: SFTCase,
    examples: list[differential.Example],
    rows: list[differential.PackedRow],
    special_ids: dict[str, int | None],
    *,
    expect_all_packed: bool = True,
) -> differential.Report:
    pads = {v for v in special_ids.values() if v is not None}
    return differential.compare(
        rows,
        examples,
        pad_seq_to_mult=case.mult,
        padding_ids=pads,
        static_max_seqlen=case.pad_cu_seqlens,
        expect_all_packed=expect_all_packed,
        pack_size=case.max_single or case.seq,  # MB skips an example past one example's cap as past the pack
        special_ids=special_ids,
    )


def request(case: SFTCase, root: Path, **over: Any) -> sft.SFTRequest:
    """The SFT request ``case`` configures over the dataset written at ``root`` (fields overridable)."""
    fields: dict[str, Any] = {
        "kind": case.kind,
        "full_loss": case.full_loss,
        "packing": case.packing,
        "seed": case.seed if case.mb_seed is None else case.mb_seed,
        "max_train_samples": case.max_samples,
        "truncation_method": case.truncation_method,
        "truncation_field": case.truncation_field,
        "prompt_key": case.prompt_key,
    }
    fields.update(over)
    return sft.SFTRequest(root, case_tokenizer(case), case.seq, **fields)


def collated_rows(ds: Any) -> tuple[list[dict[str, Any]], list[differential.PackedRow]]:
    """Every packed row of ``ds``, each collated alone through its own ``collate_fn`` (MBS 1)."""
    batches = [ds.collate_fn([ds[i]]) for i in range(len(ds))]
    return batches, [row for b in batches for row in batch_ops.packed_rows(b)]


@functools.cache
def built(case: SFTCase, constructor: bool = False) -> Built:
    """Build ``case`` through MB (packed + captured unpacked reference) and run the oracle.
    ``constructor``: through the keyword-argument ``FinetuningDatasetBuilder`` instead."""
    root = corpus.write_dataset_root(_workdir(case.id), case.corpus)
    result = (sft.build_sft_constructor if constructor else sft.build_sft)(request(case, root))
    if result.prep_reference is None:
        raise AssertionError("MB's packing preparation built no unpacked dataset the oracle could read")
    examples = batch_ops.unpacked_examples(result.prep_reference)
    batches, rows = collated_rows(result.train)
    ids = tokenizer.special_ids(case_tokenizer(case))
    return Built(case, result, examples, rows, batches, compare(case, examples, rows, ids), ids)


def cut_at(example: differential.Example, n: int) -> differential.Example:
    """``example``'s first ``n`` runtime positions: what a packed segment keeps under a cap of ``n``."""
    return replace(
        example,
        tokens=example.tokens[:n],
        labels=example.labels[:n],
        loss_mask=example.loss_mask[:n],
        position_ids=example.position_ids[:n],
        length=min(example.length, n),
    )


def at_the_cap(b: Built) -> tuple[str, differential.Report, list[differential.Example]]:
    """How ``b``'s packed rows are held when its pack size is not a multiple of ``pad_seq_to_mult``:
    the reading, its report and the examples it holds the rows to. MB's preparation caps a runtime
    segment at the largest multiple that fits and keeps an example's first ``cap`` tokens (0.6);
    earlier releases kept an example whole up to the pack size. The rows are held to the reading
    that explains them best, and the alignment invariant judges it either way. A pack size that is
    a multiple: the plain report. With ``max_single`` the cap is the largest multiple of that one
    example's cap (:func:`reference` already reads MB's unpacked examples at it): nothing else
    explains MB's rows, so they are held to that reading alone."""
    case = b.case
    limit = case.max_single or case.seq
    cap = limit // case.mult * case.mult
    if cap == limit:
        return "whole", b.report, b.examples
    capped = [cut_at(ex, cap) for ex in b.examples]
    cut = compare(case, capped, b.rows, b.special_ids)
    if case.max_single or len(cut.violations) <= len(b.report.violations):
        return f"cut at {cap}", cut, capped
    return f"whole up to {case.seq}", b.report, b.examples


def unpacked_case(case: SFTCase) -> SFTCase:
    return replace(case, id=case.id + "-unpacked")


def canonical_rows(rows: list[differential.PackedRow]) -> list[dict[str, Any]]:
    """Era-independent golden form: boundary row padding trimmed, physical = logical when absent."""
    out = []
    for r in rows:
        q = differential.strip_row_padding(r.cu_seqlens_q) if r.cu_seqlens_q is not None else None
        qp = differential.strip_row_padding(r.cu_seqlens_q_padded) if r.cu_seqlens_q_padded is not None else q
        out.append(
            {
                "tokens": list(r.tokens),
                "labels": list(r.labels),
                "loss_mask": list(r.loss_mask),
                "position_ids": list(r.position_ids),
                "cu_seqlens_q": q,
                "cu_seqlens_q_padded": qp,
                "max_seqlen_q": r.max_seqlen_q,
            }
        )
    return out


@functools.cache
def reference(case: SFTCase) -> tuple[differential.Example, ...]:
    """MB's unpacked split for ``case`` (what a user without packing trains on), as examples. With
    ``max_single``, the user's sequence length is that cap, as MB's packing preparation reads it: a
    cap on the stored example (runtime one token shorter) without alignment, on the runtime
    sequence after the next-token shift with ``pad_seq_to_mult > 1`` (its preparation stores one
    token more); the tail past the aligned cap is :func:`cut_at`'s to take."""
    root = corpus.write_dataset_root(_workdir(case.id + "-unpacked"), case.corpus)
    at = replace(case, seq=case.max_single + (1 if case.mult > 1 else 0)) if case.max_single else case
    result = sft.build_sft(request(at, root, packing=None, max_train_samples=None, seed=case.seed))
    return tuple(batch_ops.unpacked_examples(result.unpacked))


def right_padded(examples: list[differential.Example], pad_id: int, ignore_index: int) -> dict[str, Any]:
    """A right-padded micro-batch of MB's unpacked examples, as a VLM collate hands it to in-batch
    packing: padding = ``pad_id`` tokens, ``ignore_index`` labels, loss mask 0, and a padding mask
    (``attention_mask``), because content may itself hold the pad id."""
    import torch

    width = max(len(ex.tokens) for ex in examples)
    rows = len(examples)
    out = {
        "tokens": torch.full((rows, width), pad_id, dtype=torch.long),
        "labels": torch.full((rows, width), ignore_index, dtype=torch.long),
        "loss_mask": torch.zeros((rows, width), dtype=torch.float),
        "position_ids": torch.zeros((rows, width), dtype=torch.long),
        "attention_mask": torch.zeros((rows, width), dtype=torch.bool),
    }
    for r, ex in enumerate(examples):
        n = len(ex.tokens)
        out["tokens"][r, :n] = torch.tensor(ex.tokens)
        out["labels"][r, :n] = torch.tensor(ex.labels)
        out["loss_mask"][r, :n] = torch.tensor(ex.loss_mask, dtype=torch.float)
        out["position_ids"][r, :n] = torch.tensor(ex.position_ids)
        out["attention_mask"][r, :n] = True
    return out


def special_ids(case: SFTCase) -> dict[str, int | None]:
    return tokenizer.special_ids(case_tokenizer(case))


def raised_in_mb(exc: BaseException) -> bool:
    """Did ``exc`` come out of MB's code (a frame of megatron/bridge on its way), not the harness's?"""
    tb = exc.__traceback__
    while tb is not None:
        if "/megatron/bridge/" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            return True
        tb = tb.tb_next
    return False


def split_root(work: Path, train: SFTCase, validation: SFTCase) -> Path:
    """A user's dataset root whose training and validation splits hold different examples."""
    import json

    root = corpus.write_dataset_root(work, train.corpus)
    rows = corpus.examples(validation.corpus)
    (root / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root
