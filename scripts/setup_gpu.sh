#!/usr/bin/env bash
# Install Transformer Engine (TE) into the harness environment, built for the torch installed
# there, so the forward_gpu suite can run. Run scripts/setup.sh first; run this on the GPU
# machine itself (it needs the NVIDIA driver and the CUDA toolkit, and checks both first).
#
# Version logic (printed before anything is installed):
#   * torch: whatever scripts/setup.sh installed (requirements/mb-*.txt pins it); TE is built
#     against it, never the other way round: TE's PyTorch extension (transformer_engine_torch)
#     is a source package compiled at install time, with --no-build-isolation so the compiler
#     sees this environment's torch. A TE built for another torch fails to import with
#     "undefined symbol": the harness then reports the GPU cases as ERROR "environment: ...".
#   * CUDA: torch.version.cuda decides the binary core wheel: 12.x -> transformer_engine[core-cu12],
#     13.x -> transformer_engine[core-cu13]. nvcc (the CUDA toolkit) must have the same major
#     version to compile the extension.
#   * TE: $TE_VERSION (default below, the newest release when this was written). The command is
#       pip install --no-build-isolation "transformer_engine[pytorch,core-cuXX]==$TE_VERSION"
#     after pip install ninja pybind11 (the extension's build requirements).
#
# Environment: HARNESS_VENV (default .venv), TE_VERSION (default 2.20.2), MAX_JOBS (parallel
# compile jobs, default: the CPU count), NVTE_CUDA_ARCHS (optional, e.g. "90" to build for H100
# only, which is much faster), DRY_RUN=1 (check the machine and print the pip commands, install
# nothing).
# Exit: 0 TE imports with this torch on this GPU; 2 the machine cannot build or run it (no GPU,
# no CUDA toolkit, CPU-only torch, mismatched CUDA versions) or the installed TE does not import.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HARNESS_VENV:-.venv}"
TE_VERSION="${TE_VERSION:-2.20.2}"
PY="$VENV/bin/python"

fail() { echo "setup_gpu.sh: error: $*" >&2; exit 2; }

[ -x "$PY" ] || fail "no environment at $VENV: run scripts/setup.sh first (or set HARNESS_VENV)"
command -v nvidia-smi >/dev/null 2>&1 || fail "nvidia-smi not found: no NVIDIA driver on this machine; Transformer Engine needs a CUDA GPU (nothing installed)"
gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1)" \
  || fail "nvidia-smi failed: the NVIDIA driver does not answer (nothing installed)"
[ -n "$gpu" ] || fail "nvidia-smi lists no GPU (nothing installed)"

read -r torch_version torch_cuda < <("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda or "none")') \
  || fail "torch does not import in $VENV: run scripts/setup.sh"
[ "$torch_cuda" != none ] || fail "torch $torch_version in $VENV is a CPU-only build; Transformer Engine needs a CUDA build of torch"
cuda_major="${torch_cuda%%.*}"
case "$cuda_major" in
  12|13) core="core-cu$cuda_major" ;;
  *) fail "torch $torch_version is built for CUDA $torch_cuda; Transformer Engine $TE_VERSION ships cores for CUDA 12 and 13 only" ;;
esac

NVCC="$(command -v nvcc || true)"
[ -n "$NVCC" ] || { [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] && NVCC="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"; } || true
[ -n "$NVCC" ] || fail "nvcc not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin): install the CUDA $cuda_major toolkit; TE's PyTorch extension is compiled against torch at install time"
nvcc_version="$("$NVCC" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n1)"
[ "${nvcc_version%%.*}" = "$cuda_major" ] \
  || fail "nvcc is CUDA $nvcc_version but torch $torch_version is built for CUDA $torch_cuda: use a CUDA $cuda_major toolkit (set CUDA_HOME)"
export CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}"

spec="transformer_engine[pytorch,$core]==$TE_VERSION"
# Idempotent: a TE of this version that already imports with this torch is kept (a nightly
# must not recompile it every night).
if "$PY" -c "import sys, transformer_engine, transformer_engine.pytorch as _; sys.exit(transformer_engine.__version__.split('+')[0] != '$TE_VERSION')" 2>/dev/null; then
  echo "setup_gpu.sh: transformer_engine $TE_VERSION already imports with torch $torch_version; nothing to do"
  exit 0
fi
echo "setup_gpu.sh: GPU: $gpu"
echo "setup_gpu.sh: torch $torch_version (CUDA $torch_cuda), nvcc $nvcc_version at $NVCC"
PIP=("$PY" -m pip --disable-pip-version-check)
if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "setup_gpu.sh: dry run, would run:"
  echo "  ${PIP[*]} install -q ninja pybind11"
  echo "  MAX_JOBS=${MAX_JOBS:-$(nproc)} ${PIP[*]} install --no-build-isolation '$spec'"
  exit 0
fi
echo "setup_gpu.sh: installing $spec (compiles the PyTorch extension: 10-40 min)"
"${PIP[@]}" install -q ninja pybind11
MAX_JOBS="${MAX_JOBS:-$(nproc)}" "${PIP[@]}" install --no-build-isolation "$spec"

# The same check the GPU suite makes first: TE imports with this torch, and a CUDA device is visible.
"$PY" - <<'CHECK' || exit 2
import sys
import torch
from harness.suite.adapters import gpu
from harness.errors import HarnessError
try:
    why_not = gpu.preflight()
except HarnessError as exc:  # TE installed and not importable: one line, not a traceback
    sys.exit("setup_gpu.sh: " + exc.one_line())
if why_not:
    sys.exit(f"setup_gpu.sh: error: {why_not}")
import transformer_engine
print(f"setup_gpu.sh: ok: transformer_engine {transformer_engine.__version__} imports with torch {torch.__version__} "
      f"on {torch.cuda.get_device_name(0)}")
CHECK
echo "setup_gpu.sh: done. Run: scripts/run_gpu_suite.sh"
