"""Nightly CI across runs: the per-case history and the trend it shows (:mod:`.history`)."""
