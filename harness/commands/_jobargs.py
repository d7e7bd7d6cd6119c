"""Where a command's work runs: ``--executor local|slurm`` and the SLURM flags, shared by
run, bisect, nightly and matrix (settings not given come from ``[tool.harness.slurm]``).

Why apart from :mod:`._args`: these options build an executor (submitit, the cluster's
configuration) and carry themselves into the commands a nightly starts; the other shared
options only describe the work.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from harness.commands._args import cache_dir, non_negative_int
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.executors.slurm import SlurmExecutor


#: --flag dest -> SlurmOptions field; the rest of the settings come from [tool.harness.slurm]
SLURM_FLAGS = {
    "slurm_partition": "partition",
    "slurm_gpus": "gpus",
    "slurm_time": "time_min",
    "slurm_account": "account",
    "container_image": "container_image",
    "job_retries": "job_retries",
}


def add_executor(p: argparse.ArgumentParser, what: str) -> None:
    """``--executor local|slurm`` and the SLURM flags; ``-j`` then means jobs in flight."""
    g = p.add_argument_group(
        "cluster",
        f"with --executor slurm, {what} run as SLURM jobs through submitit, -j of them in flight; "
        "--cache-dir must be on a file system the compute nodes share. Settings not given here "
        "come from [tool.harness.slurm] in harness.toml or pyproject.toml (this directory or a parent)",
    )
    g.add_argument(
        "--executor",
        choices=("local", "slurm"),
        default="local",
        help="local: this machine (default); slurm: one SLURM job each",
    )
    g.add_argument("--slurm-partition", metavar="NAME", help="partition the jobs go to")
    g.add_argument("--slurm-gpus", type=non_negative_int, metavar="N", help="GPUs per job")
    g.add_argument("--slurm-time", metavar="TIME", help="time limit per job: minutes or [D-]HH:MM:SS")
    g.add_argument("--slurm-account", metavar="NAME", help="account the jobs are charged to")
    g.add_argument(
        "--container-image",
        metavar="IMAGE",
        help="pyxis/enroot image the jobs run in (srun --container-image), e.g. nvcr.io#nvidia/nemo:25.09",
    )
    g.add_argument(
        "--job-retries",
        type=non_negative_int,
        metavar="N",
        help="resubmissions of a job the cluster lost (preempted, node failure, time limit; default 1)",
    )


def executor_from_args(args: argparse.Namespace, slots: int, timeout_s: float | None = None) -> SlurmExecutor | None:
    """None for --executor local; else the SLURM executor, jobs under the cache directory. A job
    time limit below ``timeout_s`` (the command's own timeout for the work) gets a warning: the
    cluster would end the job first, a cluster fault instead of an untestable verdict."""
    given = [f"--{dest.replace('_', '-')}" for dest in SLURM_FLAGS if getattr(args, dest, None) is not None]
    if args.executor != "slurm":
        if given:
            raise UsageError(f"{', '.join(given)}: only with --executor slurm")
        return None
    from harness.executors import config
    from harness.executors.slurm import SlurmExecutor

    flags = {field: getattr(args, dest, None) for dest, field in SLURM_FLAGS.items()}
    if flags["time_min"] is not None:
        flags["time_min"] = config.parse_minutes(flags["time_min"])
    opts = config.slurm_options(**flags)
    if timeout_s is not None and opts.time_min * 60 < timeout_s:
        print(
            f"warning: the SLURM time limit ({opts.time_min} min) is below --timeout ({timeout_s:.0f} s): jobs "
            "may be ended by SLURM (retried, then skipped as infrastructure) before the timeout marks them",
            file=sys.stderr,
        )
    return SlurmExecutor(cache_dir(args), slots, opts, progress=None if getattr(args, "quiet", False) else sys.stderr)


def executor_argv(args: argparse.Namespace) -> list[str]:
    """The executor flags as given, for a harness command started as a subprocess."""
    if getattr(args, "executor", "local") != "slurm":
        return []
    argv = ["--executor", "slurm"]
    for dest in SLURM_FLAGS:
        value = getattr(args, dest, None)
        if value is not None:
            argv += [f"--{dest.replace('_', '-')}", str(value)]
    return argv
