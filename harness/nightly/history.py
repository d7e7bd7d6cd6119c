"""Nightly history: every run's verdicts in one parquet file, and the trend computed from it.

Why parquet through pandas: the store grows by (cases x nights) rows and is read whole to
draw a trend, which a columnar file does in milliseconds; it is also what people load in a
notebook when they want to ask their own question.

Why the whole file is rewritten on append: parquet cannot be appended in place, and writing
a new file next to the old one then renaming it means a killed nightly leaves the previous
history intact. An advisory lock serialises two appenders so neither loses the other's run.
The schema version lives in the parquet key-value metadata; a newer version than this code
knows is refused rather than half-understood. Schema 2 added each night's ``report`` (the
address of its report page, which the trend page links) and ``repo_url`` (the web repository
its commit links to); a schema 1 store is read with both empty and rewritten as 2 on append.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import CorruptFile
from harness.records.atomicio import atomic_write_bytes
from harness.records.results import RunResult
from harness.records.trend import Trend, TrendCase, TrendChange, TrendRun
from harness.records.verdict import Verdict

HISTORY_KIND = "harness-history"
HISTORY_SCHEMA = 2
#: Columns each older schema lacks, read as empty.
_ADDED_IN = {2: ("report", "repo_url")}
_META_KIND = b"harness.kind"
_META_VERSION = b"harness.schema_version"

#: Columns of the store, one row per case per run, in this order.
COLUMNS: dict[str, str] = {
    "run_seq": "int64",  # append order: breaks ties and orders runs without a start time
    "run_id": "string",
    "started": "string",  # ISO-8601 as recorded by the run
    "commit": "string",
    "run_duration_s": "float64",
    "case_id": "string",
    "suite": "string",
    "verdict": "string",
    "duration_s": "float64",
    "source": "string",
    "message": "string",
    "report": "string",  # address of the night's report page (relative to the trend page, or a URL)
    "repo_url": "string",  # web repository of the MB tested (commit links; "" = none)
}
#: Messages are kept for the trend page's tooltips, not as an archive of logs.
MAX_MESSAGE_CHARS = 500


def _empty() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in COLUMNS.items()})


def _run_frame(run: RunResult, commit: str, seq: int, report: str = "") -> pd.DataFrame:
    """The rows one run contributes; a run without cases still gets no rows (nothing to trend)."""
    rows = [
        {
            "run_seq": seq,
            "run_id": run.run_id,
            "started": run.started or "",
            "commit": commit,
            "run_duration_s": float(run.duration_s),
            "case_id": c.case_id,
            "suite": c.suite,
            "verdict": c.verdict.value,
            "duration_s": float(c.duration_s),
            "source": c.source,
            "message": (c.message or "")[:MAX_MESSAGE_CHARS],
            "report": report,
            "repo_url": run.provenance.mb_repo_url,
        }
        for c in run.documented  # the hypothetical tier never fails a nightly, so it is not trended
    ]
    frame = pd.DataFrame(rows, columns=list(COLUMNS)) if rows else _empty()
    return frame.astype(COLUMNS)


@contextlib.contextmanager
def _locked(store: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock next to the store for a read-modify-write cycle."""
    store.parent.mkdir(parents=True, exist_ok=True)
    lock_path = store.with_name(f".{store.name}.lock")
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _check_metadata(store: Path, metadata: dict[bytes, bytes] | None) -> int:
    """The schema version of a file of ours; refuse one that is not ours or written by a newer harness."""
    metadata = metadata or {}
    if metadata.get(_META_KIND) != HISTORY_KIND.encode():
        raise CorruptFile(f"{store}: not a {HISTORY_KIND} file (no harness metadata)")
    raw = metadata.get(_META_VERSION, b"")
    try:
        version = int(raw)
    except ValueError:
        raise CorruptFile(f"{store}: bad schema_version {raw!r}") from None
    if version > HISTORY_SCHEMA:
        raise CorruptFile(
            f"{store}: schema_version {version} is newer than this harness understands "
            f"({HISTORY_SCHEMA}); upgrade the harness"
        )
    if version < 1:
        raise CorruptFile(f"{store}: schema_version {version} is too old and cannot be migrated")
    return version


def load(store: Path) -> pd.DataFrame:
    """The whole history (empty frame with the right columns when the store does not exist)."""
    store = Path(store)
    if not store.exists():
        return _empty()
    try:
        table = pq.read_table(store)
    except (pa.ArrowException, OSError) as exc:
        raise CorruptFile(f"{store}: unreadable history file ({exc})") from None
    version = _check_metadata(store, table.schema.metadata)
    added = [c for v, cols in _ADDED_IN.items() if v > version for c in cols]
    missing = [c for c in COLUMNS if c not in table.column_names and c not in added]
    if missing:
        raise CorruptFile(f"{store}: history file lacks columns {missing}")
    df = table.to_pandas()
    for column in added:
        if column not in df.columns:
            df[column] = ""
    return df.loc[:, list(COLUMNS)].astype(COLUMNS)


def _write(store: Path, df: pd.DataFrame) -> None:
    """Serialise with our metadata into memory, then replace the store atomically."""
    table = pa.Table.from_pandas(df.loc[:, list(COLUMNS)].astype(COLUMNS), preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[_META_KIND] = HISTORY_KIND.encode()
    meta[_META_VERSION] = str(HISTORY_SCHEMA).encode()
    table = table.replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    atomic_write_bytes(store, buf.getvalue())


def append_run(store: Path, run: RunResult, commit: str, report: str = "") -> pd.DataFrame:
    """Add ``run`` (tested at ``commit``, its report page at ``report``) to the store and
    return the new history.

    Appending a run_id already present replaces its rows, so re-uploading a nightly after a
    retry does not count it twice.
    """
    store = Path(store)
    with _locked(store):
        df = load(store)
        df = df[df["run_id"] != run.run_id]
        seq = int(df["run_seq"].max()) + 1 if len(df) else 0
        new = _run_frame(run, commit, seq, report)
        parts = [p for p in (df, new) if len(p)]
        df = pd.concat(parts, ignore_index=True) if parts else _empty()
        _write(store, df)
    return df


# --------------------------------------------------------------------------------------------
# Trend
# --------------------------------------------------------------------------------------------


def _runs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run, ordered by start time (append order when any time is missing)."""
    runs = (
        df.groupby("run_id", sort=False)
        .agg(
            run_seq=("run_seq", "first"),
            started=("started", "first"),
            commit=("commit", "first"),
            duration_s=("run_duration_s", "first"),
            report=("report", "first"),
            repo_url=("repo_url", "first"),
        )
        .reset_index()
    )
    stamps = pd.to_datetime(runs["started"], utc=True, errors="coerce", format="ISO8601")
    if len(runs) and stamps.notna().all():
        runs = runs.assign(_t=stamps).sort_values(["_t", "run_seq"]).drop(columns="_t")
    else:
        runs = runs.sort_values("run_seq")
    return runs.reset_index(drop=True)


def _clean(value: object) -> Any:
    """Plain Python values for the template (no pandas NA or numpy scalars)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


GONE = "gone"  # the ``current`` of a case the latest run no longer has


def trend(df: pd.DataFrame) -> Trend:
    """Per case the verdict series over runs (oldest first) and its durations, what changed
    since the previous run, and the run durations.

    ``newly_failing``: FAIL in the latest run and not FAIL in the run before (passing,
    untestable, errored or absent), and a case the run before decided that the latest run does
    not have at all (``current`` is :data:`GONE`). ``newly_untestable``: UNTESTABLE now and PASS or FAIL in
    the run before: a case that ran and no longer can (an operation moved, a dependency went
    missing) lost its coverage, which is watched like a failure. ``newly_fixed``: PASS now and
    FAIL in the run before. ERROR is a harness problem, not a change in Megatron-Bridge.
    """
    runs = _runs(df)
    run_ids = list(runs["run_id"])
    run_list: list[TrendRun] = [
        {
            "run_id": str(r.run_id),
            "commit": str(r.commit),
            "started": str(r.started),
            "duration_s": _clean(r.duration_s),
            "report": str(r.report or ""),
            "repo_url": str(r.repo_url or ""),
            "counts": {v.value: 0 for v in Verdict},
        }
        for r in runs.itertuples()
    ]
    position = {rid: i for i, rid in enumerate(run_ids)}
    cases: dict[str, TrendCase] = {}
    for row in df.sort_values(["suite", "case_id"]).itertuples():
        entry = cases.setdefault(
            str(row.case_id),
            {
                "suite": str(row.suite),
                "source": str(row.source),
                "series": [None] * len(run_ids),
                "messages": [""] * len(run_ids),
                "durations": [None] * len(run_ids),
            },
        )
        i = position[row.run_id]
        entry["series"][i] = str(row.verdict)
        entry["messages"][i] = str(row.message or "")
        entry["durations"][i] = _clean(row.duration_s)
        if str(row.verdict) in run_list[i]["counts"]:
            run_list[i]["counts"][str(row.verdict)] += 1
    newly_failing: list[TrendChange] = []
    newly_untestable: list[TrendChange] = []
    newly_fixed: list[TrendChange] = []
    newly_changed: list[TrendChange] = []
    if len(run_ids) >= 1:
        latest = run_list[-1]
        for cid, entry in cases.items():
            now = entry["series"][-1]
            before = entry["series"][-2] if len(run_ids) >= 2 else None
            change: TrendChange = {
                "case_id": cid,
                "suite": entry["suite"],
                "previous": before,
                "current": now,
                "commit": latest["commit"],
                "run_id": latest["run_id"],
                "message": entry["messages"][-1],
            }
            if len(run_ids) >= 2 and now == Verdict.FAIL.value and before != Verdict.FAIL.value:
                newly_failing.append(change)
            elif now is None and before is not None and Verdict(before).is_decisive:
                # it ran last night and is gone tonight (a suite that stopped collecting, a case
                # renamed away): its coverage is lost, which is watched like a new failure
                newly_failing.append({**change, "current": GONE, "message": "not in tonight's run"})
            elif now == Verdict.UNTESTABLE.value and before is not None and Verdict(before).is_decisive:
                newly_untestable.append(change)
            elif now == Verdict.PASS.value and before == Verdict.FAIL.value:
                newly_fixed.append(change)
            elif len(run_ids) >= 2 and now == Verdict.CHANGED.value and before != Verdict.CHANGED.value:
                newly_changed.append(change)
    return {
        "runs": run_list,
        "cases": cases,
        "newly_failing": newly_failing,
        "newly_untestable": newly_untestable,
        "newly_fixed": newly_fixed,
        "newly_changed": newly_changed,
        "durations": [{"run_id": r["run_id"], "commit": r["commit"], "duration_s": r["duration_s"]} for r in run_list],
    }


def write_trend_page(
    store: Path,
    out_path: Path,
    bisect_links: dict[str, str] | None = None,
    bisect_note: str = "",
    defect_culprits: list[dict[str, object]] | None = None,
) -> Path:
    """The trend page of the history in ``store`` written to ``out_path`` (the links, note and defect
    culprits as :func:`harness.report.trend.render_trend_report` shows them). Here and not in the
    report package: the page lays out what this module computes, and the report never reads a history."""
    from harness.report.trend import render_trend_report  # jinja2: only when a page is written

    return render_trend_report(
        trend(load(Path(store))), Path(store), out_path, bisect_links, bisect_note, defect_culprits
    )
