"""What a SLURM executor is told (:class:`SlurmOptions`) and the errors it reports.

Kept apart from :mod:`harness.executors.slurm` so that reading the settings
(:mod:`harness.executors.config`) needs neither submitit nor the executor.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import EnvironmentProblem, HarnessError, UsageError

CLUSTERS = ("slurm", "local")


class JobFailed(HarnessError):
    """A job ran but its Python raised: a broken job environment or a harness bug, never MB's."""


class SharedFilesystemError(EnvironmentProblem):
    """The jobs cannot see the cache directory the driver writes (or the other way round)."""


@dataclass(frozen=True)
class SlurmOptions:
    """Where and how jobs run (``[tool.harness.slurm]`` and the ``--slurm-*`` flags)."""

    cluster: str = "slurm"  # "slurm", or "local" for submitit's LocalExecutor
    partition: str | None = None
    account: str | None = None
    gpus: int = 0  # per job (one node)
    time_min: int = 60  # per job; keep it above the evaluation timeout (--timeout)
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    container_image: str | None = None  # pyxis: an enroot URI or a squashfs path
    container_mounts: tuple[str, ...] = ()  # SRC:DST[:FLAGS]; the cache dir is added
    python: str | None = None  # python on the node (in the container); default: this one
    setup: tuple[str, ...] = ()  # shell lines before the job (module load, source a venv)
    sbatch_extra: tuple[tuple[str, str], ...] = ()  # more #SBATCH flags, (name, value)
    srun_extra: tuple[str, ...] = ()
    job_retries: int = 1  # resubmissions of a job the cluster lost
    poll_s: float | None = None  # between scheduler polls; default 5 s (slurm), 0.2 s (local)
    probe_timeout_s: float = 900.0  # the start-up job may queue this long
    result_grace_s: float = 30.0  # a network file system may show the result file late

    def __post_init__(self) -> None:
        if self.cluster not in CLUSTERS:
            raise UsageError(f"unknown cluster {self.cluster!r} (one of {', '.join(CLUSTERS)})")
        if self.job_retries < 0 or self.gpus < 0 or self.time_min < 1:
            raise UsageError("job retries and GPUs must be 0 or more, the job time at least 1 minute")
