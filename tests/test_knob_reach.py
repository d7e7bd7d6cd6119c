"""A field MB inherits from megatron-core that only code MB never calls reads is *never read by MB*.

* in a small ``megatron`` namespace built here, a field read only by a wrapper that only
  Megatron-LM's trainer constructs is off MB's path, the finding naming the reader and the entry
  point the chain hangs from (a re-export in a package ``__init__`` followed);
* each way MB can reach that reader turns the finding off (the negative controls): a call of the
  re-exported trainer, a module import and an attribute call, a ``getattr`` by name, a decorated
  definition, a module-level call, MB reading the field itself;
* on the installed MB and megatron-core, ``max_seqlen_per_dp_cp_rank`` is read only by
  ``HybridCPDataLoaderWrapper`` (the finding), and one more module of MB that constructs it turns
  the finding off; fields MB's code does reach (``context_parallel_size``) are not marked;
* the suite process's spy marks the inherited knob unread with the finding, and the coverage
  table prints it under the knob.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.mutations import installed_package_dir
from harness.records import knobs as records
from harness.records.knobs import Knob
from harness.report import knobtable as table
from harness.suite.knobs import reach, spy

FILES = {
    "core/__init__.py": "",
    "core/config.py": """
        from dataclasses import dataclass

        @dataclass
        class Config:
            hidden_knob: int | None = None
            '''Read by the wrapper: hidden_knob per rank.'''
            used_knob: int = 1
    """,
    "core/wrapper.py": """
        class Wrapper:
            def __init__(self, config):
                self.limit = config.hidden_knob
    """,
    "core/model.py": """
        def forward(config):
            return config.used_knob
    """,
    "training/__init__.py": "from .training import pretrain\n",
    "training/training.py": """
        from megatron.core.wrapper import Wrapper

        def train(config):
            return Wrapper(config)

        def pretrain(config):
            return train(config)
    """,
    "bridge/__init__.py": "",
    "bridge/step.py": """
        from megatron.core.model import forward

        def step(config):
            return forward(config)
    """,
}


GO = "def go(c):\n    return "


def _namespace(tmp_path: Path, extra: dict[str, str] | None = None) -> reach.Namespace:
    root = tmp_path / "megatron"
    for rel, text in {**FILES, **(extra or {})}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return reach.Namespace([root])


def test_a_field_only_the_trainer_reads_is_off_mbs_path(tmp_path):
    found = reach.off_path(_namespace(tmp_path), "hidden_knob")
    assert found == reach.OffPath(("megatron.core.wrapper.Wrapper",), ("megatron.training.pretrain",))
    assert found.why() == (
        "read only by megatron.core.wrapper.Wrapper, reached only from megatron.training.pretrain, which MB never calls"
    )
    assert reach.off_path(_namespace(tmp_path), "used_knob") is None  # MB's step reaches forward


@pytest.mark.parametrize(
    "how, text",
    [
        ("calls the re-exported trainer", "from megatron.training import pretrain\n" + GO + "pretrain(c)\n"),
        ("imports the module", "import megatron.training.training\n" + GO + "megatron.training.training.train(c)\n"),
        ("aliases the module", "from megatron.training import training as t\n" + GO + "t.train(c)\n"),
        ("getattr by name", "from megatron.core import wrapper\n" + GO + "getattr(wrapper, 'Wrapper')(c)\n"),
        ("reads the field itself", GO + "c.hidden_knob\n"),
        ("builds the wrapper at import", "from megatron.core.wrapper import Wrapper\nW = Wrapper(None)\n"),
    ],
)
def test_each_way_mb_reaches_the_reader_turns_the_finding_off(tmp_path, how, text):
    assert reach.off_path(_namespace(tmp_path, {"bridge/extra.py": text}), "hidden_knob") is None, how


def test_a_decorated_definition_on_the_chain_counts_as_reached(tmp_path):
    """A decorator may register the function anywhere: the closure cannot follow it, so it stops."""
    trainer = FILES["training/training.py"].replace("        def train(", "        @register\n        def train(")
    assert reach.off_path(_namespace(tmp_path, {"training/training.py": trainer}), "hidden_knob") is None


def _installed_portions() -> list[Path]:
    return [installed_package_dir().parent]


def test_on_the_installed_mb_max_seqlen_per_dp_cp_rank_is_read_only_by_the_hybrid_cp_wrapper(tmp_path):
    found = reach.off_path(reach.Namespace(_installed_portions()), "max_seqlen_per_dp_cp_rank")
    if found is None:
        pytest.fail("megatron-core's HybridCPDataLoaderWrapper is reachable from MB, or gone: an ordinary knob now")
    assert found.readers == ("megatron.core.datasets.data_schedule.HybridCPDataLoaderWrapper",)
    assert "megatron.training.pretrain" in found.entries
    # negative control: one more MB module that builds the wrapper puts the knob on MB's path
    probe = tmp_path / "megatron" / "bridge" / "harness_probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "from megatron.core.datasets.data_schedule import HybridCPDataLoaderWrapper\n\n"
        "def loader(it, config):\n    return HybridCPDataLoaderWrapper(it, config)\n"
    )
    both = reach.Namespace([*_installed_portions(), probe.parent.parent])
    assert reach.off_path(both, "max_seqlen_per_dp_cp_rank") is None


def test_the_spy_marks_the_inherited_knob_and_the_table_says_why(monkeypatch):
    owner = "megatron.bridge.models.gpt_provider"
    off = Knob(owner, "GPTModelProvider", "max_seqlen_per_dp_cp_rank", "Optional", "None")
    on = Knob(owner, "GPTModelProvider", "context_parallel_size", "int", "1")
    monkeypatch.setattr(spy, "_INHERITED", {off.key, on.key})
    monkeypatch.setattr(spy, "_PACKAGE", {"bridge": installed_package_dir()})
    marked = spy._mark_off_path({off.key: off, on.key: on})
    assert marked[on.key] == on  # MB reads the CP size itself
    assert marked[off.key].read is False and "HybridCPDataLoaderWrapper" in marked[off.key].why
    line = records.KnobLine.loads(records.KnobLine.of_knob(marked[off.key]).dumps())
    assert line.knob == marked[off.key]  # the finding survives the log
    ex = records.Exercised({off.key: marked[off.key]}, {off.key: {"None": {"sft"}}}, {}, {off.key: {"None"}})
    rows = table.rows(ex)
    assert [r.status for r in rows] == [table.Status.NEVER_READ]
    reader = "read only by megatron.core.datasets.data_schedule.HybridCPDataLoaderWrapper"
    assert any(reader in ln for ln in table.lines(rows))
