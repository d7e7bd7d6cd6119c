"""A real single-node SLURM for tests: munged, slurmctld and slurmd under one temp directory.

Debian's ``slurm-wlm`` and ``munge`` packages (``apt-get install -y slurm-wlm munge``) give
SLURM 22.05 here. :func:`start` writes a minimal ``slurm.conf`` (one node: this host at
127.0.0.1, 2 CPUs, no GPU, free ports, every state/spool/log/pid path and the munge socket
and key under ``root``), starts the three daemons, and waits until the node is idle.
Clients (sbatch, squeue, srun inside a job) find the cluster through ``SLURM_CONF``, so the
machine's own configuration is never read or touched. :meth:`Cluster.stop` cancels every
job, then ends the daemons it started, by pid.

:func:`unavailable` says why such a cluster cannot run here (binaries missing, not root):
tests skip with that reason, never pass.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "srun", "scancel", "sinfo")
SBIN = ("/usr/sbin", "/usr/local/sbin")

_ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"})


def _which(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    return shutil.which(name, path=path)


def unavailable() -> str | None:
    """Why a single-node SLURM cannot be started here, or None."""
    missing = [b for b in BINARIES if _which(b) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install -y slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test SLURM runs its daemons as root (SlurmUser=root); not root here"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    root: Path
    conf: Path
    node: str
    pids: dict[str, Path] = field(default_factory=dict)  # daemon -> pid file

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_which(cmd[0]) or cmd[0], *cmd[1:]],
            capture_output=True,
            text=True,
            check=check,
            env={**os.environ, **self.env},
            timeout=60,
        )

    def jobs(self) -> dict[str, str]:
        """job id -> state of every job slurmctld knows."""
        out = self.run("squeue", "--states=all", "--noheader", "--format=%i|%T", check=False).stdout
        return dict(line.split("|", 1) for line in out.split() if "|" in line)

    def settled(self, job_ids: list[str], timeout_s: float = 60.0) -> dict[str, str]:
        """The states of every job, once those named have left SLURM's active states.

        The executor reads a job's result file as soon as the job writes it, and the job's
        process exits after that: slurmctld may still say RUNNING, then COMPLETING, for a while.
        """
        deadline = time.monotonic() + timeout_s
        known = self.jobs()
        while time.monotonic() < deadline and any(known.get(j) in _ACTIVE for j in job_ids):
            time.sleep(0.5)
            known = self.jobs()
        return known

    def logs(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            p = self.root / "log" / name
            if p.exists():
                parts.append(f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel every job, wait for them to end, then end the daemons (by pid)."""
        if "slurmctld" in self.pids:
            self.run("scancel", "--full", "--partition=debug", check=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(s in _ACTIVE for s in self.jobs().values()):
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.pids.pop(name, None)
            if pid_file is None or not pid_file.exists():
                continue
            pid = int(pid_file.read_text().split()[0])
            _terminate(pid)


def _terminate(pid: int, grace_s: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _config(c: Cluster, cpus: int) -> str:
    r = c.root
    return "\n".join(
        [
            "ClusterName=harnesstest",
            f"SlurmctldHost={c.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r / 'munge' / 'munge.sock'}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",  # no cgroups needed
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",  # no slurmdbd: sacct does not work, squeue does
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",  # one CPU per job: two jobs run at once
            "ReturnToService=2",
            "MinJobAge=600",
            "KillWait=2",  # cancelled jobs die quickly (submitit ignores their SIGTERM)
            f"NodeName={c.node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={c.node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def start(root: Path, cpus: int = 2, ready_s: float = 60.0) -> Cluster:
    """Start the cluster under ``root``; raises RuntimeError (with the daemons' log tails) when
    it does not come up, after stopping whatever did start."""
    root = Path(root)
    for d in ("munge", "state", "spool", "log"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    c = Cluster(root, root / "slurm.conf", socket.gethostname().split(".")[0])
    c.conf.write_text(_config(c, cpus))
    try:
        m = root / "munge"
        _daemon(
            c,
            "munged",
            m / "munged.pid",
            "--force",
            f"--socket={m / 'munge.sock'}",
            f"--key-file={key}",
            f"--pid-file={m / 'munged.pid'}",
            f"--log-file={root / 'log' / 'munged.log'}",
            f"--seed-file={m / 'munged.seed'}",
        )
        _daemon(c, "slurmctld", root / "slurmctld.pid", "-f", str(c.conf))
        _daemon(c, "slurmd", root / "slurmd.pid", "-f", str(c.conf), "-N", c.node)
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            state = c.run("sinfo", "--noheader", "--format=%T", check=False).stdout.strip()
            if state == "idle":
                return c
            time.sleep(0.5)
        raise RuntimeError(f"the test SLURM node is not idle after {ready_s:.0f} s (state {state!r})\n{c.logs()}")
    except BaseException:
        c.stop()
        raise


def _daemon(c: Cluster, name: str, pid_file: Path, *args: str) -> None:
    """Start a daemon that forks into the background and writes ``pid_file``."""
    proc = subprocess.run(
        [_which(name) or name, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **c.env}
    )
    deadline = time.monotonic() + 15
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_file.exists():
        c.pids[name] = pid_file
    if proc.returncode != 0 or not pid_file.exists():
        raise RuntimeError(f"{name} did not start (exit {proc.returncode}): {proc.stderr.strip()}\n{c.logs()}")
