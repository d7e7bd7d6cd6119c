#!/usr/bin/env bash
# Create .venv with Python 3.12, install the harness and a real Megatron-Bridge (CPU-only).
#
# Why --no-deps for megatron-bridge: its declared dependencies include CUDA-only packages
# (transformer-engine, mamba-ssm, causal-conv1d, ...) that cannot build on a CPU machine.
# requirements/mb-0.6.2.txt lists what MB really needs at import time on CPU.
#
# Idempotent: a second run reuses .venv and only installs what is missing.
# Environment: HARNESS_VENV (default .venv), HARNESS_PYTHON (a Python 3.12 interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HARNESS_VENV:-.venv}"

. scripts/find_python.sh

if [ ! -x "$VENV/bin/python" ]; then
  PY="$(find_python 3.12 "${HARNESS_PYTHON:-}")" || { echo "setup.sh: error: needs Python 3.12 on PATH (python3.12) or through pyenv (pyenv install 3.12); set HARNESS_PYTHON to its path" >&2; exit 2; }
  echo "setup.sh: creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
echo "setup.sh: installing the Megatron-Bridge environment (first time: about 5 minutes, 5.7 GB)"
"${PIP[@]}" install -q -r requirements/mb-0.6.2.txt -r requirements/harness.txt
"${PIP[@]}" install -q --no-deps -r requirements/mb-pin.txt
"${PIP[@]}" install -q --no-deps -e .
echo "setup.sh: done. Run: $VENV/bin/harness run"
