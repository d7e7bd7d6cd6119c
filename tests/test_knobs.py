"""The knob inventory is read from MB's code and the values from what MB was really called with.

* the scan finds dataclass fields, ``__init__`` and collate parameters whose names are packing
  knobs, with their defaults, and leaves out tensors and other concerns that share a word;
* on the installed MB it finds the knobs MB documents (``PackedSequenceSpecs``' fields, the chat
  collate's padding multiple);
* end to end: a copy of MB with a knob added to ``PackedSequenceSpecs`` runs one case; the run's
  ``harness coverage`` lists the new knob as *never set* (reached, only MB's default) and ``pad_seq_to_mult`` with the
  value MB's builder was called with (a nightly sees a new knob the day it lands);
* a corrupt log is a one-line error, a run without a log a usage error;
* the training paths' step and loss functions are listed from MB's sources and their calls recorded
  per suite (``harness coverage``'s last block).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import CorruptFile
from harness.mutations import installed_package_dir
from harness.records import knobs as records
from harness.records.knobs import Knob
from harness.report import knobtable as table
from harness.suite.knobs.inventory import scan, scan_module

SOURCE = """
from dataclasses import dataclass, field
import torch

@dataclass
class Specs:
    pad_seq_to_mult: int | None = 1
    packed_sequence_size: int = -1
    pad_cu_seqlens: bool = field(default=False)
    seq_length: int = field(kw_only=True)
    shards: list = field(default_factory=list)
    learning_rate: float = 1e-4
    should_pad_vocab: bool = False
    moe_pad_expert_input_to_capacity: bool = False

@dataclass
class Batch:
    cu_seqlens_q: torch.Tensor | None = None

class Dataset:
    def __init__(self, path, max_seq_length=1024, pad_to_max_length=False, *, seed=0):
        pass

def text_chat_collate_fn(batch, tokenizer, pad_to_multiple_of=1, max_length=None):
    pass

def _private_pack(pad_id=0):
    pass
"""


def _names(knobs):
    return {(k.owner, k.name): k.default for k in knobs}


def test_the_scan_reads_fields_and_parameters_that_are_packing_knobs():
    found = _names(scan_module("m", SOURCE))
    assert found == {
        ("Specs", "pad_seq_to_mult"): "1",
        ("Specs", "packed_sequence_size"): "-1",
        ("Specs", "pad_cu_seqlens"): "False",
        ("Specs", "seq_length"): None,  # field() without a default: required
        ("Dataset.__init__", "max_seq_length"): "1024",
        ("Dataset.__init__", "pad_to_max_length"): "False",
        ("text_chat_collate_fn", "pad_to_multiple_of"): "1",
        ("text_chat_collate_fn", "max_length"): "None",
    }


def test_the_installed_mb_exposes_the_documented_knobs():
    found = _names(scan(installed_package_dir()))
    assert {("PackedSequenceSpecs", n) for n in ("pad_seq_to_mult", "pad_cu_seqlens", "packed_sequence_size")} <= set(
        found
    )
    assert any(o.endswith("collate_fn") and n == "pad_to_multiple_of" for o, n in found)


def test_statuses_follow_the_goal():
    knob = scan_module("m", SOURCE)[0]
    others = next(k for k in scan_module("m", SOURCE) if k.name == "seq_length")
    ex = records.Exercised(
        {knob.key: knob, others.key: others},
        {knob.key: {"1": {"a"}, "4": {"b"}}, others.key: {"64": {"a"}}},
        {knob.key: {"1", "4"}, others.key: {"64"}},
    )
    status = {r.knob.name: r.status for r in table.rows(ex)}
    assert status == {knob.name: table.Status.MET, "seq_length": table.Status.OTHER_ONLY}
    ex.values[knob.key] = {"1": {"a"}}
    assert {r.knob.name: r.status for r in table.rows(ex)}[knob.name] is table.Status.DEFAULT_ONLY
    ex.passed[knob.key] = set()
    assert {r.knob.name: r.status for r in table.rows(ex)}[knob.name] is table.Status.NEVER_SET
    ex.values.pop(knob.key)
    assert {r.knob.name: r.status for r in table.rows(ex)}[knob.name] is table.Status.NOT_EXERCISED


UNREAD = {
    "data/ds.py": """
class Dataset:
    def __init__(self, min_seq_length=1, max_seq_length=64, pad_id=0, pad_seq_to_mult=1, eod_id=None):
        self.min_seq_length = min_seq_length  # stored, read nowhere: never read
        self.max_seq_length = max_seq_length  # read below as an attribute
        self._mult = pad_seq_to_mult  # stored under another name, read elsewhere
        self.eod_id = eod_id  # stored, read by name through getattr elsewhere
        if pad_id < 0:  # used directly
            raise ValueError(pad_id)

    def width(self):
        return self.max_seq_length

class Abstract:
    def __init__(self, pad_to_max_length=False):
        raise NotImplementedError

def pack_rows(rows, pad_to_multiple_of=1):
    return rows
""",
    "training/use.py": "def f(ds):\n    ds._mult += 1\n    return getattr(ds, 'eod_id')\n",
}


def test_a_parameter_mb_stores_and_never_reads_is_marked_and_short_of_the_goal_says_so(tmp_path):
    """Negative control of the never-read test: only the parameters nothing reads are marked (a
    read through another attribute name, ``getattr`` or direct use keeps a knob ordinary, and a
    stub's parameters are no evidence), and the table says *never read by MB* for them only while
    short of the goal."""
    for rel, text in UNREAD.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    knobs = {(k.owner, k.name): k for k in scan(tmp_path)}
    assert {key for key, k in knobs.items() if not k.read} == {
        ("Dataset.__init__", "min_seq_length"),
        ("pack_rows", "pad_to_multiple_of"),
    }
    assert ("Abstract.__init__", "pad_to_max_length") in knobs
    never = knobs[("Dataset.__init__", "min_seq_length")]
    assert records.KnobLine.loads(records.KnobLine.of_knob(never).dumps()).knob == never
    ex = records.Exercised({never.key: never}, {never.key: {"1": {"a"}}}, {never.key: set()})
    assert [r.status for r in table.rows(ex)] == [table.Status.NEVER_READ]
    ex.values[never.key], ex.passed[never.key] = {"1": {"a"}, "8": {"a"}}, {"1", "8"}
    assert [r.status for r in table.rows(ex)] == [table.Status.MET]


def test_the_installed_mb_never_reads_min_seq_length():
    """On the installed MB, ``GPTSFTDataset(min_seq_length=...)`` is stored and never read, and
    the packing knobs MB does read (its pad multiple, the pack size) are not marked."""
    knobs = {(k.owner.split(".")[0], k.name): k for k in scan(installed_package_dir())}
    assert knobs[("GPTSFTDataset", "min_seq_length")].read is False
    assert knobs[("GPTSFTPackedDataset", "pad_seq_to_mult")].read
    assert knobs[("PackedSequenceSpecs", "packed_sequence_size")].read


def test_a_factory_default_is_what_mb_gave_and_small_mappings_stay_distinct():
    """A field with a ``default_factory`` (MIMO's ``encoder_seq_lengths``) meets the goal with a
    call that left MB's factory value and one that passed another; per-modality mappings are shown
    by value, so two cases with different lengths count as two values, not one ``<dict>``."""
    from harness.suite.knobs.spy import show

    assert show({"vision": 8}) != show({"vision": 16}) and show({"vision": 8}) == "{'vision': 8}"
    assert show({"x": list(range(40))}) == "<dict>" and show({"vision": object()}) == "<dict>"
    knob = Knob("m", "Provider", "encoder_seq_lengths", "dict", "<factory>")
    ex = records.Exercised({knob.key: knob}, {knob.key: {"{}": {"a"}, "{'vision': 8}": {"b"}}})
    ex.passed[knob.key], ex.defaulted[knob.key] = {"{'vision': 8}"}, set()
    assert [r.status for r in table.rows(ex)] == [table.Status.OTHER_ONLY]  # MB's factory value never used
    ex.defaulted[knob.key] = {"{}"}
    assert [r.status for r in table.rows(ex)] == [table.Status.MET]


def test_a_field_mb_finalises_counts_as_the_value_the_run_used():
    """A field MB's ``finalize`` derives (``variable_seq_lengths`` on for in-batch packing with PP) is
    recorded as finalised: set when it left its default; a factory field is not judged there; and a
    field left to its ``default_factory`` shows as ``<factory>``, not the signature's marker."""
    import dataclasses

    from harness.suite.knobs import spy

    @dataclasses.dataclass
    class Cfg:
        variable_seq_lengths: bool = False
        pipeline_model_parallel_size: int = 1
        encoder_seq_lengths: dict = dataclasses.field(default_factory=dict)

        def finalize(self) -> None:
            if self.pipeline_model_parallel_size > 1:
                self.variable_seq_lengths = True

    knobs = [Knob("m", "Cfg", f.name, "x", None) for f in dataclasses.fields(Cfg)]
    saved, suite = set(spy._VALUES), spy.CURRENT["suite"]
    spy._VALUES.clear()
    spy.CURRENT["suite"] = "s"
    try:
        finalize = spy._after_finalize(
            Cfg.finalize, knobs, {"variable_seq_lengths": False, "pipeline_model_parallel_size": 1}
        )
        finalize(Cfg(pipeline_model_parallel_size=2))
        finalize(Cfg())
        got = set(spy._VALUES)
    finally:
        spy._VALUES.clear()
        spy._VALUES.update(saved)
        spy.CURRENT["suite"] = suite
    assert ("m:Cfg.variable_seq_lengths", "True", "s", True) in got
    assert ("m:Cfg.variable_seq_lengths", "False", "s", False) in got
    assert not any(k.endswith("encoder_seq_lengths") for k, *_ in got)
    assert spy.show(dataclasses._HAS_DEFAULT_FACTORY) == "<factory>"


def test_a_corrupt_log_is_a_one_line_error(tmp_path):
    log = tmp_path / "knobs.jsonl"
    log.write_text('{"kind": "value", "key": "k", "value": "1", "suite": "s"}\nnot json\n')
    with pytest.raises(CorruptFile, match=r"knobs\.jsonl:2: not a knobs log line"):
        records.read(log)


@pytest.mark.slow
def test_a_knob_mb_adds_shows_up_as_not_exercised_and_exercised_values_are_measured(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(installed_package_dir(), src / "megatron" / "bridge")
    config = src / "megatron" / "bridge" / "data" / "packing" / "config.py"
    text = config.read_text()
    anchor = "    pad_seq_to_mult: int | None = 1\n"
    assert text.count(anchor) == 1
    config.write_text(text.replace(anchor, anchor + "    pad_boundaries_to_tiles: int = 1\n"))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "harness", "run", "-q", "--mb-src", str(src), "--out", str(out)]
        + ["--suite", "offline_packed_dataset", "-k", "test_packed_equals_unpacked and prompt-mult4 and not full"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=clean,
    )
    assert "knobs: " in run.stdout, run.stdout + run.stderr
    cov = subprocess.run(
        [sys.executable, "-m", "harness", "coverage", str(out), "--json", str(tmp_path / "cov.json")],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean,
    )
    assert cov.returncode == 0, cov.stderr
    lines = cov.stdout.splitlines()
    new = [ln for ln in lines if "pad_boundaries_to_tiles" in ln]
    assert new and "never set" in new[0], cov.stdout
    specs = lines.index("megatron.bridge.data.packing.config:PackedSequenceSpecs")
    mult = next(ln for ln in lines[specs:] if ln.strip().startswith("pad_seq_to_mult"))
    assert " 4" in mult and "offline_packed_dataset" in mult, mult


def test_coverage_without_a_log_is_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "coverage", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no knobs.jsonl there" in proc.stderr
    assert Path(tmp_path).is_dir()


def test_step_and_loss_functions_are_listed_and_their_calls_recorded(tmp_path):
    """Every training path's step and loss functions MB defines are listed (read from its sources);
    a call through the module records the function with the running suite; the log merges them and
    ``harness coverage`` prints each as exercised by its suites, or not exercised."""
    import types

    from harness.suite.knobs import steps

    training = tmp_path / "bridge" / "training"
    training.mkdir(parents=True)
    (training / "vlm_step.py").write_text("def forward_step(x):\n    return x\n\ndef helper():\n    pass\n")
    (training / "losses.py").write_text("def masked_next_token_loss(m):\n    return m\n")
    (training / "config.py").write_text("def forward_step():\n    pass\n")  # not a step module
    family = tmp_path / "bridge" / "models" / "qwen_vl"  # a model family's own step, beside its model
    family.mkdir(parents=True)
    (family / "qwen3_vl_step.py").write_text("def get_batch(it):\n    return it\n")
    (family / "losses.py").write_text("def loss_func(m):\n    return m\n")  # only training's losses
    inv = steps.inventory(tmp_path / "bridge")
    assert inv == {
        "megatron.bridge.models.qwen_vl.qwen3_vl_step": ["get_batch"],
        "megatron.bridge.training.losses": ["masked_next_token_loss"],
        "megatron.bridge.training.vlm_step": ["forward_step"],
    }
    assert steps.key("megatron.bridge.models.qwen_vl.qwen3_vl_step", "get_batch") == (
        "models/qwen_vl/qwen3_vl_step.py:get_batch"
    )
    module = types.ModuleType("megatron.bridge.training.vlm_step")
    exec((training / "vlm_step.py").read_text(), module.__dict__)
    calls: list[str] = []
    steps.wrap(module, calls.append)
    steps.wrap(module, calls.append)  # wrapped once
    assert module.forward_step(3) == 3 and calls == ["training/vlm_step.py:forward_step"]
    log = tmp_path / "knobs.jsonl"
    lines = [records.KnobLine("step", key=steps.key(m, f)) for m, fns in inv.items() for f in fns]
    lines.append(records.KnobLine("called", key=calls[0], suite="energon_dataset"))
    log.write_text("".join(ln.dumps() + "\n" for ln in lines))
    got = records.read(log).steps
    loss, step = "training/losses.py:masked_next_token_loss", "training/vlm_step.py:forward_step"
    family_step = "models/qwen_vl/qwen3_vl_step.py:get_batch"
    assert got == {loss: set(), step: {"energon_dataset"}, family_step: set()}
    text = "\n".join(table.step_lines(got))
    assert f"{loss}  not exercised" in text and f"{step}          energon_dataset" in text
    assert f"{family_step}  not exercised" in text
    assert "1 of 3 exercised" in text


def test_a_step_class_and_functions_no_packed_batch_reaches_are_named(tmp_path):
    """A path whose step is a callable class lists its ``__call__`` (recorded when called); a function
    the step reaches only after refusing packed batches, and a step whose code never names packing,
    are listed as on no packed path with MB's reason, not as gaps. A refusal of one setting (the
    test does not read the batch's packed fields) does not take a function off the path."""
    import types

    from harness.suite.knobs import steps

    common = tmp_path / "bridge" / "diffusion" / "common"
    common.mkdir(parents=True)
    (common / "dgpt_step.py").write_text(
        "def _create_loss_function(m):\n    return m\n\n"
        "def get_batch(it):\n    return it\n\n"
        "class DGPTStep:\n    def __call__(self, cu_seqlens, plan):\n"
        "        batch = get_batch(2)\n"
        "        if cu_seqlens is not None:\n"
        "            raise ValueError('Packed sequence support is not implemented')\n"
        "        if plan:\n            return _create_loss_function(1)\n        return batch\n"
    )
    (common / "flux_step.py").write_text("class FluxForwardStep:\n    def __call__(self, x):\n        return x\n")
    (common / "vlm_step.py").write_text(
        "def get_batch(it):\n    return it\n\n"
        "def forward_step(defer, packed_seq_params):\n"
        "    if defer:\n        raise ValueError('vlm_step requires collate-time in-batch packing')\n"
        "    return get_batch(packed_seq_params)\n"
    )
    dgpt = "megatron.bridge.diffusion.common.dgpt_step"
    assert steps.inventory(tmp_path / "bridge")[dgpt] == ["_create_loss_function", "get_batch", "DGPTStep.__call__"]
    off = steps.off_packed_path(tmp_path / "bridge")
    loss = "diffusion/common/dgpt_step.py:_create_loss_function"
    flux = "diffusion/common/flux_step.py:FluxForwardStep.__call__"
    assert set(off) == {loss, flux}  # get_batch runs before the refusal, vlm_step's refusal is of one setting
    assert off[loss].startswith("after MB refuses packed batches (line 10: Packed sequence")
    module = types.ModuleType(dgpt)
    exec((common / "dgpt_step.py").read_text(), module.__dict__)
    calls: list[str] = []
    steps.wrap(module, calls.append)
    steps.wrap(module, calls.append)  # wrapped once
    assert module.DGPTStep()(None, False) == 2
    assert calls == ["diffusion/common/dgpt_step.py:DGPTStep.__call__", "diffusion/common/dgpt_step.py:get_batch"]
    log = tmp_path / "knobs.jsonl"
    keys = [steps.key(m, f) for m, fns in steps.inventory(tmp_path / "bridge").items() for f in fns]
    lines = [records.KnobLine("step", key=k, value=off.get(k, "")) for k in keys]
    lines += [records.KnobLine("called", key=c, suite="forward_cpu") for c in calls]
    log.write_text("".join(ln.dumps() + "\n" for ln in lines))
    got = records.read(log)
    assert got.off_path == off
    text = "\n".join(table.step_lines(got.steps, got.off_path))
    assert f"{loss}" in text and "no packed path: after MB refuses packed batches" in text
    assert "vlm_step.py:forward_step" in text and "2 of 6 exercised; 2 on no packed path; 2 not exercised" in text


def test_a_forked_rank_appends_only_what_it_recorded(tmp_path):
    """A rank of a gloo world is a fork of the suite process: it appends the values and step calls it
    recorded after the fork (its parent writes the inventory and its own), so coverage counts what
    MB's step did on the ranks (the MIMO step runs there only)."""
    from harness.suite.knobs import spy

    log = tmp_path / "knobs.jsonl"
    spy._CALLED.add(("training/gpt_step.py:forward_step", "parent_suite"))
    since = spy.seen()
    spy._CALLED.add(("training/megatron_mimo_step.py:forward_step", "mimo_dataset"))
    try:
        spy.write_new(since, log)
        spy.write_new(spy.seen(), log)  # nothing new: nothing written
    finally:
        spy._CALLED.discard(("training/gpt_step.py:forward_step", "parent_suite"))
        spy._CALLED.discard(("training/megatron_mimo_step.py:forward_step", "mimo_dataset"))
    assert records.read(log).steps == {"training/megatron_mimo_step.py:forward_step": {"mimo_dataset"}}
    assert len(log.read_text().splitlines()) == 1
