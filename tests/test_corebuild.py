"""The dataset helpers of a pinned Megatron-LM tree: built by megatron-core's own call, once per source.

Fake trees (a ``compile_helpers()`` that runs the datasets directory's Makefile, a Makefile that logs
each build): a bisection walks dozens of pins whose helpers are the same source, and only the first
of them may pay for the compiler.
"""

from __future__ import annotations

from pathlib import Path

from harness.repository.corebuild import _ext_suffix, ensure_helpers, helpers_built, source_key

UTILS = (
    "import os, subprocess\n"
    "def compile_helpers():\n"
    "    subprocess.run(['make', '-C', os.path.dirname(os.path.abspath(__file__))], check=True)\n"
)
MAKEFILE = (
    "helpers_cpp$(shell python3-config --extension-suffix): helpers.cpp\n\techo built >> builds.log && cp $< $@\n"
)


def _tree(root: Path, source: str) -> Path:
    datasets = root / "megatron" / "core" / "datasets"
    datasets.mkdir(parents=True)
    for pkg in (root / "megatron", root / "megatron" / "core", datasets):
        (pkg / "__init__.py").write_text("")
    (datasets / "utils.py").write_text(UTILS)
    (datasets / "Makefile").write_text(MAKEFILE)
    (datasets / "helpers.cpp").write_text(source)
    return root


def test_a_tree_with_the_same_helper_sources_gets_the_build_without_compiling(tmp_path: Path) -> None:
    shared = tmp_path / "built"
    first, second = _tree(tmp_path / "a", "int x;\n"), _tree(tmp_path / "b", "int x;\n")
    other = _tree(tmp_path / "c", "int y;\n")
    datasets = Path("megatron") / "core" / "datasets"
    name = f"helpers_cpp{_ext_suffix()}"

    assert ensure_helpers(first, shared=shared) is None
    assert (first / datasets / "builds.log").read_text() == "built\n"
    assert source_key(first, "py") == source_key(second, "py") != source_key(other, "py")

    assert ensure_helpers(second, shared=shared) is None
    assert helpers_built(second) and not (second / datasets / "builds.log").exists(), "compiled again"
    assert (second / datasets / name).read_bytes() == (first / datasets / name).read_bytes()

    assert ensure_helpers(other, shared=shared) is None  # other sources: its own build
    assert (other / datasets / "builds.log").read_text() == "built\n"
    assert (other / datasets / name).read_text() == "int y;\n"


def test_without_a_shared_folder_every_tree_builds(tmp_path: Path) -> None:
    trees = [_tree(tmp_path / n, "int x;\n") for n in ("a", "b")]
    for tree in trees:
        assert ensure_helpers(tree) is None
        assert (tree / "megatron" / "core" / "datasets" / "builds.log").read_text() == "built\n"


def test_a_pinned_tree_is_compiled_once_and_its_bytecode_is_what_python_imports(tmp_path: Path) -> None:
    """Suite processes never write bytecode; the harness compiles its own cached tree once."""
    import importlib.util
    import sys

    from harness.repository.corebuild import ensure_bytecode

    tree = _tree(tmp_path / "t", "int f() { return 1; }")
    module = tree / "megatron" / "core" / "datasets" / "utils.py"
    ensure_bytecode(tree)
    pyc = Path(importlib.util.cache_from_source(str(module)))
    assert pyc.is_file(), "compiled next to the source, where an import looks"
    assert (tree / f".harness-bytecode-{sys.implementation.cache_tag}").is_file()
    pyc.unlink()
    ensure_bytecode(tree)
    assert not pyc.exists(), "a tree is compiled once (the marker), not on every evaluation"
