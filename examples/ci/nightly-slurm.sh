#!/usr/bin/env bash
# nightly.sh fanned out over SLURM, run from a login node (cron, Jenkins, a GitLab runner there):
# every suite is one SLURM job (in the NeMo container, with a GPU when harness.toml asks for one),
# and the automatic bisection of what newly broke runs one job per evaluation with the same
# settings. The driver itself needs no GPU.
#
# Environment:
#   MB        (required) Megatron-Bridge git checkout at the commit to test, full history, on a
#             file system the compute nodes share
#   SHARED    (required) a directory on that shared file system: the cache (mirror, workspaces,
#             job logs) goes to $SHARED/cache, the history to $SHARED/history.parquet, the pages
#             to $SHARED/nightly (OUT overrides)
#   JOBS      jobs in flight (default 8)
#   SUITES, HARNESS_VENV, SKIP_SETUP  as in nightly.sh
#
# Cluster settings (partition, account, GPUs, time limit, container image and mounts, the
# container's Python) come from [tool.harness.slurm] in harness.toml in HARNESS_CONFIG_DIR
# (default: the harness checkout): start from harness.slurm.toml next to this file.
#
# Exit status is harness nightly's: 0 every case passed, 1 a case failed (a suite whose job the
# cluster lost counts as an error, never as MB's failure), 2 usage/environment.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SHARED="${SHARED:?set SHARED to a directory on the shared file system}"
command -v sbatch >/dev/null || { echo "nightly-slurm.sh: no sbatch here: run it on a SLURM login node" >&2; exit 2; }
mkdir -p "$SHARED/cache"
cd "${HARNESS_CONFIG_DIR:-$HERE/../..}"   # where harness.toml is looked for
HISTORY="$SHARED/history.parquet" OUT="${OUT:-$SHARED/nightly}" \
  HARNESS_ARGS="--executor slurm -j ${JOBS:-8} --cache-dir $SHARED/cache ${HARNESS_ARGS:-}" \
  exec "$HERE/nightly.sh"
