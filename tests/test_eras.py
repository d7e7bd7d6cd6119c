"""Era probes of the adapters against tiny FAKE MB modules that mimic one era's API shape.

The fakes are written to a temp dir at test time (no MB source is committed); each is named
after the era it imitates. They check what a probe decides (which candidate, which field name,
untestable with which reason) and that an era signal is never the behaviour under test, so a
break in an era that has the feature still reaches the suite (and fails there).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

from harness.errors import Untestable
from harness.suite.adapters import Candidate, Operation, module_source, symbol, thd
from harness.suite.adapters import config as cfg_ops
from harness.suite.adapters import cp as cp_ops
from tests.conftest import FAKE


def _sources(mapping: dict[str, str | None]):
    """A ``module_source`` stand-in: MB module name -> fake source text (absent: None)."""
    return lambda name: mapping.get(name)


# ---- module_source ---------------------------------------------------------------------------


def test_module_source_reads_without_executing(fake_pkg):
    fake_pkg("body.py", "raise RuntimeError('executed')\nMARKER = 1\n")
    assert "MARKER = 1" in module_source(f"{FAKE}.body")
    assert f"{FAKE}.body" not in sys.modules
    assert module_source(f"{FAKE}.absent") is None


def test_operation_names_what_mb_had_before_its_oldest_era():
    op = Operation(
        "op", [Candidate("new", lambda: symbol(f"{FAKE}.nothing", "op"))], before="no such feature before 2026-01-29"
    )
    with pytest.raises(Untestable, match="no such feature before 2026-01-29; tried new: "):
        op()


# ---- config: era field names come from the era's API, not from validate() -----------------


def test_in_batch_flag_by_era(monkeypatch):
    vlm_2026_02 = "def pack_batch_sequences(tokens):\n    pass\nflag = 'pack_sequences_in_batch'\n"
    vlm_2026_06_24 = "def pack_batch_sequences(tokens):\n    pass\nflag = 'enable_in_batch_packing'\n"
    eras = [
        ({"megatron.bridge.data.packing.in_batch": "x = 1"}, "enable_in_batch_packing"),
        ({"megatron.bridge.data.sequence_batching": "x = 1"}, "enable_in_batch_packing"),
        ({"megatron.bridge.training.vlm_step": vlm_2026_02}, "pack_sequences_in_batch"),
        ({"megatron.bridge.training.vlm_step": vlm_2026_06_24}, "enable_in_batch_packing"),
    ]
    for sources, flag in eras:
        monkeypatch.setattr(cfg_ops, "module_source", _sources(sources))
        assert cfg_ops.in_batch_flag() == flag
    monkeypatch.setattr(
        cfg_ops, "module_source", _sources({"megatron.bridge.training.vlm_step": "def get_batch(): pass\n"})
    )
    with pytest.raises(Untestable, match=r"in-batch packing does not exist .*2026-01-29"):
        cfg_ops.in_batch_flag()


@dataclasses.dataclass
class _FakeSpecs:  # PackedSequenceSpecs of the 2025 era
    packed_sequence_size: int = -1
    pad_cu_seqlens: bool = False


@dataclasses.dataclass(kw_only=True)
class _FinetuningConfig2025:  # training/config.FinetuningDatasetConfig, v0.1-v0.5
    seq_length: int
    packed_sequence_specs: _FakeSpecs | None = None
    dataset_kwargs: dict | None = None


@dataclasses.dataclass(kw_only=True)
class _SFTConfig2026:  # data/builders GPTSFTDatasetConfig, mid 2026
    seq_length: int
    offline_packing_specs: _FakeSpecs | None = None
    enable_offline_packing: bool = False
    pad_to_max_length: bool = False


def test_offline_fields_by_dataset_config_class(monkeypatch):
    monkeypatch.setattr(cfg_ops, "_first", lambda *c: _FakeSpecs)
    old = _FinetuningConfig2025(seq_length=64)
    specs = cfg_ops._apply_packing(cfg_ops.PackingConfigSpec(offline_packing_size=64, pad_to_max_length=True), old)
    assert old.packed_sequence_specs is specs and specs.packed_sequence_size == 64
    assert old.dataset_kwargs == {"pad_to_max_length": True}, "2025 configs pass pad_to_max_length via kwargs"
    with pytest.raises(Untestable, match="no enable_offline_packing flag"):
        cfg_ops._apply_packing(cfg_ops.PackingConfigSpec(offline_enabled=True), _FinetuningConfig2025(seq_length=8))
    new = _SFTConfig2026(seq_length=64)
    cfg_ops._apply_packing(cfg_ops.PackingConfigSpec(offline_packing_size=64), new)
    assert new.offline_packing_specs.packed_sequence_size == 64 and new.enable_offline_packing


def test_gpt_dataset_config_sequence_length_of_2025():
    @dataclasses.dataclass
    class GPTDatasetConfig2025:  # MB's GPTDatasetConfig before its own seq_length: MCore's field only
        random_seed: int
        sequence_length: int
        reset_position_ids: bool
        reset_attention_mask: bool
        eod_mask_loss: bool

    fake_cfg = type("cfg", (), {"GPTDatasetConfig": GPTDatasetConfig2025})
    ds = cfg_ops._dataset(cfg_ops.PackingConfigSpec(dataset="gpt", seq_length=256), fake_cfg)
    assert ds.sequence_length == 256


def test_pad_cu_seqlens_rule_followed_into_the_packed_dataset(monkeypatch):
    """Before 2026-08-06 the packed dataset's constructor enforced the rule; a constructor that
    refuses is a rejection, one that accepts is an acceptance (the suite then fails)."""
    from harness.suite.adapters import packed_artifact as ds_ops

    seen = {}

    def refusing(npy, **kw):  # GPTSFTPackedDataset.__init__ of v0.2-v0.5
        seen.update(kw, npy=Path(npy))
        assert Path(npy).exists() and kw["metadata"].exists()
        assert kw["pad_to_max_length"] is True, "'pad_to_max_length=True' is required when pad_cu_seqlens is enabled"

    monkeypatch.setattr(ds_ops, "packed_dataset", refusing)
    spec = cfg_ops.PackingConfigSpec(offline_packing_size=64, pad_cu_seqlens=True)
    out = cfg_ops._packed_dataset_stage(spec)
    assert out["accepted"] is False and out["error_class"] == "AssertionError" and "pad_to_max_length" in out["message"]
    assert seen["pad_cu_seqlens"] is True and not seen["npy"].exists(), "temporary artifact removed"
    ok = cfg_ops._packed_dataset_stage(dataclasses.replace(spec, pad_to_max_length=True))
    assert ok["accepted"] is True
    monkeypatch.setattr(ds_ops, "packed_dataset", lambda *a, **k: None)  # a constructor that lost the check
    assert cfg_ops._packed_dataset_stage(spec)["accepted"] is True


# ---- collate padding multiple in the vlm_step era --------------------------------------------

VLM_STEP_2026_03 = """
    import math
    import torch

    def pack_batch_sequences(tokens, labels, loss_mask, attention_mask, position_ids, pad_token_id=0,
                             pad_to_multiple_of=1, padding_mask=None):
        rows = []
        for r in range(tokens.shape[0]):
            n = int((tokens[r] != pad_token_id).sum())
            rows.append(math.ceil(n / pad_to_multiple_of) * pad_to_multiple_of)
        total = sum(rows) + EXTRA
        return (torch.zeros((1, total), dtype=torch.long), None, None, None, None, None, None)

    def get_batch(data_iterator, cfg, use_mtp=False, *, pg_collection):
        batch = next(data_iterator)
        assert getattr(cfg.dataset, "pack_sequences_in_batch", False)
        cp, tp = pg_collection.cp.size(), pg_collection.tp.size()
        sp = cfg.model.sequence_parallel
        multiple = math.lcm(2 * cp if cp > 1 else 1, cp * tp if sp and tp > 1 else 1)
        out = pack_batch_sequences(batch["tokens"], batch["labels"], batch["loss_mask"], None,
                                   batch["position_ids"], pad_to_multiple_of=multiple)
        return out + (None,)
"""


@pytest.mark.parametrize("cp,tp,sp,expected", [(1, 1, False, 1), (2, 1, False, 4), (4, 2, True, 8), (1, 4, True, 4)])
def test_vlm_step_era_multiple_read_from_mb_output(fake_pkg, cp, tp, sp, expected):
    fake_pkg("vlm_step.py", VLM_STEP_2026_03.replace("EXTRA", "0"))
    get_batch = symbol(f"{FAKE}.vlm_step", "get_batch")
    assert cp_ops._step_multiple(get_batch, "pack_sequences_in_batch", cp, tp, sp) == expected


def test_vlm_step_era_ragged_packing_is_mb_failing(fake_pkg):
    fake_pkg("vlm_step.py", VLM_STEP_2026_03.replace("EXTRA", "1"))  # one stray slot: not whole multiples
    with pytest.raises(AssertionError, match="not a whole number"):
        cp_ops._step_multiple(symbol(f"{FAKE}.vlm_step", "get_batch"), "pack_sequences_in_batch", 2, 1, False)


def test_vlm_step_era_states_what_it_cannot_express(fake_pkg, monkeypatch):
    fake_pkg("vlm_step.py", VLM_STEP_2026_03.replace("EXTRA", "0"))
    monkeypatch.setattr(cp_ops, "module_source", lambda name: module_source(f"{FAKE}.vlm_step"))
    monkeypatch.setattr(cp_ops, "symbol", lambda m, n: symbol(f"{FAKE}.vlm_step", n))
    monkeypatch.setattr(cp_ops, "load_module", lambda name: None)
    call = cp_ops._vlm_step_probe()
    with pytest.raises(Untestable, match=r"no collate pad_to_multiple_of .*2026-07-09"):
        call(2, in_batch=False)
    with pytest.raises(Untestable, match="evaluation CP"):
        call(2, eval_cp=4)


def test_provider_era_has_no_collate_alignment(fake_pkg, monkeypatch):
    fake_pkg(
        "provider.py",
        """
        import dataclasses
        @dataclasses.dataclass(kw_only=True)
        class HFConversationDatasetProvider:  # data/hf_datasets/provider, 2026-06-24 to 2026-07-09
            seq_length: int
            maker_name: str
            enable_in_batch_packing: bool = False
            pad_to_multiple_of: int = 128
            in_batch_packing_pad_to_multiple_of: int = 1
    """,
    )
    monkeypatch.setattr(cp_ops, "load_module", lambda name: None)
    call = cp_ops._collate_config(f"{FAKE}.provider", "HFConversationDatasetProvider", False)()
    with pytest.raises(Untestable, match="does not align the collate pad_to_multiple_of"):
        call(2, in_batch=False, pad_to_multiple_of=6)


# ---- packed params: era from PackedSequenceSpecs, never from the builder ---------------------

BUILDER_IGNORING_UNPADDED = """
    import types
    def get_packed_seq_params(batch):
        cu = batch["cu_seqlens"]
        return types.SimpleNamespace(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=None,
                                     max_seqlen_kv=None)
"""


@pytest.mark.parametrize(
    "specs_source,untestable",
    [
        ("class PackedSequenceSpecs:\n    packed_sequence_size: int = -1\n", True),  # 2025: no alignment
        ("class PackedSequenceSpecs:\n    pad_seq_to_mult: int = 1\n", False),  # 2026-01-20 on
    ],
)
def test_unpadded_boundaries_era(fake_pkg, monkeypatch, specs_source, untestable):
    fake_pkg("gpt_step.py", BUILDER_IGNORING_UNPADDED)
    monkeypatch.setattr(thd, "symbol", lambda m, n: symbol(f"{FAKE}.gpt_step", n))
    monkeypatch.setattr(thd, "module_source", _sources({"megatron.bridge.data.datasets.packed_sequence": specs_source}))
    call = thd._params_probe("fake.gpt_step")()
    assert call({"cu_seqlens": [0, 3]})["cu_seqlens_q"] == [0, 3]
    batch = {"cu_seqlens": [0, 4], "cu_seqlens_unpadded": [0, 3]}
    if untestable:
        with pytest.raises(Untestable, match="pad_seq_to_mult"):
            call(batch)
    else:  # the feature exists: a builder that ignores the real-token boundaries reaches the suite
        assert call(batch)["cu_seqlens_q"] == [0, 4]


# ---- CPU refusal of MCore's import-time CUDA build ---------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="the stand-in acts only without CUDA")
def test_import_time_cuda_build_refused_on_cpu(fake_pkg, monkeypatch, tmp_path):
    """Mimics megatron/core/inference/unified_memory.py of Megatron-LM 2025-10: ``load_inline`` of a
    CUDA allocator in the module body, guarded only for RuntimeError/ImportError/OSError."""
    import torch.utils.cpp_extension as ext

    from harness.suite.standins import cuda_ext

    fake_pkg(
        "unified_memory.py",
        """
        from torch.utils.cpp_extension import load_inline
        has_unified_memory = False
        try:
            load_inline(name="harness_fake_managed_alloc", cpp_sources=["int x;"], functions=[], with_cuda=True)
            has_unified_memory = True
        except (RuntimeError, ImportError, OSError):
            pass
    """,
    )
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setattr(cuda_ext, "WATCHED", (f"{FAKE}.unified_memory",))
    original = ext.load_inline
    finder = cuda_ext._Finder()
    sys.meta_path.insert(0, finder)
    try:
        import importlib

        mod = importlib.import_module(f"{FAKE}.unified_memory")
    finally:
        sys.meta_path.remove(finder)
    assert mod.has_unified_memory is False
    assert ext.load_inline is original, "the refusal is scoped to the module body"
    assert not (tmp_path / "ext").exists(), "nothing compiled"


def test_finetuning_builder_of_june_2026_takes_offline_packing_specs(monkeypatch, tmp_path):
    """Between packed_sequence_specs and the data/builders/gpt_sft builder, FinetuningDatasetBuilder
    took enable_offline_packing + offline_packing_specs (2026-06): the same builder, not an absent
    one (the sweep showed every SFT case of that month untestable)."""
    from harness.suite.adapters import sft, sftspies

    built: dict = {}

    @dataclasses.dataclass
    class Specs:
        packed_sequence_size: int = -1
        pad_seq_to_mult: int = 1
        pad_cu_seqlens: bool = False

    class Unpacked:  # MB's GPTSFTDataset: the spy wraps its __init__
        def __init__(self) -> None:
            pass

    class Chat:
        def __init__(self, use_hf_tokenizer_chat_template: bool = False) -> None:
            pass

    class Packed:
        pass

    class Builder:
        def __init__(self, dataset_root, tokenizer, seq_length=2048, seed=1234, max_train_samples=None,
                     enable_offline_packing=False, offline_packing_specs=None, dataset_kwargs=None,
                     do_validation=True, do_test=True):  # fmt: skip
            built.update(enable=enable_offline_packing, specs=offline_packing_specs, kwargs=dataset_kwargs)
            self.pack_metadata = None

        def build(self):
            Unpacked()  # packing preparation builds MB's unpacked dataset on the way
            return [Packed(), None, None]

    names = {"FinetuningDatasetBuilder": Builder, "PackedSequenceSpecs": Specs, "GPTSFTDataset": Unpacked}
    names["GPTSFTChatDataset"] = Chat
    monkeypatch.setattr(sft, "symbol", lambda module, name: names[name])
    monkeypatch.setattr(sftspies, "symbol", lambda module, name: names[name])
    build = sft._finetuning_builder()
    req = sft.SFTRequest(tmp_path, object(), 64, packing=sft.OfflinePacking(pack_size=64))
    out = build(req)
    assert built["enable"] is True and built["specs"].packed_sequence_size == 64
    assert isinstance(out.train, Packed) and isinstance(out.prep_reference, Unpacked)
    assert out.era == "data/builders/finetuning_dataset.FinetuningDatasetBuilder"
