#!/usr/bin/env bash
# Run the GPU forward suite (MCore GPTModel + Transformer Engine THD, bf16) next to the CPU
# reference suite and write the report (results.json, junit.xml, report.html) under
# reports/gpu-<timestamp>/ (or $1). Without CUDA/TE the GPU cases are UNTESTABLE with the reason.
# First run on a GPU machine: record the GPU goldens once with
#   harness fixtures record --suite forward_gpu --yes
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HARNESS="${HARNESS:-$ROOT/.venv/bin/harness}"
OUT="${1:-$ROOT/reports/gpu-$(date +%Y%m%d-%H%M%S)}"
cd "$ROOT"
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=name,memory.total --format=csv || true; fi
set +e
"$HARNESS" run --suite forward_gpu --suite forward_cpu --out "$OUT"
rc=$?
set -e
echo "report: $OUT/report.html (exit $rc)"
exit $rc
