"""The SQLite verdict cache: round trips, attempts, corruption, kill -9 safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness.bisect.cache import SCHEMA_VERSION, CacheKey, VerdictCache
from harness.bisect.closure import suite_hash
from harness.errors import CorruptFile
from harness.executors.outcome import results_of
from harness.records.results import CaseResult
from harness.records.verdict import Verdict

ROOT = Path(__file__).resolve().parents[1]
KEY = CacheKey("a" * 40, "suitehash", "py3.12-cpu")


def test_round_trip_and_attempts(tmp_path: Path) -> None:
    db = tmp_path / "cache.sqlite"
    with VerdictCache(db) as cache:
        assert cache.latest(KEY) is None
        when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        first = cache.record(
            KEY, results_of({"s::a": Verdict.ERROR, "s::b": Verdict.PASS}, {"s::a": "boom"}), 12.5, when
        )
        second = cache.record(KEY, results_of({"s::a": Verdict.FAIL, "s::b": Verdict.PASS}, {"s::a": "diff at 3"}), 3.0)
        assert (first.attempt, second.attempt) == (1, 2)
    with VerdictCache(db) as cache:  # survives reopening
        got = cache.attempts(KEY)
        assert [e.attempt for e in got] == [1, 2]
        assert got[0].verdicts == {"s::a": Verdict.ERROR, "s::b": Verdict.PASS}
        assert got[0].messages == {"s::a": "boom", "s::b": ""}
        assert got[0].duration_s == 12.5
        assert got[0].evaluated_at == "2025-01-02T03:04:05+00:00"
        assert cache.latest(KEY) == got[1]
        assert cache.commits("suitehash", "py3.12-cpu") == [KEY.commit]


def test_key_parts_are_independent(tmp_path: Path) -> None:
    with VerdictCache(tmp_path / "c.sqlite") as cache:
        cache.record(KEY, results_of({"x": Verdict.PASS}))
        for other in (
            CacheKey("b" * 40, KEY.suite_hash, KEY.env_key),
            CacheKey(KEY.commit, "changed-suite", KEY.env_key),
            CacheKey(KEY.commit, KEY.suite_hash, "py3.12-cuda"),
            CacheKey(KEY.commit, KEY.suite_hash, KEY.env_key, core="c" * 40),  # MB held, one Megatron-LM commit
        ):
            assert cache.latest(other) is None
            assert cache.record(other, results_of({"x": Verdict.FAIL})).attempt == 1


def test_the_cache_keeps_the_suite_process_s_records_whole(tmp_path: Path) -> None:
    """Issue 46: what the suite process wrote comes back from the cache unchanged (the bisect
    document shows the diff, violations and impacts of a cached commit as they were)."""
    broken = {"invariant": "logical-boundaries", "impact": "trains-padding", "row": 0, "position": 5}
    cases = [
        CaseResult("pack::one", "pack", Verdict.PASS, 0.5),
        CaseResult("pack::two", "pack", Verdict.UNTESTABLE, message="no such op in this era"),
        CaseResult(
            "pack::three", "pack", Verdict.FAIL, 2.0, "1 violation", violations=[broken], impacts=["trains-padding"]
        ),
    ]
    with VerdictCache(tmp_path / "c.sqlite") as cache:
        ev = cache.record(KEY, {c.case_id: c for c in cases}, duration_s=4.0)
        assert ev is not None and cache.latest(KEY) == ev
        assert ev.messages["pack::two"] == "no such op in this era"
    with VerdictCache(tmp_path / "c.sqlite") as cache:
        back = cache.latest(KEY)
        assert back is not None and list(back.cases.values()) == sorted(cases, key=lambda c: c.case_id)


def test_wal_mode_and_schema_version(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    VerdictCache(db).close()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    con.close()


SCHEMA_1 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, commit_sha TEXT NOT NULL, suite_hash TEXT NOT NULL,
    env_key TEXT NOT NULL, attempt INTEGER NOT NULL, duration_s REAL NOT NULL, evaluated_at TEXT NOT NULL,
    n_cases INTEGER NOT NULL, UNIQUE (commit_sha, suite_hash, env_key, attempt)
);
CREATE TABLE case_verdicts (
    evaluation_id INTEGER NOT NULL REFERENCES evaluations(id) ON DELETE CASCADE, case_id TEXT NOT NULL,
    verdict TEXT NOT NULL, message TEXT NOT NULL, PRIMARY KEY (evaluation_id, case_id)
);
INSERT INTO schema_version VALUES (1);
INSERT INTO evaluations VALUES (1, 'aaaa', 'suitehash', 'py3.12-cpu', 1, 2.5, '2025-01-01T00:00:00+00:00', 2);
INSERT INTO evaluations VALUES (2, 'aaaa', 'suitehash', 'py3.12-cpu', 2, 3.5, '2025-01-02T00:00:00+00:00', 1);
INSERT INTO case_verdicts VALUES (1, 's::a', 'fail', 'boom'), (1, 's::b', 'pass', ''), (2, 's::a', 'pass', '');
"""


def test_schema_1_file_is_migrated_in_place_and_keeps_every_evaluation(tmp_path: Path) -> None:
    """A cache written before the Megatron-LM commit joined the key: its rows keep their meaning
    (core '' = the megatron-core the environment key names), nothing is lost, new keys work."""
    db = tmp_path / "c.sqlite"
    con = sqlite3.connect(db)
    con.executescript(SCHEMA_1)
    con.close()
    old = CacheKey("aaaa", "suitehash", "py3.12-cpu")
    held = CacheKey("aaaa", "suitehash", "py3.12-cpu", core="b" * 40)
    with VerdictCache(db) as cache:
        got = cache.attempts(old)
        assert [(e.attempt, e.verdicts, e.duration_s) for e in got] == [
            (1, {"s::a": Verdict.FAIL, "s::b": Verdict.PASS}, 2.5),
            (2, {"s::a": Verdict.PASS}, 3.5),
        ]
        assert got[0].messages["s::a"] == "boom"
        assert cache.attempts(held) == []
        assert cache.record(held, results_of({"s::a": Verdict.FAIL})).attempt == 1, (
            "same MB commit, other core: its own key"
        )
        assert cache.record(old, results_of({"s::a": Verdict.PASS})).attempt == 3
    with VerdictCache(db) as cache:  # reopening a migrated file changes nothing
        assert len(cache.attempts(old)) == 3 and len(cache.attempts(held)) == 1
    con = sqlite3.connect(db)
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)] == [(4,)]
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    con.execute("PRAGMA foreign_keys = ON")
    con.execute("DELETE FROM evaluations WHERE id = 1")
    assert con.execute("SELECT count(*) FROM case_verdicts WHERE evaluation_id = 1").fetchone()[0] == 0, (
        "verdicts still cascade with their evaluation after the table was rebuilt"
    )
    con.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    VerdictCache(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    con.commit()
    con.close()
    with pytest.raises(CorruptFile, match="newer than this harness") as info:
        VerdictCache(db)
    assert str(db) in info.value.one_line()


@pytest.mark.parametrize(
    "content",
    [b"this is not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["text", "bad-header"],
)
def test_corrupt_file_is_one_line_with_advice(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "c.sqlite"
    db.write_bytes(content)
    with pytest.raises(CorruptFile) as info:
        VerdictCache(db)
    line = info.value.one_line()
    assert "\n" not in line
    assert str(db) in line and "--no-cache" in line and "delete" in line


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE other (x)")
    con.commit()
    con.close()
    with pytest.raises(CorruptFile, match="not a harness verdict cache"):
        VerdictCache(db)


def test_unknown_verdict_value_is_corrupt(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    with VerdictCache(db) as cache:
        cache.record(KEY, results_of({"x": Verdict.PASS}))
    con = sqlite3.connect(db)
    con.execute("UPDATE case_verdicts SET verdict = 'maybe'")
    con.commit()
    con.close()
    with VerdictCache(db) as cache, pytest.raises(CorruptFile, match="maybe"):
        cache.attempts(KEY)


# ------------------------------------------------------------------ kill -9

WRITER = textwrap.dedent(
    """
    import sys
    from harness.bisect.cache import CacheKey, VerdictCache
    from harness.executors.outcome import results_of
    from harness.records.verdict import Verdict

    cache = VerdictCache(sys.argv[1])
    n_cases, start = int(sys.argv[2]), int(sys.argv[3])
    i = start
    while True:
        verdicts = {f"case{j}": Verdict.PASS if (i + j) % 3 else Verdict.FAIL for j in range(n_cases)}
        cache.record(CacheKey(f"{i:040x}", "s", "e"), results_of(verdicts, {c: "m" * 300 for c in verdicts}), float(i))
        i += 1
        if i == start + 3:
            print("ready", flush=True)
    """
)


def kill_writer_midway(db: Path, n_cases: int, start: int, delay: float) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(n_cases), str(start)], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_kill_9_leaves_only_complete_evaluations(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    n_cases = 400
    for round_, delay in enumerate((0.0, 0.05, 0.13, 0.31)):
        kill_writer_midway(db, n_cases, start=round_ * 100_000, delay=delay)
    with VerdictCache(db) as cache:
        commits = cache.commits("s", "e")
        assert len(commits) >= 4 * 3
        for sha in commits:
            (ev,) = cache.attempts(CacheKey(sha, "s", "e"))
            i = int(sha, 16)
            assert len(ev.verdicts) == n_cases
            assert ev.verdicts == {f"case{j}": Verdict.PASS if (i + j) % 3 else Verdict.FAIL for j in range(n_cases)}
            assert ev.duration_s == float(i)
    con = sqlite3.connect(db)
    orphans = con.execute(
        "SELECT count(*) FROM case_verdicts WHERE evaluation_id NOT IN (SELECT id FROM evaluations)"
    ).fetchone()[0]
    assert orphans == 0
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


# ------------------------------------------------------------------ suite_hash


def make_tree(root: Path) -> list[Path]:
    suites, fixtures = root / "suites", root / "fixtures"
    (suites / "pack").mkdir(parents=True)
    fixtures.mkdir()
    (suites / "pack" / "case.py").write_text("def test(): ...\n")
    (fixtures / "data.bin").write_bytes(b"\x00\x01\x02")
    return [suites, fixtures]


def test_suite_hash_is_stable_and_content_sensitive(tmp_path: Path) -> None:
    paths = make_tree(tmp_path / "one")
    copy = make_tree(tmp_path / "two")
    h = suite_hash(paths)
    assert h == suite_hash(copy), "depends on content and relative paths, not location"
    assert h == suite_hash(list(reversed(paths))), "order of the list does not matter"
    cache_dir = paths[0] / "pack" / "__pycache__"
    cache_dir.mkdir()
    (cache_dir / "case.cpython-312.pyc").write_bytes(b"junk")
    assert suite_hash(paths) == h, "bytecode caches are ignored"
    (paths[1] / "data.bin").write_bytes(b"\x00\x01\x03")
    assert suite_hash(paths) != h
    (paths[1] / "data.bin").write_bytes(b"\x00\x01\x02")
    (paths[1] / "data.bin").rename(paths[1] / "renamed.bin")
    assert suite_hash(paths) != h, "renames change the hash"


def test_suite_hash_absent_differs_from_empty(tmp_path: Path) -> None:
    empty = tmp_path / "fixtures"
    absent_hash = suite_hash([empty])
    empty.mkdir()
    assert suite_hash([empty]) != absent_hash


def test_schema_2_file_gains_scopes_in_place_and_its_rows_read_as_whole_runs(tmp_path: Path) -> None:
    """Issue 26: per-case verdicts need to know what each evaluation ran. A schema 2 cache is
    migrated in place; its rows read as runs of the default selection (what they were under
    that key) and a case probe stored after is told apart."""
    from harness.bisect.scope import Scope

    db = tmp_path / "verdicts.sqlite"
    with VerdictCache(db) as cache:
        cache.record(KEY, results_of({"s::a": Verdict.PASS, "s::b": Verdict.FAIL}))
    con = sqlite3.connect(db)  # make it a schema 2 file: no scope column
    con.executescript(
        "PRAGMA foreign_keys = OFF; CREATE TABLE e2 (id INTEGER PRIMARY KEY AUTOINCREMENT, commit_sha TEXT NOT NULL,"
        " core_commit TEXT NOT NULL DEFAULT '', suite_hash TEXT NOT NULL, env_key TEXT NOT NULL,"
        " attempt INTEGER NOT NULL, duration_s REAL NOT NULL, evaluated_at TEXT NOT NULL, n_cases INTEGER NOT NULL,"
        " UNIQUE (commit_sha, core_commit, suite_hash, env_key, attempt));"
        " INSERT INTO e2 SELECT id, commit_sha, core_commit, suite_hash, env_key, attempt, duration_s,"
        " evaluated_at, n_cases FROM evaluations; DROP TABLE evaluations; ALTER TABLE e2 RENAME TO evaluations;"
        " ALTER TABLE case_verdicts DROP COLUMN result; UPDATE schema_version SET version = 2;"
    )
    con.close()
    with VerdictCache(db) as cache:
        (old,) = cache.attempts(KEY)
        assert old.scope == Scope() and not old.scope.partial and old.verdicts["s::b"] is Verdict.FAIL
        probe = Scope(cases=("s::b",))
        assert cache.record(KEY, results_of({"s::b": Verdict.FAIL}), scope=probe, up_to=1) is None, "s::b is held once"
        stored = cache.record(KEY, results_of({"s::b": Verdict.PASS}), scope=probe, up_to=2)
        assert stored is not None and stored.attempt == 2 and stored.scope == probe
    with VerdictCache(db) as cache:
        assert [e.scope.partial for e in cache.attempts(KEY)] == [False, True]
    assert sqlite3.connect(db).execute("SELECT version FROM schema_version").fetchall() == [(4,)]
