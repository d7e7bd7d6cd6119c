"""The ``upstream`` suite: Megatron-Bridge's own packing tests, replayed from the target's tree.

``selection`` (which tests, per era; the data is ``selection.json``), ``run`` (MB's pytest in a
subprocess), ``child_plugin`` (loaded into that pytest: selection and outcome events),
``outcomes`` (events -> verdicts).
"""

from harness.suiterun.upstream.run import NO_CHECKOUT, run_upstream
from harness.suiterun.upstream.selection import NO_MATCH, load_selection, resolve

__all__ = ["NO_CHECKOUT", "NO_MATCH", "load_selection", "resolve", "run_upstream"]
