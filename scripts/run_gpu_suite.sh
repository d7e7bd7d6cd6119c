#!/usr/bin/env bash
# Run the GPU forward suite (MB's step functions into MCore's GPTModel with the Transformer
# Engine spec, bf16, THD on CUDA) next to the CPU reference suite, and write the report
# (results.json, junit.xml, report.html) under reports/gpu-<timestamp>/ (or $1).
#
# Set up once on the GPU machine: scripts/setup.sh && scripts/setup_gpu.sh. The GPU suite's
# goldens (boundaries, trained positions) are device independent and recorded on any machine;
# the CPU suite runs pinned to the CPU on a GPU machine too (harness/suite/standins/cuda.py).
#
# --require-gpu: a GPU case that cannot run here (no CUDA device, Transformer Engine missing or
# not importable with this torch) is an environment error, exit 2, never a green run.
# Exit: 0 every case passed, 1 a case failed, 2 the GPU cases could not run (or usage error).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HARNESS="${HARNESS:-$ROOT/.venv/bin/harness}"
OUT="${1:-$ROOT/reports/gpu-$(date +%Y%m%d-%H%M%S)}"
cd "$ROOT"
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=name,memory.total --format=csv || true; fi
set +e
"$HARNESS" run --suite forward_gpu --suite forward_cpu --require-gpu --out "$OUT"
rc=$?
set -e
echo "report: $OUT/report.html (exit $rc)"
exit $rc
