#!/usr/bin/env bash
# One nightly for any scheduler (cron, Jenkins, GitLab, the GitHub workflow next to this file):
# set up the harness, test the Megatron-Bridge checkout $MB as it stands, add the run to the
# history, and bisect what newly broke since the previous nightly.
#
# Environment:
#   MB        (required) a Megatron-Bridge git checkout at the commit to test, with full history
#   HISTORY   history store, kept between nightlies  (default: <harness>/reports/history.parquet)
#   OUT       output directory, wiped first          (default: <harness>/reports/nightly)
#   SUITES    space-separated suite names            (default: empty = every golden suite in suites/,
#             forward_cpu / forward_gpu included once they are there; add "upstream" for MB's own tests)
#   HARNESS_VENV  where scripts/setup.sh puts the environment (default: <harness>/.venv)
#   SKIP_SETUP=1  reuse the environment as is
#   REQUIRE_GPU   1: the GPU cases must run (scripts/setup_gpu.sh installs Transformer Engine, and
#             harness nightly --require-gpu fails the night, exit 2, when a GPU case is untestable or
#             errs); 0: never; default: 1 when nvidia-smi answers, else 0
#   HARNESS_ARGS  more arguments for harness nightly, split on spaces (nightly-slurm.sh passes
#             --executor slurm, -j and --cache-dir this way)
#
# Exit status is harness nightly's: 0 every case passed, 1 a case failed, 2 usage/environment
# (including, with REQUIRE_GPU, GPU cases that could not run: a GPU runner never goes green
# without its GPU cases).
set -euo pipefail
HARNESS_DIR="$(cd "$(dirname "$0")/../.." && pwd)"
MB="${MB:?set MB to a Megatron-Bridge git checkout}"
HISTORY="${HISTORY:-$HARNESS_DIR/reports/history.parquet}"
OUT="${OUT:-$HARNESS_DIR/reports/nightly}"
SUITES="${SUITES:-}"
VENV="${HARNESS_VENV:-$HARNESS_DIR/.venv}"
if [ -z "${REQUIRE_GPU:-}" ]; then
  if nvidia-smi >/dev/null 2>&1; then REQUIRE_GPU=1; else REQUIRE_GPU=0; fi
fi

if [ "${SKIP_SETUP:-0}" != 1 ]; then
  HARNESS_VENV="$VENV" "$HARNESS_DIR/scripts/setup.sh"
  if [ "$REQUIRE_GPU" = 1 ]; then
    HARNESS_VENV="$VENV" "$HARNESS_DIR/scripts/setup_gpu.sh"
  fi
fi
gpu_args=()
if [ "$REQUIRE_GPU" = 1 ]; then gpu_args=(--require-gpu); fi

# Last night's pages must not be mistaken for tonight's (the history is elsewhere); each
# night's own report under runs/<run-id>/ stays: trend.html links every night to it.
rm -rf -- "$OUT/trend.html" "$OUT/report.html" "$OUT/junit.xml" "$OUT/nightly.log" "$OUT/bisect"
mkdir -p "$OUT" "$(dirname "$HISTORY")"

suite_args=()
for s in $SUITES; do suite_args+=(--suite "$s"); done
read -r -a extra_args <<< "${HARNESS_ARGS:-}"

set +e
"$VENV/bin/harness" nightly --mb-src "$MB/src" --history "$HISTORY" --out "$OUT" \
  --auto-bisect --repo "$MB" ${gpu_args[@]+"${gpu_args[@]}"} ${suite_args[@]+"${suite_args[@]}"} \
  ${extra_args[@]+"${extra_args[@]}"} 2>&1 | tee "$OUT/nightly.log"
rc=${PIPESTATUS[0]}
set -e
echo "nightly.sh: harness nightly exited $rc; pages under $OUT (trend.html, report.html, bisect/report.html)"
exit "$rc"
