"""Which packing knobs MB exposes at a commit, and which values the cases really exercise.

:mod:`~harness.suite.knobs.inventory` reads the knobs from MB's source (never hand-listed),
:mod:`~harness.suite.knobs.spy` records in the suite process what MB's classes and functions were
called with, :mod:`~harness.records.knobs` is the log both write and read, and
:mod:`~harness.report.knobtable` turns it into the coverage table of ``harness coverage``.
"""
