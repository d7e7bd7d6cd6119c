"""Typed records written to disk, each with its schema version: what crosses the process seam.

Run results and verdicts, the oracle's violations and impacts, known MB bugs, the knobs log, the
machine and provenance of a run, and the atomic, versioned JSON writer they all use. Both the
suite process and the driver read them; they import nothing of either."""
