"""MB's text chat collate (direct Hugging Face SFT): its padding multiples, padded and packed in batch.

Documented contract (``text_chat_collate_fn``; ``ConfigContainer.validate`` for
``DirectHFSFTDatasetConfig``): on unpacked batches every row is right-padded to a multiple of
``pad_to_multiple_of`` ("to keep CP/SP slices shape-compatible"); with in-batch packing each
sequence is padded to ``in_batch_packing_pad_to_multiple_of`` and flattened into one THD row
with packed-sequence metadata. The multiples are the ones MB's config finalisation chooses for a
parallel layout (:func:`harness.suite.adapters.cp.collate_padding_multiple`), never the suite's.

The rows are what MB's direct-HF loader hands the collate: chat conversations (``messages``) of a
seeded corpus, with the offline tokenizer's chat template. The reference is the same collate at
multiple 1 without packing (MB's own unpacked path): padded rows must equal it per real token
and pad to the multiple with padding that never trains; packed rows are held to the differential
oracle (per real token equal, padding never trains, boundaries on the multiple's grid).
"""

from __future__ import annotations

import pytest

from harness.records.impact import Impact, require
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import cp as cp_ops
from harness.suite.adapters import needs
from harness.suite.adapters.chatcollate import chat_collate, collated_examples
from harness.suite.oracle import corpus, differential, tokenizer
from harness.suite.oracle.padded import require_same_real_tokens
from suites import _sftcases
from suites._inputs import IGNORE_INDEX

pytestmark = pytest.mark.import_group("full")  # MB's config finalisation chooses the multiples


# (id, corpus seed, rows, (CP, TP, SP)): the layouts MB's multiple is chosen for
CASES = [
    ("cp2", 91, 4, (2, 1, False)),
    ("cp4", 92, 3, (4, 1, False)),
    ("tp2-sp", 93, 5, (1, 2, True)),
    ("cp2-tp3-sp", 94, 4, (2, 3, True)),
]


def _rows(seed: int, n: int) -> list[dict]:
    spec = corpus.CorpusSpec(seed=seed, n=n, layout="chat", eos_inside_rate=0.0, eos_last_rate=0.0)
    return corpus.examples(spec)


def _processor():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer.write_tokenizer_dir()))


@pytest.mark.parametrize("seed,n,layout", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_padded_rows_keep_the_multiple(golden, seed, n, layout):
    """Unpacked: rows right-padded to MB's collate multiple, equal to multiple 1 per real token, padding untrained."""
    needs(chat_collate)  # untestable in an era without the collate, before anything is built
    multiple = cp_ops.packing_multiple(cp_ops.collate_padding_multiple(*layout, in_batch=False, pad_to_multiple_of=1))
    rows, proc = _rows(seed, n), _processor()
    ref = chat_collate(rows, proc)
    got = chat_collate(rows, proc, pad_to_multiple_of=multiple)
    width = got["tokens"].shape[1]
    require(width % multiple == 0, Impact.CRASH, f"rows padded to {width}, not a multiple of MB's {multiple}")
    require_same_real_tokens(got, ref, IGNORE_INDEX)
    golden.check({"multiple": multiple, "width": width, "token_count": list(ref["token_count"])})


@pytest.mark.parametrize("seed,n,layout", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_in_batch_packed_rows(golden, seed, n, layout):
    """In-batch packing in the collate: one THD row, each sequence on MB's multiple, held to the oracle."""
    needs(chat_collate)
    multiple = cp_ops.packing_multiple(cp_ops.collate_padding_multiple(*layout, in_batch=True))
    rows, proc = _rows(seed, n), _processor()
    examples = collated_examples(chat_collate(rows, proc))
    packed = chat_collate(rows, proc, enable_in_batch_packing=True, in_batch_packing_pad_to_multiple_of=multiple)
    (row,) = batch_ops.packed_rows(packed)
    ids = tokenizer.special_ids(_sftcases.load_tokenizer())
    report = differential.compare([row], examples, pad_seq_to_mult=multiple, special_ids=ids)
    report.assert_ok()
    golden.check({"multiple": multiple, "cu_seqlens_q_padded": list(row.cu_seqlens_q_padded or ())})


# (id, corpus seed, rows, max_length): a bound under the longest conversation truncates rows, one
# over every conversation truncates none (there only pad_to_max_length decides the width)
MAX_LENGTH_CASES = [("max24", 96, 5, 24), ("max160", 95, 4, 160)]


@pytest.mark.parametrize("seed,n,max_length", [c[1:] for c in MAX_LENGTH_CASES], ids=[c[0] for c in MAX_LENGTH_CASES])
@pytest.mark.parametrize("pad_to_max_length", [False, True], ids=["longest", "pad-to-max"])
def test_max_length_rows(golden, seed, n, max_length, pad_to_max_length):
    """``max_length`` truncates each conversation to its first ``max_length`` tokens; with
    ``pad_to_max_length`` every unpacked row is exactly ``max_length`` wide (the fixed shape
    pipeline parallelism and CUDA graphs rely on), else as wide as the longest row."""
    needs(chat_collate)
    rows, proc = _rows(seed, n), _processor()
    full = chat_collate(rows, proc)
    got = chat_collate(rows, proc, max_length=max_length, pad_to_max_length=pad_to_max_length)
    width = got["tokens"].shape[1]
    longest = max(got["token_count"])
    require(longest <= max_length, Impact.CRASH, f"a row of {longest} tokens passed max_length {max_length}")
    expected = max_length if pad_to_max_length else longest
    require(
        width == expected,
        Impact.CRASH if pad_to_max_length else Impact.PERF_CONTRACT,
        f"rows {width} wide, documented {expected} (pad_to_max_length={pad_to_max_length}, max_length={max_length})",
    )
    for r, (n_full, n_cut) in enumerate(zip(full["token_count"], got["token_count"])):
        require(
            n_cut == min(n_full, max_length),
            Impact.DROPS_TRAINED_TOKEN,
            f"row {r}: {n_cut} tokens kept of {n_full}, max_length {max_length}",
        )
        require(
            got["tokens"][r, :n_cut].tolist() == full["tokens"][r, :n_cut].tolist(),
            Impact.WRONG_TARGETS,
            f"row {r}: the kept tokens are not the conversation's first {n_cut}",
        )
        # the last kept position's target was cut away with the rest; before it, targets are the full row's
        for key, impact in (("labels", Impact.WRONG_TARGETS), ("loss_mask", Impact.DROPS_TRAINED_TOKEN)):
            require(
                got[key][r, : n_cut - 1].tolist() == full[key][r, : n_cut - 1].tolist(),
                impact,
                f"row {r}: {key} of the kept tokens differs from the untruncated conversation",
            )
        require(not any(got["loss_mask"][r, n_cut:].tolist()), Impact.TRAINS_PADDING, f"row {r}: padding trains")
    golden.check({"width": width, "token_count": list(got["token_count"])})
