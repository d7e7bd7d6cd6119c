"""MB's direct Hugging Face SFT path: a user's JSONL through ``DirectHFSFTDatasetConfig`` to a micro-batch.

Documented contract (``DirectHFSFTDatasetConfig``, ``DirectSFTDataset``, the text collates of
``data/collators/sft``): rows are tokenised with chat or prompt-completion preprocessing and
truncated to ``seq_length`` (prompt first, on the side ``truncation_method`` names); unpacked
rows are right-padded to ``pad_to_multiple_of`` (capped at ``seq_length``) or, with
``pad_to_max_length``, to exactly ``seq_length``; with ``enable_in_batch_packing`` the collate
packs the micro-batch into one THD row, each sequence padded to
``in_batch_packing_pad_to_multiple_of``; with ``defer_in_batch_packing_to_step`` it leaves the rows
unpacked for the model's step to pack. A parallel layout goes through MB's
``ConfigContainer.validate`` first, which writes the multiples MB chooses for it.

The reference is the same builder with every padding knob off (MB's own unpadded path): padded
rows equal it per real token and train no padding; packed rows are held to the differential
oracle; truncated rows keep the side the user asked for and every completion token the budget
allows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from harness.records.impact import Impact, require
from harness.records.oracle import Example
from harness.suite.adapters import batch as batch_ops
from harness.suite.adapters import loaders, needs
from harness.suite.adapters.chatcollate import prompt_completion_collate
from harness.suite.adapters.directsft import DirectSFTRequest, direct_sft, preprocessing
from harness.suite.adapters.mockvlm import MockVLMRequest, mock_vlm_sft, user_config
from harness.suite.oracle import differential, tokenizer, truncation, vlprocessor
from harness.suite.oracle.padded import require_row_equals_example, require_same_real_tokens
from suites import _directsft, _loader_epoch
from suites._inputs import IGNORE_INDEX

pytestmark = pytest.mark.import_group("full")  # the builder imports MB's HF model helpers


@dataclass(frozen=True)
class Case:
    id: str
    seed: int
    kind: str  # "chat" or "completion"
    seq: int = 64
    layout: tuple[int, int, bool] | None = None  # (CP, TP, SP) finalised by MB
    knobs: dict[str, Any] = field(default_factory=dict)
    n: int = 5
    long_rate: float = 0.3
    truncation_method: str | None = None
    pipeline: int = 1

    def request(self, **overrides: Any) -> DirectSFTRequest:
        req = _directsft.corpus_request(
            self.kind,
            self.seed,
            n=self.n,
            seq=self.seq,
            layout=self.layout,
            knobs=self.knobs,
            long_rate=self.long_rate,
            truncation_method=self.truncation_method,
            pipeline=self.pipeline,
        )
        return replace(req, **overrides)

    def reference(self, seq: int | None = None) -> dict[str, Any]:
        """MB's own unpadded, unpacked batch of the same rows (no layout, multiple 1)."""
        return _directsft.reference(self.request(), seq)


_TO_MAX = {"pad_to_max_length": True, "pad_to_multiple_of": 1}
PADDED = [
    Case("chat-default-multiple", 101, "chat"),  # MB's default 128, capped at seq_length
    Case("chat-cp2-tp3-sp-seq48", 102, "chat", seq=48, layout=(2, 3, True), knobs={"pad_to_multiple_of": 1}),
    # no row reaches seq_length and the multiple is MB's small one: only pad_to_max_length makes the width
    Case("chat-cp2-pad-to-max", 103, "chat", layout=(2, 1, False), knobs=_TO_MAX, long_rate=0.0),
    Case("completion-cp4", 104, "completion", layout=(4, 1, False), knobs={"pad_to_multiple_of": 1}),
    Case("completion-tp2-sp-pad-to-max", 105, "completion", layout=(1, 2, True), knobs=_TO_MAX, long_rate=0.0),
    # PP 2: no row reaches seq_length and the user left pad_to_max_length off, yet pipeline stages
    # exchange one fixed shape, so MB's validation pads every row to seq_length
    Case("chat-pp2-fixed-width", 107, "chat", seq=128, pipeline=2, knobs={"pad_to_multiple_of": 8}, long_rate=0.0),
]
IN_BATCH = [
    Case("chat-cp2", 111, "chat", layout=(2, 1, False), knobs={"enable_in_batch_packing": True}, n=4),
    Case("completion-cp2-tp2-sp", 112, "completion", layout=(2, 2, True), knobs={"enable_in_batch_packing": True}),
    # no layout, so no finalisation: the multiple is the user's own (1, the default, and 8)
    Case(
        "completion-no-layout",
        113,
        "completion",
        knobs={"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 1},
    ),
    Case(
        "completion-no-layout-mult8",
        114,
        "completion",
        knobs={"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 8},
    ),
]
DEFERRED = [
    Case("chat-cp2-deferred", 121, "chat", layout=(2, 1, False), knobs={"enable_in_batch_packing": True}),
    Case("completion-deferred", 122, "completion", knobs={"enable_in_batch_packing": True}),
]
TRUNCATED = [
    Case("completion-right", 131, "completion", seq=48, n=6, long_rate=0.5, truncation_method="right"),
    Case("completion-left", 132, "completion", seq=48, n=6, long_rate=0.5, truncation_method="left"),
]


def _ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]


@pytest.mark.parametrize("case", PADDED, ids=_ids(PADDED))
def test_padded_rows(golden, case):
    """Unpacked rows: the documented width, equal to the unpadded path per real token, padding untrained."""
    needs(direct_sft)  # untestable before the builder, before anything is built
    golden.check(_directsft.check_padded(case.request()))


@pytest.mark.parametrize("case", IN_BATCH, ids=_ids(IN_BATCH))
def test_in_batch_packed_rows(golden, case):
    """In-batch packing in the collate: one THD row, each sequence on MB's multiple, held to the oracle."""
    needs(direct_sft)
    golden.check(_directsft.check_in_batch(case.request()))


@pytest.mark.parametrize("case", DEFERRED, ids=_ids(DEFERRED))
def test_deferred_packing_leaves_rows_unpacked(golden, case):
    """``defer_in_batch_packing_to_step``: the collate hands the step right-padded rows, not a THD row."""
    needs(direct_sft)
    deferred = replace(case, knobs={**case.knobs, "defer_in_batch_packing_to_step": True})
    build = direct_sft(deferred.request())
    _directsft.accepted(build)
    got, ref = build.batch, case.reference()
    packed = [k for k in ("cu_seqlens_q", "cu_seqlens_q_padded") if got.get(k) is not None]
    # the deferring step packs what it gets: a THD row handed to it again is one sequence of all documents
    require(not packed, Impact.CROSS_DOCUMENT_ATTENTION, f"deferred packing: the collate packed already ({packed})")
    require(
        got["tokens"].shape[0] == len(ref["token_count"]),
        Impact.CROSS_DOCUMENT_ATTENTION,
        f"deferred packing: {got['tokens'].shape[0]} rows for {len(ref['token_count'])} examples",
    )
    require_same_real_tokens(got, ref, IGNORE_INDEX)
    golden.check({"width": int(got["tokens"].shape[1]), "token_count": list(ref["token_count"])})


def _row(batch: dict[str, Any], r: int) -> tuple[list[int], list[float]]:
    n = batch["token_count"][r]
    return batch["tokens"][r, :n].tolist(), batch["loss_mask"][r, :n].tolist()


@pytest.mark.parametrize("case", TRUNCATED, ids=_ids(TRUNCATED))
def test_truncation_keeps_the_side_asked_for(golden, case):
    """An overlong row is cut to ``seq_length``, its prompt first, on the side ``truncation_method`` names."""
    needs(direct_sft)
    got = direct_sft(case.request(knobs={"pad_to_multiple_of": 1})).batch
    full = case.reference(seq=4096)
    cut = 0
    for r, n_cut in enumerate(got["token_count"]):
        require(n_cut <= case.seq, Impact.CRASH, f"row {r}: {n_cut} tokens kept, seq_length {case.seq}")
        cut += truncation.check_kept_side(f"row {r}", _row(full, r), _row(got, r), str(case.truncation_method))
    if not cut:  # the input's fault, not MB's: the case would test nothing
        raise RuntimeError(f"{case.id}: no row long enough to be truncated")
    golden.check({"token_count": list(got["token_count"]), "truncated_rows": cut})


# (id, corpus seed, rows, max_length): the prompt-completion collate called by a user's own loader
# with a bound under the dataset's sequence length; overlong rows, so the bound cuts
MAX_LENGTH = [("completion-max24", 141, 6, 24), ("completion-max32", 143, 6, 32)]


@pytest.mark.parametrize("seed,n,max_length", [c[1:] for c in MAX_LENGTH], ids=[c[0] for c in MAX_LENGTH])
@pytest.mark.parametrize("pad_to_max_length", [False, True], ids=["longest", "pad-to-max"])
def test_prompt_completion_max_length(golden, seed, n, max_length, pad_to_max_length):
    """``text_prompt_completion_collate_fn(..., max_length=M)`` bounds rows as ``sequence_length`` does
    ("max_length if max_length is not None else sequence_length"): with a longer sequence length,
    the batch is MB's own batch at sequence length ``M``, rows never wider than ``M``, and with
    ``pad_to_max_length`` exactly ``M`` wide."""
    from transformers import AutoTokenizer

    needs(prompt_completion_collate)
    case = Case(f"max{max_length}", seed, "completion", n=n, long_rate=0.5)
    rows, prep = list(case.request().rows), preprocessing("completion")
    proc = AutoTokenizer.from_pretrained(str(tokenizer.write_tokenizer_dir()))
    full = prompt_completion_collate(rows, proc, preprocessing=prep, sequence_length=4096)["token_count"]
    if max(full) <= max_length:  # the input's fault, not MB's
        raise RuntimeError(f"no row longer than {max_length} tokens ({list(full)}): the case would test nothing")
    knobs = {"preprocessing": prep, "pad_to_max_length": pad_to_max_length}
    got = prompt_completion_collate(rows, proc, sequence_length=case.seq, max_length=max_length, **knobs)
    ref = prompt_completion_collate(rows, proc, sequence_length=max_length, **knobs)
    width, longest = int(got["tokens"].shape[1]), max(got["token_count"])
    require(longest <= max_length, Impact.CRASH, f"a row of {longest} tokens passed max_length {max_length}")
    if pad_to_max_length:  # the fixed shape pipeline parallelism and CUDA graphs rely on
        require(width == max_length, Impact.CRASH, f"pad_to_max_length: rows {width} wide, not max_length {max_length}")
    require(
        list(got["token_count"]) == list(ref["token_count"]),
        Impact.DROPS_TRAINED_TOKEN,
        f"tokens kept per row {list(got['token_count'])}, at sequence length {max_length} {list(ref['token_count'])}",
    )
    require_same_real_tokens(got, ref, IGNORE_INDEX)
    golden.check({"width": width, "token_count": list(got["token_count"])})


# MB's synthetic VLM conversations (MockVLMSFTDatasetConfig): a DirectSFTDataset whose collate is the
# model collate MB resolves from a real Qwen2.5-VL processor written offline (MB's random images)
MOCK_VLM = [
    ("pad-to-max-seq512", 512, {"pad_to_max_length": True}),
    ("in-batch-mult8", 2048, {"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": 8}),
    ("in-batch-deferred", 2048, {"enable_in_batch_packing": True, "defer_in_batch_packing_to_step": True}),
]


def _mock_vlm_reference(seq: int, knobs: dict[str, Any]) -> list[Example]:
    """MB's unpadded path: the same seeded conversations, each item collated alone, unpacked, multiple 1.

    With packing asked for, MB draws longer responses; deferring the packing to the step keeps
    those conversations and collates them unpacked."""
    plain: dict[str, Any] = {"pad_to_multiple_of": 1}
    if knobs.get("enable_in_batch_packing"):
        plain |= {"enable_in_batch_packing": True, "defer_in_batch_packing_to_step": True}
    train = mock_vlm_sft(MockVLMRequest(vlprocessor.write_processor_dir(), seq, 4, knobs=plain))
    out = []
    for i in range(len(train)):
        b = train.collate_fn([train[i]])
        row = {k: tuple(int(x) for x in b[k][0].tolist()) for k in ("input_ids", "labels", "loss_mask", "position_ids")}
        mask = tuple(int(bool(x)) for x in row["loss_mask"])
        out.append(Example(f"#{i}", row["input_ids"], row["labels"], mask, row["position_ids"]))
    return out


@pytest.mark.parametrize("seq,knobs", [c[1:] for c in MOCK_VLM], ids=[c[0] for c in MOCK_VLM])
def test_mock_vlm_conversations(golden, seq, knobs):
    """Synthetic VLM data: the documented width, packed rows held to the oracle, deferral honoured."""
    needs(mock_vlm_sft)
    train = mock_vlm_sft(MockVLMRequest(vlprocessor.write_processor_dir(), seq, 4, knobs=dict(knobs)))
    got = train.collate_fn([train[i] for i in range(len(train))])
    ref = _mock_vlm_reference(seq, knobs)
    packs = knobs.get("enable_in_batch_packing") and not knobs.get("defer_in_batch_packing_to_step")
    if packs:
        multiple = int(knobs["in_batch_packing_pad_to_multiple_of"])
        (row,) = batch_ops.packed_rows({"tokens": got["input_ids"], **got})
        differential.compare([row], ref, pad_seq_to_mult=multiple, padding_ids=(0,)).assert_ok()
        golden.check({"cu_seqlens_q_padded": list(row.cu_seqlens_q_padded or ())})
        return
    packed = [k for k in ("cu_seqlens_q", "cu_seqlens_q_padded") if got.get(k) is not None]
    require(not packed, Impact.CROSS_DOCUMENT_ATTENTION, f"unpacked rows asked for, the collate packed ({packed})")
    width = int(got["input_ids"].shape[1])
    if knobs.get("pad_to_max_length"):  # the fixed shape pipeline parallelism and CUDA graphs rely on
        require(width == seq, Impact.CRASH, f"pad_to_max_length: rows {width} wide, not seq_length {seq}")
    counts = [len(ex.tokens) for ex in ref]
    for r, ex in enumerate(ref):
        require_row_equals_example("", got, r, ex, IGNORE_INDEX)
    golden.check({"width": width, "token_count": counts})


@pytest.mark.parametrize("drop_last", [False, True], ids=["keep-last", "drop-last"])
def test_mock_vlm_drop_last_through_mb_loader(golden, drop_last):
    """``drop_last`` on the mock VLM config as a user sets it, through MB's loader builder (its
    "single" sampler) on 2 data-parallel ranks, each collating with the Qwen2.5-VL processor: over
    the split MB sizes to 3 steps of global batch 4, each rank takes its 3 micro-batches of 2 and,
    between them, every conversation trains once, whichever ``drop_last``."""
    needs(mock_vlm_sft)  # the era gap first: older eras' processors need more than MB pins
    req = MockVLMRequest(
        vlprocessor.write_processor_dir(), 512, 12, knobs={"drop_last": drop_last, **loaders.WORKERS_OFF}
    )
    train = mock_vlm_sft(req)
    golden.check(_loader_epoch.check_sampled(train, user_config(req), seq=512, dp=2, mbs=2, gbs=4, steps=3))


@pytest.mark.parametrize("drop_last", [False, True], ids=["keep-last-refused", "drop-last-accepted"])
def test_keep_last_batch_needs_sft_padding_rows(golden, drop_last):
    """``drop_last`` on the direct config with a "batch" loader (suites/_loader_epoch.py), 7 rows in
    global batches of 4 on 2 data-parallel ranks: keeping the incomplete last batch needs padding
    rows only the GPT SFT datasets make, so MB's loader must refuse it by that rule; dropping it
    trains the complete global batch on both ranks alike."""
    req = Case("completion-loader", 141, "completion", n=7).request()
    golden.check(_loader_epoch.check_keep_last_rule(req, dp=2, mbs=2, gbs=4, drop_last=drop_last))
