"""What a fork server imports before it forks (:mod:`harness.suiterun.forkserver`): torch and
megatron-core for every server, and for a full-import server MB's third-party dependencies too.

Never MB itself: each child imports its own commit's MB. Kept apart from the server loop so the
list and its rollback rule can be read (and tested) on their own.
"""

from __future__ import annotations

import os
import sys

PRELOAD = (
    "torch",
    "megatron.core",
    "megatron.core.packed_seq_params",
    "numpy",
    # MB's tokenizer builder and the oracle's offline tokenizer need them in both groups (2 s a run)
    "tokenizers",
    "transformers",
    "pytest",
    "harness.suite.plugin",
    "harness.suite.compare",
)
# A full-import server (the cases that import MB's whole package) also holds what that import
# pulls in besides MB: MB's third-party dependencies and megatron-core's model, optimizer and
# checkpointing packages. Measured on 0.6.2 with torch and megatron-core already imported:
# ``import megatron.bridge`` 6.5 s, 2.1 s with these preloaded. A name an era does not have is
# skipped (rolled back, as any failing preload); none of them is MB.
PRELOAD_FULL = (
    "datasets",
    "modelopt.torch",
    "omegaconf",
    "pandas",
    "pyarrow",
    "scipy",
    "safetensors",
    "huggingface_hub",
    "tokenizers",
    "sentencepiece",
    "pydantic",
    "PIL",
    "torchvision",
    "megatron.core.models",
    "megatron.core.models.gpt",
    "megatron.core.transformer",
    "megatron.core.optimizer",
    "megatron.core.dist_checkpointing",
    "megatron.core.inference",
    "megatron.core.datasets",
    "megatron.core.ssm",
    "megatron.core.post_training",
    "megatron.core.tokenizers",
    "megatron.core.fusions",
    "megatron.core.extensions",
    "megatron.core.resharding",
)


def preload() -> None:
    """Import what every run needs. A module that fails to import here is rolled back out of
    ``sys.modules``: each child then imports it itself and fails exactly as a fresh process
    would (a pinned tree whose megatron-core is broken is the commit's failure, not ours).

    Only the failing module's own top-level package is rolled back (``megatron.*``): the
    third-party modules it pulled in imported fine and some cannot be imported twice in one
    process (torch registers operator libraries at import: a second import raises). A module the
    era simply does not have (an older megatron-core without ``megatron.core.resharding``) is
    no failure: nothing else is undone.
    """
    from harness.contract import Env

    full = os.environ.get(Env.IMPORT_MODE) == "full"
    for name in PRELOAD + (PRELOAD_FULL if full else ()):
        before = set(sys.modules)
        try:
            __import__(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a dependency is missing, not the name itself: as any failure
                _roll_back(name, before)
            # else: this era has no such module; nothing of it was loaded, nothing to undo
        except Exception:
            _roll_back(name, before)


def _roll_back(name: str, before: set[str]) -> None:
    """Drop what the failed import of ``name`` added under its top-level package."""
    top = name.split(".", 1)[0]
    for added in set(sys.modules) - before:
        if added == top or added.startswith(top + "."):
            del sys.modules[added]
