"""The ``upstream`` suite: era resolution, per-test verdicts, counts, untestable cases.

Fast tests use small trees whose test files do not import MB; the ``slow`` test builds a git
repository from the installed MB's source plus test files written here (not MB's) and runs
the real subprocess once; the ``mirror`` tests run ``harness run --suite upstream`` on trees
extracted from a fetched MB mirror.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.paths import ROOT
from harness.records.verdict import Verdict
from harness.suiterun.upstream import NO_CHECKOUT, NO_MATCH, load_selection, outcomes, resolve, run_upstream, selection
from harness.target import Target

UTILS = "tests/unit_tests/training/utils/test_packed_seq_utils.py"
CONFIG = "tests/unit_tests/training/test_config.py"
VLM = "tests/unit_tests/training/test_vlm_step.py"
IN_BATCH = "tests/unit_tests/data/packing/test_in_batch.py"
PARQUET = "tests/unit_tests/data/packing/test_parquet.py"
SFT_OLD = "tests/unit_tests/data/datasets/test_sft.py"


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


def by_name(resolved):
    return {r.entry.name: r for r in resolved}


def cases_by_id(cases):
    return {c.case_id: c for c in cases}


# --------------------------------------------------------------------------- selection data


def test_selection_loads_and_covers_the_six_entries():
    sel = load_selection()
    assert [e.name for e in sel.entries] == [
        "packed_seq_utils",
        "config",
        "in_batch",
        "vlm_step",
        "packed_parquet",
        "sft_mapped_padding",
    ]
    counts = {(e.name, v.era): v.expected_passed for e in sel.entries for v in e.variants if v.expected_passed}
    assert counts == {
        ("packed_seq_utils", "guidance-2026-03"): 8,
        ("config", "guidance-2026-06"): 14,
        ("config", "guidance-2026-03"): 14,
        ("vlm_step", "guidance-2026-03"): 2,
    }
    assert sel.count_rule == "at_least"


def test_era_new_keywords(tmp_path):
    write(
        tmp_path,
        {
            UTILS: "",
            CONFIG: "def test_enable_in_batch_packing(): pass\n",
            VLM: "def test_deferred_in_batch_packing(): pass\n",
            IN_BATCH: "",
            "tests/unit_tests/data/datasets/test_gpt_sft.py": "mapped_padding_rows_do_not_contribute_to_loss",
        },
    )
    r = by_name(resolve(tmp_path, load_selection()))
    assert r["config"].variant.era == "guidance-2026-07" and "enable_in_batch_packing" in r["config"].variant.k
    assert "pack_sequences_in_batch" not in r["config"].variant.k
    assert r["vlm_step"].variant.k == "deferred_in_batch_packing or packed_metadata"
    assert r["packed_seq_utils"].expected_passed is None  # "all selected tests pass": no count
    assert r["in_batch"].variant.file == IN_BATCH
    assert r["sft_mapped_padding"].variant.file.endswith("test_gpt_sft.py")
    assert r["packed_parquet"].variant is None and NO_MATCH in r["packed_parquet"].reason


def test_era_old_keywords_and_renamed_files(tmp_path):
    write(
        tmp_path,
        {
            UTILS: "",
            CONFIG: "def test_pack_sequences_in_batch(): pass\n",
            VLM: "def test_enable_packing(): pass\n",
            "tests/unit_tests/data/vlm_datasets/test_batching.py": "",
            "tests/unit_tests/data/datasets/test_packed_parquet.py": "negative_index_zeroes_loss_mask",
        },
    )
    r = by_name(resolve(tmp_path, load_selection()))
    assert r["config"].variant.era == "guidance-2026-03"
    assert "pack_sequences_in_batch" in r["config"].variant.k and "enable_in_batch_packing" not in r["config"].variant.k
    assert r["vlm_step"].variant.k == "enable_packing" and r["vlm_step"].expected_passed == 2
    assert r["packed_seq_utils"].expected_passed == 8 and r["config"].expected_passed == 14
    assert r["in_batch"].variant.file.endswith("vlm_datasets/test_batching.py")
    assert r["packed_parquet"].variant.file.endswith("datasets/test_packed_parquet.py")
    assert r["sft_mapped_padding"].variant is None


def test_keyword_renamed_in_between_takes_the_2026_06_era(tmp_path):
    write(tmp_path, {CONFIG: "enable_in_batch_packing", VLM: "enable_packing"})
    r = by_name(resolve(tmp_path, load_selection()))
    assert r["config"].variant.era == "guidance-2026-06" and r["config"].expected_passed == 14


def test_file_present_but_no_probe_runs_without_count(tmp_path):
    write(tmp_path, {VLM: "def test_something_else(): pass\n"})
    r = by_name(resolve(tmp_path, load_selection()))["vlm_step"]
    assert r.variant is not None and not r.probed and r.expected_passed is None


# --------------------------------------------------------------------------- runs without MB (fast)


def fake_tree(root: Path, files: dict[str, str]) -> Target:
    (root / "src" / "megatron" / "bridge").mkdir(parents=True)
    write(root, files)
    return Target(src=root / "src")


def test_installed_target_is_untestable(tmp_path):
    cases, notes = run_upstream(Target(), tmp_path)
    assert [(c.case_id, c.verdict, c.message, c.source) for c in cases] == [
        ("upstream::*", Verdict.UNTESTABLE, NO_CHECKOUT, "upstream")
    ]
    assert NO_CHECKOUT in notes


def test_tree_without_tests_is_untestable(tmp_path):
    cases, _ = run_upstream(Target(src=tmp_path / "src"), tmp_path / "out")
    assert len(cases) == 1 and cases[0].verdict is Verdict.UNTESTABLE


FAST_FILES = {
    "tests/__init__.py": "",
    "tests/unit_tests/__init__.py": "",
    "tests/unit_tests/helpers.py": "VALUE = 3\n",
    UTILS: """
        import pytest
        from tests.unit_tests.helpers import VALUE

        def test_passes():
            assert VALUE == 3

        def test_fails():
            assert VALUE == 4, "packing broke"

        @pytest.mark.skip(reason="needs CUDA")
        def test_gpu():
            pass

        def test_no_driver():
            raise RuntimeError("Found no NVIDIA driver on your system.")
        """,
    CONFIG: """
        def test_enable_in_batch_packing_ok():
            pass

        def test_unrelated_is_deselected():
            raise AssertionError("must not run")
        """,
    VLM: """
        def test_enable_packing_one():
            pass

        def test_something_else():
            pass
        """,
    PARQUET: "def test_other():\n    pass\n",
    SFT_OLD: "import no_such_package_here\nmapped_padding_rows_do_not_contribute_to_loss = 1\n",
}


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("fasttree")
    tgt = fake_tree(root, FAST_FILES)
    out = root / "out"
    cases, notes = run_upstream(tgt, out, timeout_s=120)
    return cases_by_id(cases), notes, root, out


def test_fast_outcomes_read_as_data(fast_run):
    cases, _, _, _ = fast_run
    assert cases[f"upstream::{UTILS}::test_passes"].verdict is Verdict.PASS  # tests.* helper importable
    fail = cases[f"upstream::{UTILS}::test_fails"]
    assert fail.verdict is Verdict.FAIL and "packing broke" in fail.message and fail.source == "upstream"
    gpu = cases[f"upstream::{UTILS}::test_gpu"]
    assert gpu.verdict is Verdict.UNTESTABLE and gpu.message == "skipped by MB: needs CUDA"
    assert cases[f"upstream::{UTILS}::test_no_driver"].message.startswith("needs CUDA")
    assert all(c.suite == "upstream" for c in cases.values())


def test_fast_per_file_keyword(fast_run):
    cases, _, _, _ = fast_run
    assert cases[f"upstream::{CONFIG}::test_enable_in_batch_packing_ok"].verdict is Verdict.PASS
    assert f"upstream::{CONFIG}::test_unrelated_is_deselected" not in cases
    assert f"upstream::{VLM}::test_something_else" not in cases  # vlm -k enable_packing


def test_fast_count_mismatch_fails(fast_run):
    cases, _, _, _ = fast_run
    # config says enable_in_batch_packing and vlm says enable_packing: the 2026-06 guidance era
    assert cases["upstream::count::config"].verdict is Verdict.FAIL
    assert cases["upstream::count::config"].message.startswith("expected 14 passed, got 1")
    assert cases["upstream::count::vlm_step"].message.startswith("expected 2 passed, got 1")
    # 1 passed, 1 failed, 2 untestable: 8 are not reachable even with the untestable ones
    assert cases["upstream::count::packed_seq_utils"].verdict is Verdict.FAIL


def test_fast_no_match_absent_and_import_failure(fast_run):
    cases, notes, _, _ = fast_run
    assert cases["upstream::packed_parquet"].verdict is Verdict.UNTESTABLE  # file present, -k matches none
    assert NO_MATCH in cases["upstream::packed_parquet"].message
    assert cases["upstream::in_batch"].verdict is Verdict.UNTESTABLE  # file absent
    sft = cases[f"upstream::{SFT_OLD}"]
    assert sft.verdict is Verdict.UNTESTABLE and "no_such_package_here" in sft.message
    assert not any(c.verdict is Verdict.PASS and "count" in c.case_id for c in cases.values())
    assert any("era guidance-2026-06" in n for n in notes)


def test_fast_writes_nothing_into_the_tree(fast_run):
    _, _, root, out = fast_run
    assert (out / "events.jsonl").is_file() and (out / "pytest.log").is_file()
    assert not list(root.joinpath("tests").rglob("__pycache__"))
    assert not (root / ".pytest_cache").exists()


def test_count_rule_exact_and_at_least():
    entry = selection.Entry("e", (selection.Variant("era", "f.py", expected_passed=2),))
    r = selection.Resolved(entry, entry.variants[0], True)
    passed = [outcomes.make_case(f"upstream::f.py::t{i}", Verdict.PASS, "") for i in range(3)]
    assert outcomes.count_case(r, passed, "", "at_least").verdict is Verdict.PASS
    exact = outcomes.count_case(r, passed, "", "exact")
    assert exact.verdict is Verdict.FAIL and exact.message.startswith("expected 2 passed, got 3")
    skipped = [passed[0], outcomes.make_case("upstream::f.py::t9", Verdict.UNTESTABLE, "skipped by MB: x")]
    assert outcomes.count_case(r, skipped, "", "at_least").verdict is Verdict.UNTESTABLE


def test_timeout_kills_the_group_and_keeps_finished_outcomes(tmp_path):
    tgt = fake_tree(
        tmp_path / "t",
        {
            UTILS: """
        import time

        def test_a_quick():
            pass

        def test_b_hangs():
            time.sleep(300)
        """
        },
    )
    cases, notes = run_upstream(tgt, tmp_path / "out", timeout_s=15)
    c = cases_by_id(cases)
    assert c[f"upstream::{UTILS}::test_a_quick"].verdict is Verdict.PASS
    hung = c[f"upstream::{UTILS}::test_b_hangs"]
    assert hung.verdict is Verdict.UNTESTABLE and "timeout" in hung.message
    assert any("timeout" in n for n in notes)


# --------------------------------------------------------------------------- the real MB (slow)


MB_FILES = {
    "tests/__init__.py": "",
    "tests/unit_tests/__init__.py": "",
    "tests/unit_tests/helpers.py": "def lengths():\n    return [3, 5]\n",
    UTILS: """
        import pytest
        import torch

        from megatron.bridge.training.utils.packed_seq_utils import get_packed_seq_params
        from tests.unit_tests.helpers import lengths


        @pytest.mark.parametrize("extra", range(8))
        def test_cu_seqlens_reach_params(extra):
            cu = torch.tensor([0] + [sum(lengths()[: i + 1]) + extra for i in range(2)], dtype=torch.int32)
            params = get_packed_seq_params({"cu_seqlens_q": cu.unsqueeze(0), "cu_seqlens_kv": cu.unsqueeze(0),
                                            "max_seqlen_q": torch.tensor(5 + extra),
                                            "max_seqlen_kv": torch.tensor(5 + extra)})
            assert params.qkv_format == "thd"
            assert params.cu_seqlens_q.tolist()[-1] == cu.tolist()[-1]


        @pytest.mark.skip(reason="needs a CUDA device")
        def test_on_gpu():
            pass
        """,
    CONFIG: """
        from megatron.bridge.training.utils.packed_seq_utils import get_packed_seq_params


        def test_pack_sequences_in_batch_is_importable():
            assert callable(get_packed_seq_params)


        def test_unrelated():
            raise AssertionError("deselected")
        """,
    VLM: """
        def test_enable_packing_a():
            pass


        def test_enable_packing_b():
            pass
        """,
}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


@pytest.fixture(scope="module")
def mb_repo(tmp_path_factory):
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("no installed megatron.bridge")
    repo = tmp_path_factory.mktemp("mbrepo")
    shutil.copytree(
        next(iter(spec.submodule_search_locations)),
        repo / "src" / "megatron" / "bridge",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    write(repo, MB_FILES)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "mb + written tests")
    return repo


@pytest.mark.slow
def test_real_mb_checkout_old_era(mb_repo, tmp_path):
    tgt = Target.from_args(str(mb_repo))
    assert tgt.commit and not tgt.commit.endswith("-dirty")
    cases, notes = run_upstream(tgt, tmp_path / "out", timeout_s=600)
    c = cases_by_id(cases)
    passed = [k for k, v in c.items() if k.startswith(f"upstream::{UTILS}::") and v.verdict is Verdict.PASS]
    assert len(passed) == 8, notes
    assert c[f"upstream::{UTILS}::test_on_gpu"].verdict is Verdict.UNTESTABLE
    assert c["upstream::count::packed_seq_utils"].verdict is Verdict.PASS  # guidance: 8 passed
    assert c[f"upstream::{CONFIG}::test_pack_sequences_in_batch_is_importable"].verdict is Verdict.PASS
    assert f"upstream::{CONFIG}::test_unrelated" not in c
    assert c["upstream::count::config"].verdict is Verdict.FAIL  # 1 of the stated 14
    assert c["upstream::count::vlm_step"].verdict is Verdict.PASS  # 2 of 2
    assert c["upstream::in_batch"].verdict is Verdict.UNTESTABLE
    assert not (mb_repo / "src" / "megatron" / "bridge" / "__pycache__").exists()
    assert not subprocess.run(
        ["git", "-C", str(mb_repo), "status", "--porcelain"], capture_output=True, text=True
    ).stdout.strip()


# --------------------------------------------------------------------------- the real mirror


MIRROR = Path(os.environ.get("HARNESS_MB_MIRROR", "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"))


@pytest.mark.mirror
@pytest.mark.slow
@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-Bridge mirror (set HARNESS_MB_MIRROR)")
@pytest.mark.parametrize("ref", ["v0.6.0"])
def test_mirror_release_runs_green(ref, tmp_path):
    tree = tmp_path / ref
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(MIRROR), "archive", ref, "src", "tests", "pyproject.toml"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--suite",
            "upstream",
            "--mb-src",
            str(tree),
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "upstream" in proc.stdout
