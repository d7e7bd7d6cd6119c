"""Typed records written to disk, each with its schema version: run results and verdicts,
the machine and provenance of a run, and the atomic, versioned JSON writer they all use."""
