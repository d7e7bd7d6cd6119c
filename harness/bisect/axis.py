"""Which history a bisection walks: MB's own, or Megatron-LM's with MB held at one tree.

The algorithm, the driver, the executor and the verdict cache do not care what a "commit" is:
a sha on a linear list. Two things do, and they live here:

* the cache key (:meth:`Axis.key`): on MB's axis a commit is an MB commit (the megatron-core is
  the installed one, or the one each MB commit pins: the environment key says which); on
  Megatron-LM's axis the MB commit is the one held fixed and the commit walked is the
  Megatron-LM commit whose megatron-core runs under it, so the key is (MB commit, Megatron-LM
  commit, suites, environment);
* which files a culprit's diff is limited to (:attr:`Axis.pathspecs`), see below.

Megatron-LM paths packing goes through (:data:`MCORE_PACKING_PATHSPECS`): the ``PackedSeqParams``
record MB builds, THD attention and its Transformer Engine wrapper, RoPE on packed sequences,
the GPT forward that carries ``packed_seq_params``, batch slicing for context parallelism
(``get_batch_on_this_cp_rank`` in ``megatron/core/utils.py``, earlier ``megatron/training/utils.py``),
the parallel state whose group sizes set padding multiples, and the dataset helpers MB's
packing preparation calls. Why a fixed list rather than the modules the blamed cases import:
``import megatron.core`` alone loads 187 of its ~500 modules (measured, megatron-core 0.19.2),
so an import-based list would keep almost every diff whole. The culprit's full file list is
always shown, and when it touches none of these paths the whole ``megatron/`` diff is shown
and says so (as for MB, where the fallback is ``src/``).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.bisect.cache import CacheKey
from harness.bisect.document import HeldMB

# Paths whose changes can affect packing behaviour (the culprit's diff is limited to these; the
# full file list is still shown). Patterns are git pathspecs relative to the repository root.
PACKING_PATHSPECS: tuple[str, ...] = (
    "src/megatron/bridge/data/packing",
    "src/megatron/bridge/data/datasets/packed_sequence.py",
    "src/megatron/bridge/data/datasets/packing_utils.py",
    "src/megatron/bridge/data/datasets/packed_parquet.py",
    "src/megatron/bridge/data/datasets/sft.py",
    "src/megatron/bridge/data/datasets/utils.py",
    "src/megatron/bridge/data/sequence_batching.py",
    "src/megatron/bridge/training/utils/packed_seq_utils.py",
    "src/megatron/bridge/training/gpt_step.py",
    "src/megatron/bridge/training/vlm_step.py",
    "src/megatron/bridge/training/config.py",
    "src/megatron/bridge/data/builders",
)

# The same for a Megatron-LM culprit (see the module docstring for the choice).
MCORE_PACKING_PATHSPECS: tuple[str, ...] = (
    "megatron/core/packed_seq_params.py",
    "megatron/core/utils.py",
    "megatron/core/transformer/attention.py",
    "megatron/core/transformer/dot_product_attention.py",
    "megatron/core/extensions/transformer_engine.py",
    "megatron/core/models/common/embeddings",
    "megatron/core/models/gpt/gpt_model.py",
    "megatron/core/parallel_state.py",
    "megatron/core/datasets",
    "megatron/training/utils.py",
)


@dataclass(frozen=True)
class Axis:
    """MB's history (``held`` None) or Megatron-LM's with MB held at ``held``."""

    held: HeldMB | None = None

    def key(self, sha: str, suite_key: str, env_key: str) -> CacheKey:
        """The cache key of evaluating ``sha`` of this axis."""
        if self.held is None:
            return CacheKey(sha, suite_key, env_key)
        return CacheKey(self.held.sha, suite_key, env_key, core=sha)

    @property
    def files_under(self) -> str:
        """Where a culprit's changed files are listed from (and the diff's fallback scope)."""
        return "megatron" if self.held else "src"

    @property
    def pathspecs(self) -> tuple[str, ...]:
        return MCORE_PACKING_PATHSPECS if self.held else PACKING_PATHSPECS
