"""What submitted jobs are doing, and what they left: scheduler states and result files.

Why not submitit's own watcher: it asks ``sacct`` only, which needs SLURM accounting
(slurmdbd). Clusters without it (and the single-node SLURM of our tests) make submitit report
every job as UNKNOWN forever, so a job that died without a result would be waited for
without end. We ask ``squeue --states=all`` first (slurmctld remembers an ended job for
MinJobAge, 300 s by default) and ``sacct`` only for the ids squeue no longer knows. One call
per poll covers every job in flight.

submitit's local jobs (its LocalExecutor: a controller process per job, our tests and
benchmarks) are asked through the process when this driver started them, and through
``/proc`` when a rerun reattached to a job a killed driver left running.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import submitit

# States in which a SLURM job may still produce its result; anything else has ended.
ACTIVE = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESV_DEL_HOLD",
    }
)
UNKNOWN = "UNKNOWN"  # the scheduler does not know the id (any more)
RUNNING = "RUNNING"


def is_active(state: str) -> bool:
    return state in ACTIVE


def slurm_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """job id -> SLURM state (``CANCELLED by 0`` is reported as ``CANCELLED``); UNKNOWN when
    neither squeue nor sacct knows it. None when squeue could not be asked (slurmctld busy or
    down): then nothing is known, and nothing may be declared lost."""
    states = dict.fromkeys(job_ids, UNKNOWN)
    if not job_ids:
        return states
    found = _ask(
        ["squeue", "--states=all", "--noheader", "--format=%i|%T", f"--jobs={','.join(job_ids)}"],
        nothing_known="Invalid job id",
    )
    if found is None:
        return None
    states.update({j: s for j, s in found.items() if j in states})
    missing = [j for j, s in states.items() if s == UNKNOWN]
    if missing:  # ended long ago: only accounting remembers (when there is accounting)
        found = _ask(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "--allocations",
                "--format=JobID,State",
                f"--jobs={','.join(missing)}",
            ]
        )
        states.update({j: s for j, s in (found or {}).items() if j in states})
    return states


def _ask(cmd: list[str], nothing_known: str | None = None) -> dict[str, str] | None:
    """``id|state`` lines of ``cmd``; None when the command failed (``nothing_known``: the error
    text that only means none of the ids is known, e.g. squeue's "Invalid job id specified")."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return {} if nothing_known and nothing_known in proc.stderr else None
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        job_id, _, state = line.strip().partition("|")
        if job_id and state:
            out[job_id] = state.split()[0].upper()
    return out


def local_state(job: submitit.Job[object]) -> str:
    """State of a submitit LocalJob: RUNNING, or how its controller process ended."""
    proc = getattr(job, "_process", None)
    if proc is not None:
        rc = proc.poll()
        if rc is None:
            return RUNNING
        # the controller ends normally even when its task was killed: "ENDED" says no more than that
        return "ENDED" if rc == 0 else (f"KILLED_BY_SIGNAL_{-rc}" if rc < 0 else f"EXIT_{rc}")
    return RUNNING if _local_controller_alive(str(job.job_id)) else "GONE"


def _local_controller_alive(job_id: str) -> bool:
    """A reattached local job: its id is the pid of a ``submitit.local._local`` controller."""
    if not job_id.isdigit():
        return False
    try:
        cmdline = Path(f"/proc/{job_id}/cmdline").read_bytes()
        stat = Path(f"/proc/{job_id}/stat").read_text()
    except OSError:
        return False
    zombie = stat.rpartition(")")[2].split()[:1] == ["Z"]
    return b"submitit.local._local" in cmdline and not zombie


@contextlib.contextmanager
def cancellable_children() -> Iterator[None]:
    """While a local job starts: SIGINT handled here, so its controller gets the default back.

    submitit's local cluster cancels a job with SIGINT to the job's controller process. A driver
    started in the background by a non-interactive shell (``cmd &``, ``nohup``) has SIGINT
    ignored, and an ignored signal stays ignored across ``exec``: its controllers could never be
    cancelled, and a moot or interrupted job would run to its end. A *handled* signal is reset to
    the default at ``exec``, so a handler for the time of the submission is enough. The driver's
    own disposition is restored at once (it was started to ignore Ctrl-C; that stays its choice).
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def cancel_local(job_id: str) -> None:
    """Cancel a reattached local job the way submitit cancels its own: SIGINT to the controller."""
    if _local_controller_alive(job_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(job_id), signal.SIGINT)


def read_result(result_pickle: Path) -> tuple[str, Any] | None:
    """submitit's ``(outcome, payload)`` for an ended job, None while there is no result file.

    submitit writes the file under a temporary name and renames it, so a file that exists is
    complete. Touching the folder first refreshes a network file system's attribute cache
    (the trick submitit uses too)."""
    folder = result_pickle.parent
    with contextlib.suppress(OSError):
        os.chmod(folder, folder.stat().st_mode)
    try:
        with open(result_pickle, "rb") as fh:
            found = pickle.load(fh)
    except FileNotFoundError:
        return None
    outcome, payload = found
    return str(outcome), payload


def log_tail(paths: Sequence[Path], lines: int = 20) -> str:
    """The last ``lines`` lines of the first non-empty log among ``paths`` ("" when none)."""
    for p in paths:
        try:
            text = Path(p).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if text.strip():
            return "\n".join(text.rstrip().splitlines()[-lines:])
    return ""
