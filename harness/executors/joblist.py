"""The job list: the cluster jobs one driver has started, on disk, so a killed driver loses none.

Why: a SLURM evaluation can queue for hours and run for many minutes; a driver killed on the
login node (OOM, a closed ssh session, ``kill -9``) must not throw that work away. Each driver
keeps ``<jobs dir>/<run id>/jobs.json`` (a typed, versioned record, rewritten atomically on
every change: submitted, result taken, lost by the cluster, cancelled) and holds an exclusive
``flock`` on ``<run id>/.driver.lock`` for its lifetime, so the kernel releases it however the
driver dies. A new driver *adopts* the lists whose lock nobody holds: when it is about to
submit an evaluation one of them already ran (or is still running), it reattaches to that
job instead of submitting again. Adopted entries move into the new driver's own list before
the old file is removed, so killing the new driver hands them on once more.

An evaluation is identified by :func:`job_key`: the callable's class and ``repr`` (the bisect
evaluators are frozen dataclasses of paths and options, so the text is the same in a rerun)
plus the argument (a commit sha). A callable whose ``repr`` is an object address is never
reattached.
"""

from __future__ import annotations

import datetime as _dt
import enum
import fcntl
import hashlib
import os
import socket
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness.errors import CorruptFile
from harness.records.atomicio import read_versioned_json, write_versioned_json

KIND = "harness-slurm-jobs"
SCHEMA = 1
LIST_NAME = "jobs.json"
LOCK_NAME = ".driver.lock"


class EntryState(enum.Enum):
    SUBMITTED = "submitted"  # in flight: queued or running
    CONSUMED = "consumed"  # the driver took its result (and cached the verdicts right after)
    FAULT = "fault"  # the cluster lost it (then retried, or skipped as infrastructure)
    CANCELLED = "cancelled"  # moot, Ctrl-C, or adopted and never needed


ADOPTABLE = frozenset({EntryState.SUBMITTED, EntryState.CONSUMED})


@dataclass(frozen=True)
class JobEntry:
    key: str  # job_key(callable, argument); "" = never reattached
    label: str  # the argument as text (a commit sha), for people reading the file
    job_id: str
    folder: str  # submitit folder of the job: pickles and logs
    cluster: str  # "slurm" or "local"
    attempt: int  # 1 = first submission, 2 = first retry...
    submitted_at: str  # ISO 8601, UTC
    state: EntryState

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "state": self.state.value}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> JobEntry:
        try:
            return cls(**{**doc, "state": EntryState(doc["state"])})
        except (TypeError, ValueError, KeyError) as exc:
            raise CorruptFile(f"job list entry {doc!r}: {exc}") from None


def job_key(fn: object, arg: object) -> str:
    """The identity of one evaluation, stable across driver processes ("" when it is not)."""
    text = f"{type(fn).__module__}.{type(fn).__qualname__}|{fn!r}|{arg!r}"
    if " at 0x" in text:  # an object address: differs in every process
        return ""
    return hashlib.sha256(text.encode()).hexdigest()


def now_utc() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JobList:
    """This driver's job list in ``run_dir`` (created), locked until :meth:`close`."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / LIST_NAME
        self.entries: dict[str, JobEntry] = {}  # job id -> entry
        self._lock_fd: int | None = os.open(self.dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh directory: never contended

    def put(self, entry: JobEntry) -> None:
        self.entries[entry.job_id] = entry
        self.save()

    def mark(self, job_id: str, state: EntryState) -> None:
        if job_id in self.entries and self.entries[job_id].state is not state:
            self.put(replace(self.entries[job_id], state=state))

    def save(self) -> None:
        write_versioned_json(
            self.path,
            KIND,
            SCHEMA,
            {
                "run_id": self.dir.name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "jobs": [e.to_json() for e in self.entries.values()],
            },
        )

    def adopt_orphans(self, jobs_root: Path) -> tuple[dict[str, JobEntry], list[str]]:
        """(key -> newest adoptable entry, notes) from the lists under ``jobs_root`` whose
        driver is gone. A list that cannot be read is left in place and named in the notes."""
        adopted: dict[str, JobEntry] = {}
        notes: list[str] = []
        for other in sorted(Path(jobs_root).glob(f"*/{LIST_NAME}")):
            if other.parent == self.dir:
                continue
            fd = os.open(other.parent / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its driver is alive
                try:
                    doc = read_versioned_json(other, KIND, SCHEMA)
                    entries = [JobEntry.from_json(e) for e in doc.get("jobs", [])]
                except FileNotFoundError:
                    continue  # adopted by another driver a moment ago
                except CorruptFile as exc:
                    notes.append(f"job list not reattached: {exc}")
                    continue
                for e in entries:
                    if e.key and e.state in ADOPTABLE and (e.key not in adopted or e.attempt > adopted[e.key].attempt):
                        if e.key in adopted:
                            self.entries.pop(adopted[e.key].job_id, None)
                        adopted[e.key] = e
                        self.entries[e.job_id] = e
                self.save()  # ours holds them now; only then forget the old list
                other.unlink()
            finally:
                os.close(fd)
        return adopted, notes

    def close(self, keep: bool) -> None:
        """Release the lock; remove the list unless ``keep`` (jobs left for a rerun to reattach)."""
        if self._lock_fd is None:
            return
        if not keep:
            self.path.unlink(missing_ok=True)
        os.close(self._lock_fd)
        self._lock_fd = None
