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
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from harness.bisect.cacheschema import (
    CASES_V3_TO_V4,
    EVALUATIONS_V2_TO_V3,
    SCHEMA,
    SCHEMA_VERSION,
    migrate,
    migrate_1_to_2,
)
from harness.bisect.scope import Scope, suite_of
from harness.errors import CorruptFile, EnvironmentProblem
from harness.records.results import CaseResult, HoldsCases
from harness.records.verdict import Verdict

WHOLE = Scope()  # an evaluation of the whole default selection


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
class Evaluation(HoldsCases):
    """One stored attempt at evaluating a commit: the suite process's records of its cases."""

    key: CacheKey
    attempt: int
    cases: dict[str, CaseResult]
    duration_s: float
    evaluated_at: str  # ISO 8601, UTC
    scope: Scope = WHOLE  # what it ran: the whole selection, or listed (open) cases

    def ran(self, case: str) -> bool:
        """Whether it ran ``case``: a run of the default selection ran every case (missing is a
        skip there), a run of listed suites the cases of those suites (an endpoint cut into
        parts, :mod:`harness.bisect.split`), a probe the cases it was asked for, produced a
        verdict or not."""
        scope = self.scope
        if case in self.verdicts:
            return True
        if scope.cases is not None:
            return case in scope.cases
        return scope.suites is None or suite_of(case) in scope.suites


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
            for stmt in SCHEMA.split(";"):
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
            migrate_1_to_2(db, self._corrupt)
            version = 2
        if version == 2:
            migrate(db, 2, EVALUATIONS_V2_TO_V3)
            version = 3
        if version == 3:
            migrate(db, 3, CASES_V3_TO_V4)
        elif version < SCHEMA_VERSION:
            raise self._corrupt(f"schema_version {version} is too old")

    # ------------------------------------------------------------ writing

    def record(
        self,
        key: CacheKey,
        cases: Mapping[str, CaseResult],
        duration_s: float = 0.0,
        evaluated_at: datetime | None = None,
        up_to: int | None = None,
        scope: Scope = WHOLE,
    ) -> Evaluation | None:
        """Store one complete evaluation (the case records, as the suite process wrote them)
        atomically; returns it with its attempt number (the sequence number of evaluations under
        ``key``).

        ``up_to``: store it only while fewer than ``up_to`` evaluations of the same selection
        (a case probe: verdicts of each of its cases) are held (else None, nothing written):
        two bisects sharing a cache that evaluated the same commit at once keep one verdict, not
        two attempts that would read as a retry. Checked inside the write lock, so it is race-free.
        """
        stamp = (evaluated_at or datetime.now(UTC)).astimezone(UTC).isoformat()
        rows = [
            (c, r.verdict.value, r.message, json.dumps(r.to_json(), sort_keys=True)) for c, r in sorted(cases.items())
        ]
        db = self._db
        db.execute("BEGIN IMMEDIATE")  # the write lock makes max(attempt)+1 race-free
        try:
            attempt = self._next_attempt(key)
            if up_to is not None and self._held(key, scope, list(cases)) >= up_to:
                db.execute("ROLLBACK")
                return None
            cur = db.execute(
                "INSERT INTO evaluations (commit_sha, core_commit, suite_hash, env_key, attempt, duration_s,"
                " evaluated_at, n_cases, scope) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key.commit,
                    key.core,
                    key.suite_hash,
                    key.env_key,
                    attempt,
                    float(duration_s),
                    stamp,
                    len(rows),
                    scope.to_json(),
                ),
            )
            db.executemany(
                "INSERT INTO case_verdicts (evaluation_id, case_id, verdict, message, result) VALUES (?, ?, ?, ?, ?)",
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
        return Evaluation(key, attempt, dict(cases), float(duration_s), stamp, scope)

    def _held(self, key: CacheKey, scope: Scope, cases: list[str]) -> int:
        """How many times ``key`` already holds what this evaluation would add: evaluations of the
        same selection, or (a case probe) the fewest verdicts any of its cases has."""
        where = "commit_sha = ? AND core_commit = ? AND suite_hash = ? AND env_key = ?"
        args = (key.commit, key.core, key.suite_hash, key.env_key)
        if not scope.partial:
            row = self._db.execute(
                f"SELECT count(*) FROM evaluations WHERE {where} AND scope = ?", (*args, scope.to_json())
            )
            return int(row.fetchone()[0])
        counts = dict(
            self._db.execute(
                "SELECT v.case_id, count(*) FROM case_verdicts v JOIN evaluations e ON e.id = v.evaluation_id"
                f" WHERE {where.replace('commit_sha', 'e.commit_sha')} GROUP BY v.case_id",
                args,
            ).fetchall()
        )
        return min((int(counts.get(c, 0)) for c in cases), default=0)

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
                "SELECT id, attempt, duration_s, evaluated_at, n_cases, scope FROM evaluations"
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

    def _load(
        self, key: CacheKey, eid: int, attempt: int, duration: float, stamp: str, n_cases: int, scope: str
    ) -> Evaluation:
        rows = self._db.execute(
            "SELECT case_id, verdict, message, result FROM case_verdicts WHERE evaluation_id = ?", (eid,)
        ).fetchall()
        if len(rows) != n_cases:
            raise self._corrupt(f"evaluation {eid} has {len(rows)} of {n_cases} cases")
        try:
            cases = {
                cid: CaseResult.from_json(json.loads(doc)) if doc else CaseResult.bare(cid, Verdict(v), m)
                for cid, v, m, doc in rows
            }
        except (ValueError, TypeError, KeyError) as exc:
            raise self._corrupt(str(exc)) from None
        if torn := [f"{cid}: {v!r}" for cid, v, _m, _doc in rows if cases[cid].verdict.value != v]:
            raise self._corrupt(f"evaluation {eid}: verdicts that disagree with their records ({', '.join(torn)})")
        try:
            what = Scope.from_json(scope)
        except (ValueError, TypeError, AttributeError) as exc:
            raise self._corrupt(f"evaluation {eid}: scope {scope!r}: {exc}") from None
        return Evaluation(key, attempt, cases, duration, stamp, what)

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> VerdictCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
