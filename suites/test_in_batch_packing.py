"""In-batch (VLM collate) packing of right-padded micro-batches into one MCore THD row.

The micro-batches are MB's own unpacked examples (MB's SFT datasets over the offline tokenizer,
each collated alone), right-padded the way a VLM collate hands them over (pad token, ignore-index
labels, loss mask 0, a padding mask since content may hold the pad id). Each row is the reference
for its sequence: the packed row must hold, per real token, the same tokens, labels, loss mask
and position ids (restarting at 0); alignment padding never trains; boundaries and ``max_seqlen``
follow the oracle (harness/suite/oracle/differential.py); boundaries are int32.

The alignment is MB's own: each case names a parallel layout (CP, TP, SP) and packs with the
multiple MB's config finalisation (or, in the vlm_step era, its step) chooses for it
(:func:`harness.suite.adapters.cp.collate_padding_multiple`); the packed segments must then sit on the
documented grid, lcm(2*CP, CP*TP with SP), which Transformer Engine's THD CP split and SP's
scatter need (impact ``crash``). The suite never picks the multiple itself.

Documented refusals: left padding, mismatched shapes and empty rows are refused by an explicit
check in MB's code (a ``raise`` or ``assert`` in Megatron-Bridge: :func:`harness.suite.adapters.rules.
raising_check`), never packed, and never a torch error that happened to fit.
"""

from __future__ import annotations

import pytest
import torch

from harness.records.impact import Impact, fail
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import needs, rules, seqpadding, thd, vlmstep
from harness.suite.oracle.padded import require_same_real_tokens
from suites import _inbatch, _sftcases
from suites._explain import show
from suites._inputs import IGNORE_INDEX

pytestmark = pytest.mark.import_group("full")  # MB's config finalisation chooses the multiple

PROMPT = _sftcases.SFTCase("in-batch-prompt", seed=71, n=16)
CHAT = _sftcases.SFTCase("in-batch-chat", seed=72, kind="chat", n=16)

# (id, reference case, first example, examples per micro-batch, (CP, TP, SP) layout)
CASES = [
    ("prompt-2rows-mult1", PROMPT, 0, 2, (1, 1, False)),
    ("prompt-4rows-mult4", PROMPT, 2, 4, (2, 1, False)),
    ("prompt-6rows-mult8", PROMPT, 6, 6, (4, 1, False)),
    ("chat-3rows-mult2", CHAT, 0, 3, (1, 2, True)),
    ("chat-5rows-mult12-cp2-tp3-sp", CHAT, 3, 5, (2, 3, True)),
    ("chat-4rows-mult1", CHAT, 8, 4, (1, 1, False)),
]


def _micro_batch(case: _sftcases.SFTCase, first: int, rows: int):
    needs(thd.pack_in_batch)  # an era without in-batch packing is untestable before inputs are built
    examples = list(_sftcases.reference(case))[first : first + rows]
    assert len(examples) == rows, (
        f"{case.id}: {rows} examples from {first} wanted, MB's reference has {len(_sftcases.reference(case))} examples"
    )
    pad_id = _sftcases.special_ids(case)["pad_id"]
    assert pad_id is not None, f"{case.id}: the tokenizer reports no pad id"
    return examples, _sftcases.right_padded(examples, pad_id, IGNORE_INDEX), pad_id


@pytest.mark.parametrize("ref,first,rows,layout", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pack_right_padded(golden, ref, first, rows, layout):
    examples, _, _ = _micro_batch(ref, first, rows)
    packed = _inbatch.pack_micro_batch(ref, list(examples), layout)
    golden.check({"multiple": packed.multiple, "row": _sftcases.canonical_rows([packed.row])[0]})


def _pack(batch, pad_id):
    return thd.pack_in_batch(
        batch["tokens"],
        batch["labels"],
        batch["loss_mask"],
        batch["position_ids"],
        batch.get("attention_mask"),
        pad_token_id=pad_id,
        pad_to_multiple_of=1,
    )


def _assert_refused(batch, pad_id, refusals: tuple[type[BaseException], ...], what: str) -> None:
    """Packing ``batch`` must be refused by one of MB's explicit checks (``raise``/``assert`` in its
    code, an exception of ``refusals``); if it packs instead, say what came out."""
    try:
        packed = _pack(batch, pad_id)
    except refusals as exc:
        if rules.raising_check(exc) is None:
            raise fail(
                Impact.CRASH,
                f"{what} was not refused by a check of MB's: {type(exc).__name__} raised outside an explicit "
                f"raise/assert of Megatron-Bridge ({exc})",
            ) from exc
        return
    raise fail(
        Impact.ACCEPTS_INVALID_CONFIG,
        f"{what} was packed instead of refused: got cu_seqlens_padded {show(packed.get('cu_seqlens_padded'))}, "
        f"{len(packed.get('tokens') or [])} packed tokens (expected one of "
        f"{', '.join(e.__name__ for e in refusals)})",
    )


def test_left_padding_is_refused():
    _, batch, pad_id = _micro_batch(PROMPT, 0, 3)
    n = int(batch["attention_mask"][1].sum())
    width = batch["tokens"].shape[1]
    for key in batch:  # row 1 becomes left-padded
        batch[key][1] = torch.roll(batch[key][1], shifts=width - n)
    _assert_refused(
        batch, pad_id, (ValueError, AssertionError, RuntimeError), f"row 1 left-padded ({width - n} pad slots first)"
    )


def test_mismatched_label_shape_is_refused():
    _, batch, pad_id = _micro_batch(PROMPT, 3, 3)
    batch["labels"] = batch["labels"][:, :-1]
    _assert_refused(
        batch,
        pad_id,
        (ValueError, AssertionError, RuntimeError, IndexError),
        f"labels of width {batch['labels'].shape[1]} with tokens of width {batch['tokens'].shape[1]}",
    )


def test_empty_row_is_refused():
    """An all-padding row in a micro-batch is malformed: packing must not silently drop it."""
    _, batch, pad_id = _micro_batch(CHAT, 0, 3)
    for key, fill in (
        ("tokens", pad_id),
        ("labels", IGNORE_INDEX),
        ("loss_mask", 0),
        ("position_ids", 0),
        ("attention_mask", False),
    ):
        batch[key][1] = fill
    _assert_refused(batch, pad_id, (ValueError, AssertionError, RuntimeError), "row 1 of only padding")


def test_pack_with_eos_as_pad_and_a_sequence_tensor(golden):
    """A tokenizer without a pad token pads with its EOS (MB's ``normalize_direct_hf_sft_processor``), and a
    VLM collate packs a further sequence-aligned tensor with it (Qwen-VL's and GLM-VL's
    ``mm_token_type_ids``, padded with ``sequence_tensor_pad_values={"mm_token_type_ids": 0}``): the packed
    row is held to the oracle with EOS as the filler (which id fills alignment padding has no impact: no real
    token attends it), and the extra tensor is packed on the tokens' layout."""
    examples, batch, _pad = _micro_batch(PROMPT, 10, 4)
    eos_id = _sftcases.special_ids(PROMPT)["eos_id"]
    batch["tokens"][~batch["attention_mask"]] = eos_id
    # text tokens and right padding are type 0, as the processors behind MB's VLM collates emit them
    batch["mm_token_type_ids"] = torch.zeros_like(batch["tokens"])
    multiple = vlmstep.mb_in_batch_multiple(2, 1, False)
    raw = thd.in_batch_collate(
        batch, pad_token_id=eos_id, pad_to_multiple_of=multiple, sequence_tensor_pad_values={"mm_token_type_ids": 0}
    )
    (row,) = batch_ops.packed_rows(raw)
    report = _sftcases.differential.compare(
        [row],
        examples,
        pad_seq_to_mult=vlmstep.in_batch_multiple(2, 1, False),
        special_ids=_sftcases.special_ids(PROMPT),
    )
    report.assert_ok()
    extra = raw["mm_token_type_ids"].reshape(-1).tolist()
    if len(extra) != len(row.tokens):
        raise fail(Impact.CRASH, f"mm_token_type_ids packed to {len(extra)} slots, tokens to {len(row.tokens)}")
    if any(v != 0 for v in extra):  # the alignment padding must get the value asked for
        raise fail(Impact.WRONG_LOGITS, f"packed mm_token_type_ids holds {sorted(set(extra) - {0})}: not text type 0")
    golden.check({"multiple": multiple, "row": _sftcases.canonical_rows([row])[0]})


# packing off, the same collator policy pads or truncates the micro-batch: (id, reference case, first
# example, rows, knobs). The processor's pad id is what MB's model collates pass as pad_token_id.
PADDED = [
    ("prompt-3rows-default-multiple", PROMPT, 0, 3, {"sequence_length": 256}),
    ("prompt-4rows-multiple-8", PROMPT, 3, 4, {"sequence_length": 256, "pad_to_multiple_of": 8}),
    ("chat-3rows-pad-to-max-96", CHAT, 0, 3, {"sequence_length": 96, "pad_to_max_length": True}),
    ("prompt-4rows-truncate-16", PROMPT, 7, 4, {"sequence_length": 16, "pad_to_multiple_of": 8}),
    ("prompt-4rows-truncate-4", PROMPT, 7, 4, {"sequence_length": 4, "pad_to_multiple_of": 1}),  # refused
    ("prompt-3rows-eos-pad-and-type-ids", PROMPT, 10, 3, {"sequence_length": 256, "pad_to_multiple_of": 16}),
]


@pytest.mark.parametrize("ref,first,rows,knobs", [c[1:] for c in PADDED], ids=[c[0] for c in PADDED])
def test_padded_without_packing(golden, ref, first, rows, knobs):
    """``prepare_sequence_batch`` with packing off (``pad_or_truncate_sequence_batch``): rows as wide as
    documented (``sequence_length`` with ``pad_to_max_length``, else the longest row rounded up to
    ``pad_to_multiple_of``, capped at ``sequence_length``), per real token equal to the right-padded
    batch, padding (and a further sequence tensor's, with its own pad value) untrained; a truncation
    that would leave a row without any supervised token is refused by MB's check."""
    needs(seqpadding.sequence_batch)  # untestable before its era, before inputs are built
    examples, batch, pad_id = _micro_batch(ref, first, rows)
    knobs = dict(knobs)
    extra = first == 10  # the eos-pad-and-type-ids case
    if extra:  # a tokenizer padding with EOS, and Qwen-VL's token types padded with 0
        pad_id = _sftcases.special_ids(ref)["eos_id"]
        batch["tokens"][~batch["attention_mask"]] = pad_id
        batch["mm_token_type_ids"] = torch.zeros_like(batch["tokens"])
        knobs["sequence_tensor_pad_values"] = {"mm_token_type_ids": 0}
    width, seq = batch["tokens"].shape[1], knobs["sequence_length"]
    multiple = knobs.get("pad_to_multiple_of", 128)
    target = seq if knobs.get("pad_to_max_length") else min(seq, -(-width // multiple) * multiple)
    kept = [min(len(ex.tokens), target) for ex in examples]
    emptied = [r for r, ex in enumerate(examples) if any(ex.loss_mask) and not any(ex.loss_mask[: kept[r]])]
    ref_batch = {k: v.clone() for k, v in batch.items()}
    try:
        got = seqpadding.sequence_batch(batch, pad_token_id=pad_id, **knobs)
    except (ValueError, AssertionError) as exc:
        if emptied and rules.raising_check(exc) is not None and "removed every supervised token" in str(exc):
            golden.check({"refused": type(exc).__name__, "emptied_rows": emptied})
            return
        raise
    if emptied:
        raise fail(
            Impact.DROPS_TRAINED_TOKEN, f"truncating to {target} removed every supervised token of rows {emptied}"
        )
    got_width = got["tokens"].shape[1]
    if got_width != target:
        raise fail(
            Impact.CRASH if knobs.get("pad_to_max_length") else Impact.PERF_CONTRACT,
            f"rows {got_width} wide, documented {target} (longest {width}, multiple {multiple}, sequence_length {seq})",
        )
    ref_batch["token_count"] = kept
    require_same_real_tokens(got, ref_batch, IGNORE_INDEX)
    if extra:
        types = got["mm_token_type_ids"]
        if types.shape != got["tokens"].shape or bool((types[:, width:] != 0).any()):
            raise fail(Impact.WRONG_LOGITS, f"mm_token_type_ids padded to {tuple(types.shape)} with other than 0")
    golden.check({"width": got_width, "kept": kept})


# Nemotron Omni packs in its own collate (harness/suite/adapters/omni.py). Its processor is remote code: the
# cases hand it Qwen2.5-VL's processor, written offline, and text-only chats, which no MB producer pairs
OMNI_PROCESSOR = "Nemotron Omni's processor is remote code: another model's processor (Qwen2.5-VL) stands in"
# (id, corpus seed, conversations, (CP, TP, SP), seq_length; with pad_to_max_length the packed row is exactly that)
OMNI_CASES = [
    ("omni-cp2", 97, 4, (2, 1, False), 4096, False),
    ("omni-tp2-sp", 98, 3, (1, 2, True), 4096, False),
    ("omni-cp2-pad-to-max", 99, 3, (2, 1, False), 256, True),
]


@pytest.mark.hypothetical(OMNI_PROCESSOR)
@pytest.mark.parametrize(
    "seed,n,layout,seq_length,pad_to_max", [c[1:] for c in OMNI_CASES], ids=[c[0] for c in OMNI_CASES]
)
def test_omni_collate_packs_as_its_unpacked_path(golden, seed, n, layout, seq_length, pad_to_max):
    """Nemotron Omni's task encoder with in-batch packing, at the multiple MB chooses for the layout: its
    one THD row holds every conversation as the same encoder without packing collates it, per real token
    (tokens, labels, loss mask, position ids), each on the multiple's grid, its padding untrained; with
    ``pad_to_max_length`` the row is exactly ``seq_length`` wide (a fixed shape for pipeline stages)."""
    from transformers import AutoProcessor

    from harness.suite.adapters import cp as cp_ops
    from harness.suite.adapters.chatcollate import Example
    from harness.suite.adapters.omni import omni_collate
    from harness.suite.oracle import corpus, differential, tokenizer, vlprocessor

    needs(omni_collate)  # an era without the encoder's packing: untestable before anything is built
    multiple = cp_ops.packing_multiple(cp_ops.collate_padding_multiple(*layout, in_batch=True))
    spec = corpus.CorpusSpec(seed=seed, n=n, layout="chat", eos_inside_rate=0.0, eos_last_rate=0.0)
    chats = [{"conversation": row["messages"]} for row in corpus.examples(spec)]
    processor = AutoProcessor.from_pretrained(str(vlprocessor.write_processor_dir()))
    ref = omni_collate(chats, processor, seq_length, pad_to_multiple_of=1)
    examples = []
    for r in range(ref["tokens"].shape[0]):
        real = int(ref["attention_mask"][r].sum())
        tokens, labels, loss_mask, positions = (
            tuple(int(x) for x in ref[k][r, :real].tolist()) for k in ("tokens", "labels", "loss_mask", "position_ids")
        )
        examples.append(Example(f"#{r}", tokens, labels, loss_mask, positions))
    packed = omni_collate(
        chats,
        processor,
        seq_length,
        enable_in_batch_packing=True,
        in_batch_packing_pad_to_multiple_of=multiple,
        pad_to_max_length=pad_to_max,
    )
    (row,) = batch_ops.packed_rows(packed)
    if pad_to_max and len(row.tokens) != seq_length:
        raise fail(Impact.CRASH, f"pad_to_max_length: the packed row is {len(row.tokens)} wide, not {seq_length}")
    ids = tokenizer.special_ids(_sftcases.load_tokenizer())
    differential.compare([row], examples, pad_seq_to_mult=multiple, special_ids=ids).assert_ok()
    golden.check({"multiple": multiple, "cu_seqlens_q_padded": list(row.cu_seqlens_q_padded or ())})
