#!/usr/bin/env bash
# One nightly fanned out over SLURM: run on a login node (cron, Jenkins, GitLab runner there).
# Every suite is one SLURM job (in the NeMo container, with a GPU when harness.toml asks for one),
# the verdicts go to the history, and what newly broke is bisected with one SLURM job per
# evaluation. The driver itself needs no GPU.
#
# Environment:
#   MB        (required) Megatron-Bridge git checkout at the commit to test, full history, on a
#             file system the compute nodes share
#   SHARED    (required) a directory on the shared file system: cache (mirror, workspaces, job
#             logs) under $SHARED/cache, history under $SHARED/history.parquet
#   JOBS      jobs in flight (default 8)
#   OUT       output directory, wiped first, on the shared file system (default $SHARED/nightly)
#   SUITES    space-separated suite names (default: every golden suite)
#   HARNESS_VENV, SKIP_SETUP=1  as in nightly.sh
#
# Cluster settings (partition, account, GPUs, time, container image and mounts, the container's
# Python) come from [tool.harness.slurm] in harness.toml: see harness.slurm.toml next to this
# file; this script runs the harness from $HARNESS_CONFIG_DIR (default: the harness checkout),
# where that file is looked for.
#
# Exit status is harness nightly's: 0 every case passed, 1 a case failed (a suite whose job the
# cluster lost counts as an error, never as MB's failure), 2 usage/environment.
set -euo pipefail
HARNESS_DIR="$(cd "$(dirname "$0")/../.." && pwd)"
MB="${MB:?set MB to a Megatron-Bridge git checkout on the shared file system}"
SHARED="${SHARED:?set SHARED to a directory on the shared file system}"
JOBS="${JOBS:-8}"
OUT="${OUT:-$SHARED/nightly}"
SUITES="${SUITES:-}"
VENV="${HARNESS_VENV:-$HARNESS_DIR/.venv}"
CONFIG_DIR="${HARNESS_CONFIG_DIR:-$HARNESS_DIR}"

if [ "${SKIP_SETUP:-0}" != 1 ]; then
  HARNESS_VENV="$VENV" "$HARNESS_DIR/scripts/setup.sh"   # installs submitit (requirements/harness.txt)
fi
command -v sbatch >/dev/null || { echo "nightly-slurm.sh: sbatch not found: run this on a SLURM login node" >&2; exit 2; }

if [ -f "$OUT/trend.html" ] || [ -d "$OUT/runs" ]; then
  rm -rf -- "$OUT"
fi
mkdir -p "$OUT" "$SHARED/cache"

suite_args=()
for s in $SUITES; do suite_args+=(--suite "$s"); done

cd "$CONFIG_DIR"
set +e
"$VENV/bin/harness" nightly --mb-src "$MB/src" --history "$SHARED/history.parquet" --out "$OUT" \
  --auto-bisect --repo "$MB" --cache-dir "$SHARED/cache" --executor slurm -j "$JOBS" \
  ${suite_args[@]+"${suite_args[@]}"} 2>&1 | tee "$OUT/nightly.log"
rc=${PIPESTATUS[0]}
set -e
echo "nightly-slurm.sh: harness nightly exited $rc; pages under $OUT (trend.html, report.html, bisect/report.html);" \
     "job logs under $SHARED/cache/jobs/"
exit "$rc"
