"""The ``upstream`` suite: Megatron-Bridge's own packing tests, replayed from the target's tree.

See :mod:`harness.upstream.runner`; the selection (per era) is data in ``selection.json``.
"""

from harness.upstream.runner import NO_CHECKOUT, NO_MATCH, load_selection, resolve, run_upstream

__all__ = ["run_upstream", "load_selection", "resolve", "NO_CHECKOUT", "NO_MATCH"]
