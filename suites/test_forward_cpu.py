"""CPU forward: a packed (THD) batch gives the same logits and masked loss as each sequence alone.

Documented contract (docs/training/packed-sequences.md): packing concatenates examples while
"preserving sequence boundaries", carried into the attention path as ``cu_seqlens`` so no
token attends across a boundary; position ids restart per sequence; padding never reaches the
loss. So for MCore's real GPTModel (tiny, fp32, CPU, reference THD attention: causal SDPA per
segment, see harness/adapters/forward.py) fed MB-produced packed batches (offline packed
dataset collate + MB's ``get_packed_seq_params``; in-batch packing), every real token's logits
must match the same sequence run alone and the masked loss sums must agree.

Tolerance: fp32 on CPU; the only differences are reduction order in matmuls over different
sequence lengths (measured max |logit error| ~1.5e-7 to 2.1e-7 for logits of magnitude ~1).
ATOL = 1e-5 is ~50x that, yet a single cross-boundary attention or wrong position embedding
moves logits by >1e-2 (tests/test_forward_reference.py proves both are caught).
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.adapters import dataset as ds_ops
from harness.adapters import forward as fwd
from harness.adapters import thd
from suites import _inputs, _sft_inputs
from suites._inputs import EOS_ID
from suites.test_offline_packed_dataset import _segments, check_rows

pytestmark = pytest.mark.import_group("full")

ATOL = 1e-5
LOSS_TOL = {
    "$.packed_loss": (1e-3, 1e-5),
    "$.unpacked_loss": (1e-3, 1e-5),
    "$.max_abs_logit_err": (ATOL, 0.0),
    "$.per_sequence_err*": (ATOL, 0.0),
}
TOK = ds_ops.TinyTokenizer(eos_id=EOS_ID)


@pytest.fixture(scope="module")
def model():
    return fwd.tiny_gpt(seed=1234)


def _offline_sequences(row: dict, owners: list[int], examples: list[dict]) -> list[dict]:
    seqs, offset = [], 0
    for seg, i in zip(_segments(row), owners):
        ids, a = examples[i]["input_ids"], examples[i]["answer_start_idx"]
        n = len(ids) - 1
        seqs.append(
            {
                "offset": offset,
                "tokens": ids[:-1],
                "labels": ids[1:],
                "loss_mask": [float(k + 1 >= a and ids[k] != EOS_ID) for k in range(n)],
            }
        )
        offset += len(seg) - 1
    return seqs


@pytest.mark.parametrize("seed,mult,pad_max", [(0, 1, False), (1, 4, False), (2, 2, True)])
def test_offline_packed_forward(golden, model, tmp_path, seed, mult, pad_max):
    pack = 48
    examples = _sft_inputs.sft_examples_with_specials(seed, 10, max_len=18)
    out = ds_ops.prepare_packed(
        examples,
        tmp_path / "p",
        tokenizer=TOK,
        pack_size=pack,
        pad_seq_to_mult=mult,
        algorithm="first_fit_decreasing",
        seed=seed,
    )
    owners = check_rows(examples, out["rows"], pack, mult)
    ds = ds_ops.packed_dataset(out["npy"], TOK, max_seq_length=pack, pad_seq_to_mult=mult, pad_to_max_length=pad_max)
    results = []
    for r in range(min(2, len(ds))):
        batch = ds.collate_fn([ds[r]])
        params = fwd.mb_packed_seq_params(batch)
        packed = {
            "tokens": batch["tokens"][0],
            "position_ids": batch["position_ids"][0],
            "labels": batch["labels"][0],
            "loss_mask": batch["loss_mask"][0],
            "params": params,
        }
        cmp = fwd.compare_packed(model, packed, _offline_sequences(out["rows"][r], owners[r], examples))
        assert cmp.max_abs_logit_err <= ATOL, f"row {r}: packed logits differ from unpacked by {cmp.max_abs_logit_err}"
        assert cmp.packed_mask_sum == cmp.unpacked_mask_sum, "loss mask sum packed != unpacked"
        assert math.isclose(cmp.packed_loss, cmp.unpacked_loss, rel_tol=1e-5, abs_tol=1e-4), cmp.as_dict()
        results.append({**cmp.as_dict(), "per_sequence_err": cmp.per_sequence_err})
    golden.check({"rows": results}, tolerances={"$.rows*loss": (1e-3, 1e-5), "$.rows*err*": (ATOL, 0.0)})


@pytest.mark.parametrize("seed,rows,width,multiple", [(0, 3, 16, 1), (1, 4, 20, 4), (2, 5, 12, 8)])
def test_in_batch_packed_forward(golden, model, seed, rows, width, multiple):
    batch, lengths = _inputs.right_padded_batch(seed, rows, width, vocab=100, min_len=2)
    packed = thd.pack_in_batch(
        batch["tokens"],
        batch["labels"],
        batch["loss_mask"],
        batch["position_ids"],
        pad_token_id=_inputs.PAD_ID,
        pad_to_multiple_of=multiple,
    )
    unpadded = packed["cu_seqlens_unpadded"]
    params = fwd.params_from_boundaries(
        unpadded if unpadded is not None else packed["cu_seqlens_padded"],
        packed["cu_seqlens_padded"] if unpadded is not None else None,
        packed["max_seqlen"],
    )
    seqs, offset = [], 0
    for r, n in enumerate(lengths):
        seqs.append(
            {
                "offset": offset,
                "tokens": batch["tokens"][r, :n].tolist(),
                "labels": batch["labels"][r, :n].tolist(),
                "loss_mask": batch["loss_mask"][r, :n].tolist(),
            }
        )
        offset += math.ceil(n / multiple) * multiple
    cmp = fwd.compare_packed(
        model,
        {
            "tokens": torch.tensor(packed["tokens"]),
            "position_ids": torch.tensor(packed["position_ids"]),
            "labels": torch.tensor(packed["labels"]),
            "loss_mask": torch.tensor(packed["loss_mask"]),
            "params": params,
        },
        seqs,
    )
    assert cmp.max_abs_logit_err <= ATOL, f"packed logits differ from unpacked by {cmp.max_abs_logit_err}"
    assert cmp.packed_mask_sum == cmp.unpacked_mask_sum
    assert math.isclose(cmp.packed_loss, cmp.unpacked_loss, rel_tol=1e-5, abs_tol=1e-4), cmp.as_dict()
    golden.check({**cmp.as_dict(), "per_sequence_err": cmp.per_sequence_err}, tolerances=LOSS_TOL)


@pytest.mark.parametrize("seed,mult", [(3, 1), (4, 4)])
def test_gpt_step_forward_offline(golden, model, tmp_path, seed, mult):
    """The offline packed batch through MB's own ``gpt_step.forward_step`` (batch fetch, packed
    params, model call, masked loss function) equals the unpacked per-token losses."""
    pack = 48
    examples = _sft_inputs.sft_examples_with_specials(seed, 10, max_len=18)
    out = ds_ops.prepare_packed(
        examples,
        tmp_path / "p",
        tokenizer=TOK,
        pack_size=pack,
        pad_seq_to_mult=mult,
        algorithm="first_fit_decreasing",
        seed=seed,
    )
    owners = check_rows(examples, out["rows"], pack, mult)
    ds = ds_ops.packed_dataset(out["npy"], TOK, max_seq_length=pack, pad_seq_to_mult=mult)
    batch = ds.collate_fn([ds[0]])
    batch.pop("token_count", None)
    res = fwd.gpt_step_forward(model, batch)
    seqs = _offline_sequences(out["rows"][0], owners[0], examples)
    ref = fwd.unpacked_token_losses(model, seqs)
    worst, ref_sum, ref_count = 0.0, 0.0, 0.0
    for s, losses in zip(seqs, ref):
        n = len(s["tokens"])
        got = res["per_token_loss"][s["offset"] : s["offset"] + n]
        worst = max(worst, float((got - losses).abs().max()))
        m = torch.tensor(s["loss_mask"])
        ref_sum += float((losses * m).sum())
        ref_count += float(m.sum())
    assert worst <= 1e-4, f"per-token loss through gpt_step differs from unpacked by {worst}"
    assert res["num_tokens"] == ref_count, "forward_step counts exactly the unpacked answer tokens"
    assert math.isclose(res["loss_sum"], ref_sum, rel_tol=1e-5, abs_tol=1e-4), (res["loss_sum"], ref_sum)
    golden.check(
        {"loss_sum": res["loss_sum"], "num_tokens": res["num_tokens"], "max_err": worst},
        tolerances={"$.loss_sum": (1e-3, 1e-5), "$.max_err": (1e-4, 0.0)},
    )
