"""The verdict cache's on-disk schema and its in-place migrations.

Why apart from :mod:`.cache`: the SQL is the file format (read by any harness version that
opens the cache); the cache module is how this version reads and writes it. A migration is
one transaction: a kill leaves the old schema or the new one, never a mix.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

SCHEMA_VERSION = 4  # 2: core_commit in the key; 3: scope (what each evaluation ran); 4: the case records

SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    commit_sha TEXT NOT NULL,
    core_commit TEXT NOT NULL DEFAULT '',
    suite_hash TEXT NOT NULL,
    env_key TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    duration_s REAL NOT NULL,
    evaluated_at TEXT NOT NULL,
    n_cases INTEGER NOT NULL,
    scope TEXT NOT NULL DEFAULT '',
    UNIQUE (commit_sha, core_commit, suite_hash, env_key, attempt)
);
CREATE TABLE case_verdicts (
    evaluation_id INTEGER NOT NULL REFERENCES evaluations(id) ON DELETE CASCADE,
    case_id TEXT NOT NULL,
    verdict TEXT NOT NULL,
    message TEXT NOT NULL,
    result TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (evaluation_id, case_id)
);
"""


EVALUATIONS_V1_TO_V2 = """
CREATE TABLE evaluations_v2 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    commit_sha TEXT NOT NULL,
    core_commit TEXT NOT NULL DEFAULT '',
    suite_hash TEXT NOT NULL,
    env_key TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    duration_s REAL NOT NULL,
    evaluated_at TEXT NOT NULL,
    n_cases INTEGER NOT NULL,
    UNIQUE (commit_sha, core_commit, suite_hash, env_key, attempt)
);
INSERT INTO evaluations_v2
    (id, commit_sha, core_commit, suite_hash, env_key, attempt, duration_s, evaluated_at, n_cases)
    SELECT id, commit_sha, '', suite_hash, env_key, attempt, duration_s, evaluated_at, n_cases FROM evaluations;
DROP TABLE evaluations;
ALTER TABLE evaluations_v2 RENAME TO evaluations;
UPDATE schema_version SET version = 2;
"""

# Schema 3 records what each evaluation ran (harness.bisect.scope): rows stored before read as
# runs of the default selection, which is what the rows reachable under the default selection's
# key were (other selections' keys are no longer asked for; their rows stay, unused).
EVALUATIONS_V2_TO_V3 = """
ALTER TABLE evaluations ADD COLUMN scope TEXT NOT NULL DEFAULT '';
UPDATE schema_version SET version = 3;
"""

# Schema 4 keeps each case's whole record (harness.records.results.CaseResult, JSON), the one the
# suite process wrote: the bisect document shows it as it was. Rows stored before hold a verdict and
# a message only, read back as a bare record.
CASES_V3_TO_V4 = """
ALTER TABLE case_verdicts ADD COLUMN result TEXT NOT NULL DEFAULT '';
UPDATE schema_version SET version = 4;
"""


def migrate_1_to_2(db: sqlite3.Connection, corrupt: Callable[[str], Exception]) -> None:
    """Add ``core_commit`` to the key: the table is rebuilt (SQLite cannot change a UNIQUE
    constraint in place) in one transaction, so a kill leaves schema 1 or schema 2, never a mix.
    Foreign keys are off meanwhile (``case_verdicts`` keeps pointing at the same ids)."""
    db.execute("PRAGMA foreign_keys = OFF")
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 1:  # not done meanwhile
                for stmt in EVALUATIONS_V1_TO_V2.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                if db.execute("PRAGMA foreign_key_check").fetchall():
                    raise corrupt("migration to schema 2 left verdicts without their evaluation")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    finally:
        db.execute("PRAGMA foreign_keys = ON")


def migrate(db: sqlite3.Connection, version: int, script: str) -> None:
    """One in-place step from ``version``, in one transaction (a kill leaves one schema or the next)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("SELECT max(version) FROM schema_version").fetchone()[0] == version:  # not done meanwhile
            for stmt in script.split(";"):
                if stmt.strip():
                    db.execute(stmt)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
