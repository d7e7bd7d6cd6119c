"""Build what a Megatron-LM source tree needs built before MB's data path runs, once per pin.

A pinned Megatron-LM tree is source: ``megatron/core/datasets/helpers_cpp`` (the sample-index
builder of ``GPTDataset``, ``BlendedDataset`` ...) is a C++ extension made by that directory's
``Makefile``. The PyPI wheel of megatron-core ships it built; a tree extracted from git does not.
MB's own entry point builds it: ``training/initialize.py`` calls megatron-core's
``compile_helpers()`` on local rank 0 before any dataset is built. The harness does the same,
through that very function of the pinned tree, so a case never meets a missing build artifact
that a user's training would have built (issue: the environment is ours, never MB's fail). The build
imports the pinned ``megatron.core`` with the suite process's stand-ins (:func:`_with_standins`).

The artifact lands in the cached tree; a build that fails leaves its output in :data:`LOG`, which
the verdict of a case that then misses the module cites as an environment error
(:mod:`harness.suite.adapters.failures`), never as MB's ``broken:``.

Built once per source, not once per pin: the pins a long bisection walks (dozens) almost all carry the
same ``helpers.cpp``, and each build costs a compiler run (about 18 s on 2 cores). With a ``shared``
folder, a built extension is kept there under the hash of what makes it (the datasets directory's
``Makefile`` and C++ sources, the interpreter and its extension suffix) and copied into the next tree
whose sources hash the same. Same sources, same compiler, same interpreter: the same module.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from harness.contract import CORE_BUILD_LOG
from harness.paths import ROOT, SITE_DIR

DATASETS = Path("megatron") / "core" / "datasets"
LOG = CORE_BUILD_LOG  # in the datasets directory: why the last build failed
_TIMEOUT_S = 600

# Run in the suite's interpreter with the tree first on sys.path: MB's own call.
_CALL = (
    "import sys; sys.path.insert(0, sys.argv[1]);"
    "from megatron.core.datasets.utils import compile_helpers; compile_helpers()"
)


def helpers_built(tree: Path) -> bool:
    """True when the tree's ``helpers_cpp`` extension for this interpreter exists (or the tree
    has none to build: no Makefile in its datasets directory)."""
    datasets = Path(tree) / DATASETS
    if not (datasets / "Makefile").is_file():
        return True
    return (datasets / f"helpers_cpp{_ext_suffix()}").is_file()


def source_key(tree: Path, python: str) -> str:
    """What the extension is made of: the datasets directory's Makefile and C++ sources, the
    interpreter and its extension suffix (a hash; the shared folder's name for the build)."""
    datasets = Path(tree) / DATASETS
    digest = hashlib.sha256(f"{python}\0{_ext_suffix()}\0".encode())
    for path in sorted(datasets.iterdir()):
        if path.name == "Makefile" or path.suffix in (".cpp", ".cc", ".h", ".hpp"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def _from_shared(datasets: Path, shared: Path | None, key: str) -> bool:
    """Copy a build of the same sources from ``shared`` into ``datasets``; whether there was one."""
    if shared is None:
        return False
    built = shared / key / f"helpers_cpp{_ext_suffix()}"
    if not built.is_file():
        return False
    partial = datasets / f".helpers_cpp{_ext_suffix()}.part"
    shutil.copy2(built, partial)
    os.replace(partial, datasets / built.name)  # atomic: a concurrent reader sees all of it or nothing
    return True


def _to_shared(datasets: Path, shared: Path | None, key: str) -> None:
    """Keep this tree's fresh build in ``shared`` for the next tree with the same sources."""
    if shared is None:
        return
    folder = shared / key
    folder.mkdir(parents=True, exist_ok=True)
    name = f"helpers_cpp{_ext_suffix()}"
    partial = folder / f".{name}.{os.getpid()}.part"
    shutil.copy2(datasets / name, partial)
    os.replace(partial, folder / name)


def ensure_helpers(tree: Path, python: str | None = None, shared: Path | None = None) -> str | None:
    """Build the tree's dataset helpers with megatron-core's ``compile_helpers()`` unless built.

    Returns None when the extension is there afterwards, else the reason (also written to
    :data:`LOG`). Concurrent callers (parallel probes on one pin) wait on a lock in the tree.
    ``python``: the interpreter the suites run in (default this one), whose headers and
    extension suffix the build must match. ``shared``: where builds are kept by their sources'
    hash (module docstring); a tree whose sources were built before gets that build.
    """
    tree = Path(tree)
    datasets = tree / DATASETS
    if helpers_built(tree):
        return None
    python = python or sys.executable
    with open(datasets / ".harness-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if helpers_built(tree):
            return None
        key = source_key(tree, python)
        if _from_shared(datasets, shared, key):
            return None
        with tempfile.TemporaryDirectory(prefix="harness-build-") as shims:
            env = {
                **os.environ,
                "PATH": f"{_shims(Path(shims), python)}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYTHONPATH": _with_standins(os.environ.get("PYTHONPATH", "")),
            }
            try:
                proc = subprocess.run(
                    [python, "-c", _CALL, str(tree)],
                    cwd=datasets,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=_TIMEOUT_S,
                    stdin=subprocess.DEVNULL,
                )
                output = (proc.stdout + proc.stderr).strip()
                ok = proc.returncode == 0 and helpers_built(tree)
            except (OSError, subprocess.TimeoutExpired) as exc:
                output, ok = f"{type(exc).__name__}: {exc}", False
        log = datasets / LOG
        if ok:
            log.unlink(missing_ok=True)
            _to_shared(datasets, shared, key)
            return None
        reason = (
            "megatron-core's compile_helpers() did not build helpers_cpp in the pinned tree "
            f"({python}): {(output.splitlines() or ['no output'])[-1][:240]}"
        )
        log.write_text(f"{output}\n{reason}\n", encoding="utf-8")
        return reason


def _with_standins(pythonpath: str) -> str:
    """``PYTHONPATH`` with the harness's stand-ins first, as every suite process has them: importing the
    pinned tree's ``megatron.core`` (what ``compile_helpers()`` needs) runs module bodies that build CUDA
    extensions unguarded in some eras (late-2025 pins: ``inference/unified_memory``), which the suite
    process survives through :mod:`harness.suite.standins.cuda_ext`; the build must too."""
    return os.pathsep.join(p for p in (str(SITE_DIR), str(ROOT), pythonpath) if p)


def _ext_suffix() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def _shims(folder: Path, python: str) -> Path:
    """``python3`` and ``python3-config`` as the Makefile calls them, answering for ``python``.

    The Makefile asks ``python3 -m pybind11 --includes`` and ``python3-config
    --extension-suffix``; on PATH those would be whatever interpreter the machine has first, not
    the one that imports the extension, and a wrong suffix builds a module nobody finds.
    """
    # scripts, not symlinks: a venv's interpreter finds its site-packages (pybind11) by the path
    # it is started from
    scripts = {
        "python3": f'exec "{python}" "$@"\n',
        "python3-config": (
            f'exec "{python}" -c "import sys, sysconfig; '
            "sys.argv[1:] == ['--extension-suffix'] or sys.exit('only --extension-suffix'); "
            'print(sysconfig.get_config_var(\'EXT_SUFFIX\'))" "$@"\n'
        ),
    }
    for name, body in scripts.items():
        script = folder / name
        script.write_text(f"#!/bin/sh\n{body}", encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def ensure_bytecode(tree: Path) -> None:
    """Compile the ``megatron/`` tree's modules once, into the tree (it is the harness's cache,
    never a user's checkout).

    Why: suite processes run with ``PYTHONDONTWRITEBYTECODE`` (a user's checkout must stay
    clean), so without this every process that imports a pinned tree compiled its ~600 modules
    again: each fork-server start and plain subprocess paid about 2 s for it. Bytecode next to
    the source is checked against the source's mtime and size at import, as always.
    """
    import compileall
    import warnings

    marker = tree / f".harness-bytecode-{sys.implementation.cache_tag}"
    if marker.exists() or not (tree / "megatron").is_dir():
        return
    with warnings.catch_warnings():  # the tree's own SyntaxWarnings are its commit's business
        warnings.simplefilter("ignore")
        compileall.compile_dir(tree / "megatron", quiet=2, workers=1)
    with contextlib.suppress(OSError):
        marker.touch()
