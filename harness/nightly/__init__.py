"""Nightly CI across runs: the per-case history and the trend it shows (:mod:`.history`), and
the automatic bisection of what newly broke (:mod:`.autobisect`)."""
