"""Verdict cache: evaluations of (commit, Megatron-LM commit, suite content, environment) kept across runs.

Why SQLite: evaluating one commit costs minutes (materialise, import MB, run the suite),
so a bisection interrupted by Ctrl-C, OOM or kill -9 must resume without redoing them.
SQLite in WAL mode with ``synchronous=FULL`` and *one transaction per evaluation* gives
that for free: after a kill at any instant the database opens and holds only complete
evaluations (all their cases or none), never half of one.

Key: the MB commit sha, the Megatron-LM commit whose megatron-core ran (``core``, see
:class:`CacheKey`), :func:`suite_hash` of the suites/fixtures/adapter code (a changed golden or
suite must not reuse stale verdicts) and an environment key chosen by the caller (Python,
torch, device...). Every attempt is kept (``attempt`` 1, 2, ...) so retries and flaky verdicts
stay visible to the bisection.

Schema 2 added ``core_commit`` (the second level of a bisection walks Megatron-LM commits with
MB held at one commit, so the MB commit alone no longer names what ran). A schema 1 file is
migrated in place, in one transaction, when it is first opened: its rows get ``core_commit``
'' (the megatron-core their environment key names), which is what they meant.

One module because the key, :func:`suite_hash`, the schema with its migration and the
one-transaction-per-evaluation writes are one on-disk format: changing any of them changes
what a stored verdict means.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType

from harness.errors import CorruptFile, EnvironmentProblem
from harness.records.results import CaseResult
from harness.records.verdict import Verdict

SCHEMA_VERSION = 2
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")

_SCHEMA = """
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


_EVALUATIONS_V1_TO_V2 = """
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


@dataclass(frozen=True)
class CacheKey:
    """What makes two evaluations interchangeable.

    ``commit`` is the MB commit evaluated. ``core`` is the Megatron-LM commit whose megatron-core
    ran when the evaluation chose it explicitly (the second level of a bisection: MB held at
    ``commit``, one Megatron-LM commit after another); '' when ``env_key`` says which (the
    installed megatron-core, or the one each MB commit pins).
    """

    commit: str
    suite_hash: str
    env_key: str
    core: str = ""


@dataclass(frozen=True)
class Evaluation:
    """One stored attempt at evaluating a commit."""

    key: CacheKey
    attempt: int
    verdicts: dict[str, Verdict]
    messages: dict[str, str]
    duration_s: float
    evaluated_at: str  # ISO 8601, UTC


def suite_hash(paths: Iterable[Path | str]) -> str:
    """sha256 over (relative path, bytes) of every file under ``paths``, sorted.

    Each path contributes under its own base name, so moving a file between suites/ and
    fixtures/ changes the hash. Bytecode caches are skipped (they differ per machine).
    A missing path contributes an explicit marker, so "absent" differs from "empty".
    """
    h = hashlib.sha256()
    for root in sorted(Path(p) for p in paths):
        if not root.exists():
            _feed(h, f"<absent>/{root.name}", b"")
            continue
        for rel, file in _files(root):
            _feed(h, f"{root.name}/{rel}", file.read_bytes())
    return h.hexdigest()


def _files(root: Path) -> list[tuple[str, Path]]:
    """(posix relative path, file) under root, sorted, bytecode caches excluded."""
    if root.is_file():
        return [("", root)]
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_DIRS]
        for name in filenames:
            if not name.endswith(IGNORED_SUFFIXES):
                f = Path(dirpath) / name
                found.append((f.relative_to(root).as_posix(), f))
    return sorted(found)


def _feed(h: "hashlib._Hash", name: str, data: bytes) -> None:
    """Length-prefixed so no (name, data) pair can be confused with another split."""
    encoded = name.encode("utf-8")
    h.update(len(encoded).to_bytes(8, "big") + encoded + len(data).to_bytes(8, "big") + data)


class VerdictCache:
    """The SQLite verdict cache at ``path`` (created on first use)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._connect()

    # ------------------------------------------------------------ opening

    def _corrupt(self, why: str) -> CorruptFile:
        return CorruptFile(f"verdict cache {self.path} is unusable ({why}); run with --no-cache or delete the file")

    def _unwritable(self, exc: sqlite3.Error) -> EnvironmentProblem:
        """SQLite could not read or write the file for a reason outside it (a full disk, a read-only
        or missing directory): the cache itself is fine, so deleting it would be the wrong advice."""
        return EnvironmentProblem(
            f"cannot use the verdict cache {self.path} ({exc}): is the disk full or its directory read-only? "
            "verdicts stored so far are kept; rerun once it is writable to resume, or use --cache-dir elsewhere"
        )

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._unwritable(exc) from None
        try:
            self._prepare(db)
        except sqlite3.OperationalError as exc:  # I/O, permissions, locks: the file is not to blame
            db.close()
            raise self._unwritable(exc) from None
        except sqlite3.DatabaseError as exc:
            db.close()
            raise self._corrupt(str(exc)) from None
        except CorruptFile:
            db.close()
            raise
        return db

    def _prepare(self, db: sqlite3.Connection) -> None:
        """WAL + FULL sync, integrity check, then create or validate the schema."""
        db.execute("PRAGMA busy_timeout = 60000")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA foreign_keys = ON")
        check = db.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            raise self._corrupt(f"integrity check: {check[0] if check else 'no answer'}")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            self._create(db)
        elif "schema_version" not in tables:
            raise self._corrupt("not a harness verdict cache: no schema_version table")
        else:
            self._check_version(db)

    def _create(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'schema_version'").fetchone()[0]:
                db.execute("ROLLBACK")  # another process created it meanwhile
                self._check_version(db)
                return
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _check_version(self, db: sqlite3.Connection) -> None:
        row = db.execute("SELECT max(version) FROM schema_version").fetchone()
        version = row[0] if row else None
        if not isinstance(version, int):
            raise self._corrupt("schema_version is missing")
        if version > SCHEMA_VERSION:
            raise CorruptFile(
                f"verdict cache {self.path}: schema_version {version} is newer than this harness "
                f"understands ({SCHEMA_VERSION}); upgrade the harness, run with --no-cache or delete the file"
            )
        if version == 1:
            self._migrate_1_to_2(db)
        elif version < SCHEMA_VERSION:
            raise self._corrupt(f"schema_version {version} is too old")

    def _migrate_1_to_2(self, db: sqlite3.Connection) -> None:
        """Add ``core_commit`` to the key: the table is rebuilt (SQLite cannot change a UNIQUE
        constraint in place) in one transaction, so a kill leaves schema 1 or schema 2, never a mix.
        Foreign keys are off meanwhile (``case_verdicts`` keeps pointing at the same ids)."""
        db.execute("PRAGMA foreign_keys = OFF")
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                if db.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 1:  # not done meanwhile
                    for stmt in _EVALUATIONS_V1_TO_V2.split(";"):
                        if stmt.strip():
                            db.execute(stmt)
                    if db.execute("PRAGMA foreign_key_check").fetchall():
                        raise self._corrupt("migration to schema 2 left verdicts without their evaluation")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        finally:
            db.execute("PRAGMA foreign_keys = ON")

    # ------------------------------------------------------------ writing

    def record(
        self,
        key: CacheKey,
        verdicts: Mapping[str, Verdict],
        messages: Mapping[str, str] | None = None,
        duration_s: float = 0.0,
        evaluated_at: datetime | None = None,
        up_to: int | None = None,
    ) -> Evaluation | None:
        """Store one complete evaluation atomically; returns it with its attempt number.

        ``up_to``: store it only while the key holds fewer attempts (else None, nothing written):
        two bisects sharing a cache that evaluated the same commit at once keep one verdict, not
        two attempts that would read as a retry. Checked inside the write lock, so it is race-free.
        """
        messages = dict(messages or {})
        stamp = (evaluated_at or datetime.now(timezone.utc)).astimezone(timezone.utc).isoformat()
        rows = [(cid, v.value, messages.get(cid, "")) for cid, v in sorted(verdicts.items())]
        db = self._db
        db.execute("BEGIN IMMEDIATE")  # the write lock makes max(attempt)+1 race-free
        try:
            attempt = self._next_attempt(key)
            if up_to is not None and attempt > up_to:
                db.execute("ROLLBACK")
                return None
            cur = db.execute(
                "INSERT INTO evaluations"
                " (commit_sha, core_commit, suite_hash, env_key, attempt, duration_s, evaluated_at, n_cases)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key.commit, key.core, key.suite_hash, key.env_key, attempt, float(duration_s), stamp, len(rows)),
            )
            db.executemany(
                "INSERT INTO case_verdicts (evaluation_id, case_id, verdict, message) VALUES (?, ?, ?, ?)",
                [(cur.lastrowid, *row) for row in rows],
            )
            db.execute("COMMIT")
        except BaseException as exc:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # SQLite undoes it itself when it cannot
                    db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):  # a full disk mid-run: this evaluation is not stored
                raise self._unwritable(exc) from None
            raise
        return Evaluation(key, attempt, dict(verdicts), {c: m for c, _, m in rows}, float(duration_s), stamp)

    def record_results(self, key: CacheKey, cases: Sequence[CaseResult], duration_s: float = 0.0) -> Evaluation:
        """Convenience: store the case results of one run of the suites."""
        stored = self.record(
            key,
            {c.case_id: c.verdict for c in cases},
            {c.case_id: c.message for c in cases},
            duration_s=duration_s,
        )
        assert stored is not None  # without up_to every evaluation is stored
        return stored

    def _next_attempt(self, key: CacheKey) -> int:
        row = self._db.execute(
            "SELECT max(attempt) FROM evaluations"
            " WHERE commit_sha = ? AND core_commit = ? AND suite_hash = ? AND env_key = ?",
            (key.commit, key.core, key.suite_hash, key.env_key),
        ).fetchone()
        return (row[0] or 0) + 1

    # ------------------------------------------------------------ reading

    def attempts(self, key: CacheKey) -> list[Evaluation]:
        """Every stored attempt for ``key``, oldest first."""
        try:
            heads = self._db.execute(
                "SELECT id, attempt, duration_s, evaluated_at, n_cases FROM evaluations"
                " WHERE commit_sha = ? AND core_commit = ? AND suite_hash = ? AND env_key = ? ORDER BY attempt",
                (key.commit, key.core, key.suite_hash, key.env_key),
            ).fetchall()
            return [self._load(key, *head) for head in heads]
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(str(exc)) from None

    def latest(self, key: CacheKey) -> Evaluation | None:
        found = self.attempts(key)
        return found[-1] if found else None

    def commits(self, suite_hash: str, env_key: str, core: str = "") -> list[str]:
        """MB commits with at least one evaluation for this suite, environment and Megatron-LM commit."""
        rows = self._db.execute(
            "SELECT DISTINCT commit_sha FROM evaluations"
            " WHERE core_commit = ? AND suite_hash = ? AND env_key = ? ORDER BY commit_sha",
            (core, suite_hash, env_key),
        ).fetchall()
        return [r[0] for r in rows]

    def _load(self, key: CacheKey, eid: int, attempt: int, duration: float, stamp: str, n_cases: int) -> Evaluation:
        rows = self._db.execute(
            "SELECT case_id, verdict, message FROM case_verdicts WHERE evaluation_id = ?", (eid,)
        ).fetchall()
        if len(rows) != n_cases:
            raise self._corrupt(f"evaluation {eid} has {len(rows)} of {n_cases} cases")
        try:
            verdicts = {cid: Verdict(v) for cid, v, _ in rows}
        except ValueError as exc:
            raise self._corrupt(str(exc)) from None
        return Evaluation(key, attempt, verdicts, {cid: m for cid, _, m in rows}, duration, stamp)

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "VerdictCache":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
