"""The verdict cache's on-disk schema and its in-place migrations.

Why apart from :mod:`.cache`: the SQL is the file format (read by any harness version that
opens the cache); the cache module is how this version reads and writes it. A migration is
one transaction: a kill leaves the old schema or the new one, never a mix.
"""

from __future__ import annotations

SCHEMA_VERSION = 3  # 2: core_commit in the key; 3: scope (what each evaluation ran)

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
