"""Nightly CI across runs: the per-case history and the trend it shows (:mod:`.history`), the
automatic bisection of what newly broke, one case per defect (:mod:`.autobisect`), and each
defect's other cases checked at the culprit found (:mod:`.refine`)."""
