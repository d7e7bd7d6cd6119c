"""Padding never reaches the loss: alignment padding, tail padding, whole padding rows.

Documented contract (docs/training/packed-sequences.md; MB's sampler and packed dataset
docstrings): alignment padding inside a pack and padding after the last sequence have loss
mask 0; when the last global batch is incomplete and ``drop_last=False`` the sampler pads it
with negative indices, and the GPT SFT datasets turn those into loss-masked padding rows; rows
reached through a samples mapping (``max_num_samples``) behave the same. Real answer tokens
keep loss mask 1, so the summed loss mask of a packed batch equals the unpacked one.

Labels of padding: in-batch (THD collate) padding gets the ignore index; the offline packed
dataset fills with the EOS id and relies on the loss mask (its labels are pinned here).
"""

from __future__ import annotations

import pytest

from harness.adapters import dataset as ds_ops
from harness.adapters import thd
from suites import _inputs, _sft_inputs
from suites._inputs import EOS_ID, IGNORE_INDEX

pytestmark = pytest.mark.import_group("full")

TOK = ds_ops.TinyTokenizer(eos_id=EOS_ID)


def _unpacked_answer_tokens(examples: list[dict]) -> int:
    """Unpacked loss-mask sum: one per label that is an answer token (and not an EOS input)."""
    total = 0
    for ex in examples:
        ids, a = ex["input_ids"], ex["answer_start_idx"]
        total += sum(1 for i in range(len(ids) - 1) if i + 1 >= a and ids[i] != EOS_ID)
    return total


def _build(tmp_path, seed, n, pack, mult, fmt):
    examples = _sft_inputs.sft_examples_with_specials(seed, n, max_len=18, special_rate=0.0)
    out = ds_ops.prepare_packed(
        examples,
        tmp_path / "prep",
        tokenizer=TOK,
        pack_size=pack,
        pad_seq_to_mult=mult,
        algorithm="first_fit_decreasing",
        seed=seed,
    )
    if fmt == "parquet":
        path = ds_ops.write_rows_parquet(out["rows"], tmp_path / "packed.parquet")
        make = ds_ops.packed_parquet_dataset
    else:
        path, make = out["npy"], ds_ops.packed_dataset
    return examples, out, path, make


@pytest.mark.parametrize(
    "seed,n,pack,mult,gbs,fmt",
    [
        (0, 14, 40, 4, 4, "npy"),
        (1, 9, 32, 2, 8, "npy"),
        (2, 20, 48, 8, 3, "npy"),
        (3, 11, 40, 4, 4, "parquet"),
    ],
)
def test_padding_rows_and_alignment(golden, tmp_path, seed, n, pack, mult, gbs, fmt):
    examples, out, path, make = _build(tmp_path, seed, n, pack, mult, fmt)
    ds = make(path, TOK, max_seq_length=pack, pad_seq_to_mult=mult, pad_to_max_length=True)
    batches = ds_ops.padded_global_batches(len(ds), gbs, seed=seed)
    flat = [i for b in batches for i in b]
    assert sorted(i for i in flat if i >= 0) == list(range(len(ds))), "every packed row is sampled once per epoch"
    n_pad = sum(1 for i in flat if i < 0)
    assert n_pad == (-len(ds)) % gbs, "the last global batch is padded up to the global batch size"
    total, seen = 0, []
    for b in batches:
        col = ds_ops.collated(ds.collate_fn([ds[i] for i in b]))
        for r, idx in enumerate(b):
            loss, labels = col["loss_mask"][r], col["labels"][r]
            if idx < 0:
                assert sum(loss) == 0, f"padding row (index {idx}) must have loss mask 0 everywhere"
            else:
                bounds = col["cu_seqlens_q_padded"][r]
                logical = col["cu_seqlens_q"][r]
                for a, la, lb in zip(bounds, logical, logical[1:]):
                    pad_from = a + (lb - la)
                    nxt = [x for x in bounds if x > a]
                    end = nxt[0] if nxt else len(loss)
                    assert all(m == 0 for m in loss[pad_from:end]), "alignment/tail padding must have loss mask 0"
                    assert all(lbl in (EOS_ID, IGNORE_INDEX) for lbl in labels[pad_from:end])
            total += sum(loss)
            seen.append({"index": idx, "loss_mask_sum": sum(loss)})
    assert total == _unpacked_answer_tokens(examples), "summed loss mask packed == unpacked"
    golden.check({"batches": batches, "rows": seen, "total": total})


def test_samples_mapping_negative_indices(golden, tmp_path):
    examples, out, path, make = _build(tmp_path, 7, 12, 40, 2, "npy")
    rows = len(out["rows"])
    ds = make(path, TOK, max_seq_length=40, pad_seq_to_mult=2, max_num_samples=2 * rows + 1, seed=7)
    assert len(ds) == 2 * rows + 1, "max_num_samples sets the mapped length (epochs of shuffled rows)"
    real = [ds[i] for i in range(len(ds))]
    assert all(sum(x["loss_mask"]) > 0 for x in real), "mapped real rows keep their loss mask"
    pads = [ds[-k] for k in (1, 2, 3)]
    assert all(sum(x["loss_mask"]) == 0 for x in pads), "negative indices through the mapping are loss-masked"
    assert all(len(p["loss_mask"]) == len(p["input_ids"]) for p in pads), "a padding row keeps its shape"
    col = ds_ops.collated(ds.collate_fn(real[:2] + pads))
    assert [sum(m) for m in col["loss_mask"][2:]] == [0, 0, 0]
    golden.check(
        {
            "real_loss": [int(sum(x["loss_mask"])) for x in real],
            "pad_lengths": [len(p["input_ids"]) for p in pads],
            "collated_loss": col["loss_mask"],
        }
    )


@pytest.mark.parametrize("seed,rows,width,multiple", [(0, 4, 20, 4), (1, 6, 15, 8), (2, 3, 30, 2)])
def test_in_batch_alignment_padding(golden, seed, rows, width, multiple):
    batch, lengths = _inputs.right_padded_batch(seed, rows, width)
    packed = thd.pack_in_batch(
        batch["tokens"],
        batch["labels"],
        batch["loss_mask"],
        batch["position_ids"],
        pad_token_id=_inputs.PAD_ID,
        pad_to_multiple_of=multiple,
    )
    bounds = packed["cu_seqlens_padded"]
    for r, n in enumerate(lengths):
        pad = slice(bounds[r] + n, bounds[r + 1])
        assert all(m == 0 for m in packed["loss_mask"][pad]), "alignment padding: loss mask 0"
        assert all(lbl == IGNORE_INDEX for lbl in packed["labels"][pad]), "alignment padding: label = ignore index"
        real = packed["loss_mask"][bounds[r] : bounds[r] + n]
        assert real == batch["loss_mask"][r, :n].tolist(), "real answer tokens keep loss mask 1"
    assert sum(packed["loss_mask"]) == float(batch["loss_mask"].sum()), "summed loss mask packed == unpacked"
    golden.check({"lengths": lengths, "loss_mask": packed["loss_mask"], "labels": packed["labels"]})
