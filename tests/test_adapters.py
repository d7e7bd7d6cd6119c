"""Adapter resolution logic with fake MB modules (no MB import), plus light import of the real MB."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from harness.errors import Broken, Untestable
from harness.paths import ROOT, SITE_DIR
from harness.suite.adapters import Candidate, MissingOutput, NotHere, Operation, accepts, load_module, symbol, thd
from tests.conftest import FAKE


def test_probing_order_first_fit_wins(fake_pkg):
    fake_pkg("new.py", "def op(x): return ('new', x)\n")
    fake_pkg("old.py", "def op(x): return ('old', x)\n")
    op = Operation(
        "op",
        [Candidate("new", lambda: symbol(f"{FAKE}.new", "op")), Candidate("old", lambda: symbol(f"{FAKE}.old", "op"))],
    )
    assert op(1) == ("new", 1) and op.era == "new"


def test_not_here_falls_through_to_next_candidate(fake_pkg):
    fake_pkg("old.py", "def op(x): return ('old', x)\n")
    fake_pkg("renamed.py", "def other(x): return x\n")
    op = Operation(
        "op",
        [
            Candidate("absent module", lambda: symbol(f"{FAKE}.absent", "op")),
            Candidate("absent symbol", lambda: symbol(f"{FAKE}.renamed", "op")),
            Candidate("old", lambda: symbol(f"{FAKE}.old", "op")),
        ],
    )
    assert op(2) == ("old", 2) and op.era == "old"


def test_untestable_when_nothing_resolves_lists_tries(fake_pkg):
    op = Operation(
        "op", [Candidate("a", lambda: symbol(f"{FAKE}.a", "op")), Candidate("b", lambda: symbol(f"{FAKE}.b", "op"))]
    )
    with pytest.raises(Untestable) as exc:
        op(1)
    assert "a: no module" in str(exc.value) and "b: no module" in str(exc.value)
    with pytest.raises(Untestable):  # never cached as a success, raised again
        op(1)


def test_missing_dependency_is_untestable_not_next_candidate(fake_pkg):
    fake_pkg("broken.py", "import harness_no_such_dependency_xyz\ndef op(x): return x\n")
    fake_pkg("old.py", "def op(x): return x\n")
    with pytest.raises(Untestable, match="broken failed: missing dependency 'harness_no_such_dependency_xyz'"):
        load_module(f"{FAKE}.broken")
    op = Operation(
        "op",
        [
            Candidate("broken", lambda: symbol(f"{FAKE}.broken", "op")),
            Candidate("old", lambda: symbol(f"{FAKE}.old", "op")),
        ],
    )
    with pytest.raises(Untestable):
        op(1)


def test_broken_parent_package_is_untestable(fake_pkg):
    fake_pkg("sub/__init__.py", "raise RuntimeError('needs CUDA')\n")
    fake_pkg("sub/mod.py", "x = 1\n")
    with pytest.raises(Untestable, match="needs CUDA"):
        load_module(f"{FAKE}.sub.mod")


def test_late_not_here_becomes_untestable():
    def probe():
        def call():
            raise NotHere("output keys differ")

        return call

    with pytest.raises(Untestable, match="output keys differ"):
        Operation("op", [Candidate("x", probe)])()


def test_errors_inside_the_operation_propagate_unchanged():
    def probe():
        return lambda: 1 / 0

    with pytest.raises(ZeroDivisionError):  # classified by the plugin (ERROR or FAIL by frame), not hidden
        Operation("op", [Candidate("x", probe)])()


def test_accepts():
    def f(a, *, pad_to_multiple_of=1):
        return a

    assert accepts(f, "pad_to_multiple_of") and not accepts(f, "pad_token_id")
    assert not accepts(42, "x")


# ---- canonicalisation -----------------------------------------------------------------------


def test_canonical_params_tensor_shapes_and_none():
    params = types.SimpleNamespace(
        qkv_format="thd",
        cu_seqlens_q=torch.tensor([[0, 3, 5]]),
        cu_seqlens_kv=torch.tensor([0, 3, 5]),
        max_seqlen_q=torch.tensor([[3]]),
        max_seqlen_kv=3,
    )
    out = thd.canonical_params(params)
    assert out == {
        "qkv_format": "thd",
        "cu_seqlens_q": [0, 3, 5],
        "cu_seqlens_kv": [0, 3, 5],
        "cu_seqlens_q_padded": None,
        "cu_seqlens_kv_padded": None,
        "max_seqlen_q": 3,
        "max_seqlen_kv": 3,
    }


def _packed(**extra):
    base = {
        "tokens": torch.tensor([[1, 2, 0, 3]]),
        "labels": torch.tensor([[2, -100, -100, -100]]),
        "loss_mask": torch.tensor([[1.0, 0, 0, 0]]),
        "position_ids": torch.tensor([[0, 1, 0, 0]]),
    }
    return {**base, **extra}


def test_canonical_thd_batch_current_keys():
    out = thd.canonical_thd_batch(
        _packed(
            cu_seqlens_q=torch.tensor([0, 2, 3]),
            cu_seqlens_q_padded=torch.tensor([0, 2, 4]),
            max_seqlen_q=torch.tensor(2),
        )
    )
    assert out["cu_seqlens_padded"] == [0, 2, 4] and out["cu_seqlens_unpadded"] == [0, 2, 3]
    assert out["max_seqlen"] == 2 and out["tokens"] == [1, 2, 0, 3]


def test_canonical_thd_batch_current_keys_without_padding():
    out = thd.canonical_thd_batch(_packed(cu_seqlens_q=torch.tensor([0, 2, 4]), max_seqlen_q=2))
    assert out["cu_seqlens_padded"] == out["cu_seqlens_unpadded"] == [0, 2, 4]


def test_canonical_thd_batch_legacy_keys_with_sentinels():
    out = thd.canonical_thd_batch(
        _packed(
            cu_seqlens=torch.tensor([[0, 2, 4, -1, -1]]),
            cu_seqlens_unpadded=torch.tensor([[0, 2, 3, -1]]),
            max_seqlen=torch.tensor([[2]]),
        )
    )
    assert out["cu_seqlens_padded"] == [0, 2, 4] and out["cu_seqlens_unpadded"] == [0, 2, 3]
    assert out["max_seqlen"] == 2


def test_canonical_thd_batch_without_boundaries_is_missing_output():
    with pytest.raises(MissingOutput):  # MB returned a batch without boundaries: broken, not an era gap
        thd.canonical_thd_batch(_packed())


def test_strip_sentinel():
    assert thd.strip_sentinel([0, 5, 9, -1, -1]) == [0, 5, 9]
    assert thd.strip_sentinel([0, 5]) == [0, 5]
    assert thd.strip_sentinel(None) is None


def test_vlm_step_tuple_and_direct_dict_eras_agree(fake_pkg, monkeypatch):
    """A 7-tuple era and a dict-returning era give the same canonical value."""
    fake_pkg(
        "vlm_step.py",
        """
        import torch
        def pack_batch_sequences(tokens, labels, loss_mask, attention_mask, position_ids, pad_token_id=0,
                                 pad_to_multiple_of=1):
            return (tokens[:, :3].reshape(1, -1), labels[:, :3].reshape(1, -1), loss_mask[:, :3].reshape(1, -1),
                    None, position_ids[:, :3].reshape(1, -1), torch.tensor([0, 3], dtype=torch.int32),
                    torch.tensor(3))
    """,
    )
    fake_pkg(
        "in_batch.py",
        """
        import torch
        def pack_right_padded_sequence_batch_to_mcore_thd(batch, *, pad_token_id=0, pad_to_multiple_of=1):
            for k in ("tokens", "labels", "loss_mask", "position_ids"):
                batch[k] = batch[k][:, :3].reshape(1, -1)
            batch["cu_seqlens_q"] = torch.tensor([0, 3], dtype=torch.int32)
            batch["max_seqlen_q"] = torch.tensor(3)
    """,
    )
    monkeypatch.setattr(
        thd, "symbol", lambda m, n: symbol(f"{FAKE}.vlm_step" if "vlm_step" in m else f"{FAKE}.in_batch", n)
    )
    t = torch.tensor([[5, 6, 7, 0]])
    args = (t, t, torch.ones(1, 4), torch.tensor([[0, 1, 2, 0]]))
    old = thd._in_batch_vlm_step()(*args)
    new = thd._in_batch_canonical(thd._collate_direct("x.in_batch"))()(*args)
    assert old["cu_seqlens_padded"] == new["cu_seqlens_padded"] == [0, 3]
    assert old["tokens"] == new["tokens"] == [5, 6, 7] and old["max_seqlen"] == new["max_seqlen"] == 3
    assert old["cu_seqlens_unpadded"] is None and new["cu_seqlens_unpadded"] == [0, 3]


# ---- light import ---------------------------------------------------------------------------


def test_light_finder_skips_package_init(tmp_path, monkeypatch):
    """Fake megatron.bridge-like tree: package __init__ never runs; lazy names still resolve."""
    from harness.suite.standins import light

    root = tmp_path / "lightpkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("raise RuntimeError('package __init__ executed')\n")
    (root / "sub" / "__init__.py").write_text("from .mod import VALUE as REEXPORTED\nDEFINED_HERE = REEXPORTED + 1\n")
    (root / "sub" / "mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(light, "ROOTS", ("lightpkg",))
    light.uninstall()
    light.install()
    try:
        import importlib

        mod = importlib.import_module("lightpkg.sub.mod")
        assert mod.VALUE == 41
        assert light.skipped_init(sys.modules["lightpkg"])
        sub = sys.modules["lightpkg.sub"]
        assert light.skipped_init(sub)
        assert sub.REEXPORTED == 41  # a re-export resolves through the __init__'s import statement...
        assert light.skipped_init(sub)  # ...without running the __init__
        assert sub.DEFINED_HERE == 42  # a name the __init__ itself defines: the real __init__ runs once
        assert not light.skipped_init(sub)
    finally:
        light.uninstall()
        for name in [m for m in sys.modules if m == "lightpkg" or m.startswith("lightpkg.")]:
            del sys.modules[name]


@pytest.mark.slow
def test_light_import_of_installed_mb_packing_modules():
    code = textwrap.dedent("""
        import sys
        from harness.suite.standins import light
        assert light.active()
        mods = ["megatron.bridge.data.packing.algorithms", "megatron.bridge.training.utils.packed_seq_utils"]
        import importlib, importlib.util
        mods = [m for m in mods if importlib.util.find_spec(m) is not None] or \
            ["megatron.bridge.data.datasets.packing_utils"]
        for m in mods:
            importlib.import_module(m)
        top = sys.modules["megatron.bridge"]
        assert light.skipped_init(top), "megatron/bridge/__init__.py was executed"
        assert "megatron.bridge.models" not in sys.modules, "the model zoo was imported"
        print("OK", mods)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(ROOT)]), HARNESS_IMPORT_MODE="light")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=Path(ROOT)
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_missing_dependency_of_a_parent_is_untestable_not_absent(tmp_path, monkeypatch):
    """A package whose __init__ imports a module this environment lacks: the era's module is there,
    so the case is untestable with the missing dependency named, not 'operation not found'."""
    from harness.suite.adapters import NotHere, load_module
    from harness.suite.plugin import Untestable

    root = tmp_path / "depbroken"
    (root / "data").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "data" / "__init__.py").write_text("import harness_missing_dependency_xyz\n")
    (root / "data" / "offline.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Untestable, match="harness_missing_dependency_xyz"):
        load_module("depbroken.data.offline")
    with pytest.raises(NotHere):
        load_module("depbroken.absent_module")
    for name in [m for m in sys.modules if m == "depbroken" or m.startswith("depbroken.")]:
        del sys.modules[name]


# ---- broken (FAIL) vs untestable (skip) ------------------------------------------------------


@pytest.fixture
def mb_pkg(fake_pkg, tmp_path, monkeypatch):
    """``fake_pkg`` declared the code under test (as the runner does for MB's tree)."""
    monkeypatch.setenv("HARNESS_MB_ROOTS", str(tmp_path / FAKE))
    return fake_pkg


@pytest.mark.parametrize(
    "source",
    [
        "def op(x:\n    return x\n",  # SyntaxError in the module itself
        f"import {FAKE}.removed_helper\n",  # imports a module of the code under test that does not exist
        f"from {FAKE}.helpers import gone\n",  # imports a name the code under test does not define
        "X = undefined_name\n",  # the module body raises
    ],
    ids=["syntax", "missing-mb-module", "missing-mb-name", "module-body-raises"],
)
def test_present_module_that_cannot_import_is_broken(mb_pkg, source):
    mb_pkg("helpers.py", "kept = 1\n")
    mb_pkg("packing.py", source)
    with pytest.raises(Broken, match=f"import of {FAKE}.packing failed"):
        load_module(f"{FAKE}.packing")
    op = Operation(
        "op",
        [
            Candidate("new", lambda: symbol(f"{FAKE}.packing", "op")),
            Candidate("old", lambda: symbol(f"{FAKE}.helpers", "kept")),
        ],
    )
    with pytest.raises(Broken):  # a broken newest era never falls back to an older candidate
        op(1)


def test_syntax_error_in_an_imported_mb_module_is_broken(mb_pkg):
    mb_pkg("utils.py", "def f(:\n")
    mb_pkg("packing.py", f"from {FAKE}.utils import f\n")
    with pytest.raises(Broken, match="SyntaxError"):
        load_module(f"{FAKE}.packing")


@pytest.mark.parametrize(
    "source,reason",
    [
        ("import harness_no_such_dependency_xyz\n", "missing dependency 'harness_no_such_dependency_xyz'"),
        (
            "try:\n    import harness_fla_xyz\n"
            "except ImportError as e:\n    raise RuntimeError('install fla') from e\n",
            "missing dependency 'harness_fla_xyz'",
        ),
        ("raise ImportError('apex is required for this module')\n", "in this environment: ImportError: apex"),
        ("from json import no_such_name_xyz\n", "in this environment: ImportError"),
    ],
    ids=["missing-third-party", "mb-reraises-missing", "mb-says-required", "name-missing-outside"],
)
def test_environment_import_failures_stay_untestable(mb_pkg, source, reason):
    mb_pkg("packing.py", source)
    with pytest.raises(Untestable, match=re.escape(reason)):
        load_module(f"{FAKE}.packing")


def test_third_party_raising_while_mb_imports_it_is_untestable(mb_pkg, tmp_path, monkeypatch):
    (tmp_path / "harness_thirdparty_xyz.py").write_text("raise ValueError('built for another torch')\n")
    mb_pkg("packing.py", "import harness_thirdparty_xyz\n")
    try:
        with pytest.raises(Untestable, match="raised outside the code under test"):
            load_module(f"{FAKE}.packing")
    finally:
        sys.modules.pop("harness_thirdparty_xyz", None)


CORE = "harness_fake_core"


@pytest.mark.parametrize(
    "core_source,mb_source",
    [
        ("kept = 1\n", f"from {CORE}.params import gone\n"),  # a name MB needs, absent at this core commit
        ("kept = 1\n", f"import {CORE}.renamed_module\n"),  # a core module MB needs, absent here
        ("class Params:\n    (\n", f"from {CORE}.params import Params\n"),  # the core itself does not parse
        ("raise RuntimeError('core body')\n", f"from {CORE}.params import Params\n"),  # its body raises
    ],
    ids=["name-absent", "module-absent", "syntax", "body-raises"],
)
def test_megatron_core_that_does_not_fit_the_mb_held_fixed_is_untestable_only_while_it_varies(
    fake_pkg, tmp_path, monkeypatch, core_source, mb_source
):
    """Second level of a bisection (MB held, Megatron-LM commits vary): a megatron-core that does
    not import with that MB is a mismatch, a skip; the same at the first level (the core MB pins
    comes with the MB commit) is that commit's break. MB's own break stays a break."""
    from harness.owners import encode_roots

    (tmp_path / CORE).mkdir()
    (tmp_path / CORE / "__init__.py").write_text("")
    (tmp_path / CORE / "params.py").write_text(core_source)
    fake_pkg("packing.py", mb_source)
    fake_pkg("own.py", "def f(:\n")
    monkeypatch.setenv("HARNESS_MB_ROOTS", encode_roots([tmp_path / FAKE, tmp_path / CORE]))

    def fresh() -> None:
        for name in [m for m in sys.modules if m.startswith((CORE, f"{FAKE}."))]:
            del sys.modules[name]

    try:
        with pytest.raises(Broken, match=f"import of {FAKE}.packing failed"):
            load_module(f"{FAKE}.packing")
        fresh()
        monkeypatch.setenv("HARNESS_VARYING_CORE", encode_roots([tmp_path / CORE]))
        with pytest.raises(Untestable, match="does not import with the Megatron-Bridge held fixed"):
            load_module(f"{FAKE}.packing")
        with pytest.raises(Broken, match="SyntaxError"):
            load_module(f"{FAKE}.own")
    finally:
        fresh()


def test_absent_module_is_not_here_even_under_test(mb_pkg):
    with pytest.raises(NotHere):
        load_module(f"{FAKE}.never_existed")


def test_output_missing_is_broken_not_untestable():
    def probe():
        def call():
            raise MissingOutput("rows lack loss_mask")

        return call

    with pytest.raises(Broken, match="operation 'op' \\(x\\): rows lack loss_mask"):
        Operation("op", [Candidate("x", probe)])()


def test_tokenizer_config_names_the_directory_chat_template(tmp_path, monkeypatch):
    """A TokenizerConfig with hf_tokenizer_kwargs names the chat template the directory ships."""
    import dataclasses

    from harness.suite.adapters import mbtokenizer

    @dataclasses.dataclass
    class WithField:
        tokenizer_type: str
        tokenizer_model: str
        hf_tokenizer_kwargs: dict | None = None

    @dataclasses.dataclass
    class WithoutField:
        tokenizer_type: str
        tokenizer_model: str

    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    for cls, expected in ((WithField, "{{ messages }}"), (WithoutField, None)):
        built = {"TokenizerConfig": cls, "build_tokenizer": lambda config: config}
        monkeypatch.setattr(mbtokenizer, "symbol", lambda _module, name, built=built: built[name])
        cfg = mbtokenizer._tokenizer_probe("any")()(tmp_path)
        named = (getattr(cfg, "hf_tokenizer_kwargs", None) or {}).get("chat_template")
        assert named == expected and cfg.tokenizer_model == str(tmp_path)


class _Builder:
    """A builder whose ``prepare_packed_data`` shuffles with a private seed (restoring or not)."""

    def __init__(self, restore: bool) -> None:
        self.restore = restore

    def prepare_packed_data(self) -> None:
        import numpy as np

        state = np.random.get_state()
        np.random.seed(7)
        np.random.shuffle(list(range(5)))
        if self.restore:
            np.random.set_state(state)

    def build(self) -> None:
        self.prepare_packed_data()


@pytest.mark.parametrize("restore", [True, False])
def test_global_rng_watch_sees_whether_preparation_restores(restore):
    import numpy as np

    from harness.suite.adapters.sftspies import watch_global_rng

    builder = _Builder(restore)
    np.random.seed(123)
    with watch_global_rng(builder) as watch:
        builder.build()
    assert watch.kept is restore
    assert "prepare_packed_data" not in vars(builder), "the spy is removed after the block"


def test_global_rng_watch_without_preparation_says_nothing():
    from harness.suite.adapters.sftspies import watch_global_rng

    with watch_global_rng(object()) as watch:
        pass
    assert watch.kept is None


def test_a_valid_layout_mb_refuses_has_no_multiple_and_is_a_finding():
    """``packing_multiple``: an accepted layout's multiple; a refused one is ``refuses-valid-config``
    with MB's message (before, a refused outcome's ``None`` reached the arithmetic as a crash)."""
    from harness.records.impact import Impact, ImpactFailure
    from harness.suite.adapters.cp import packing_multiple
    from harness.suite.adapters.rules import ConfigOutcome

    accepted: ConfigOutcome = {"accepted": True, "error_class": None, "message": "", "rules": [], "raised_at": None}
    assert packing_multiple({**accepted, "multiple": 8}) == 8
    refused: ConfigOutcome = {**accepted, "accepted": False, "error_class": "ValueError", "message": "CP needs 2x"}
    with pytest.raises(ImpactFailure, match="CP needs 2x") as caught:
        packing_multiple(refused)
    assert caught.value.impact is Impact.REFUSES_VALID_CONFIG
