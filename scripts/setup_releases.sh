#!/usr/bin/env bash
# Install older Megatron-Bridge releases beside the main environment, for tests/test_releases.py.
#
#   .releases/mb-0.5.1, .releases/mb-0.4.0   pip --target dirs used with the main .venv (megatron-core
#                                            0.19.2 imports both); give them to `harness run --mb-src`.
#   .releases/venv-0.3.1                     a Python 3.11 venv: megatron-core 0.16.1, transformers 4.x,
#                                            MB 0.3.1 and the harness itself (editable).
#
# Why --no-deps: MB declares CUDA-only dependencies (transformer-engine, mamba-ssm, ...) that
# cannot build on CPU; the lists below are what MB really needs at import time (see
# /work/shared/ENVIRONMENT.md). Idempotent: a release already installed is skipped.
# Environment: HARNESS_VENV (default .venv), HARNESS_PYTHON311 (a Python 3.11 interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HARNESS_VENV:-.venv}"
REL=.releases
mkdir -p "$REL"
[ -x "$VENV/bin/python" ] || { echo "setup_releases.sh: error: $VENV missing; run scripts/setup.sh first" >&2; exit 2; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

for v in 0.5.1 0.4.0; do
  dest="$REL/mb-$v"
  if [ -f "$dest/megatron/bridge/package_info.py" ]; then
    echo "setup_releases.sh: MB $v already in $dest"
  else
    echo "setup_releases.sh: installing MB $v into $dest"
    rm -rf "$dest.tmp"
    "${PIP[@]}" install -q --no-deps --target "$dest.tmp" "megatron-bridge==$v"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
  fi
done

. scripts/find_python.sh

V311="$REL/venv-0.3.1"
# the harness's own editable install: its pytest11 entry point must name the plugin of this checkout
ENTRY='import importlib.metadata as m, importlib; [importlib.import_module(e.value) for e in m.entry_points(group="pytest11") if e.name.startswith("harness")]'
if [ -x "$V311/bin/python" ] && "$V311/bin/python" -c 'import megatron.bridge.package_info as p, harness; assert (p.MAJOR, p.MINOR, p.PATCH) == (0, 3, 1) or p.__version__.startswith("0.3.1")' 2>/dev/null; then
  echo "setup_releases.sh: MB 0.3.1 venv already in $V311"
  if ! "$V311/bin/python" -c "$ENTRY" 2>/dev/null; then
    echo "setup_releases.sh: refreshing the harness's editable install in $V311 (its plugin moved)"
    "$V311/bin/python" -m pip --disable-pip-version-check install -q --no-deps -e .
  fi
  if ! "$V311/bin/python" -c 'import hypothesis' 2>/dev/null; then  # the explore suite (issue 25)
    echo "setup_releases.sh: adding hypothesis to $V311"
    "$V311/bin/python" -m pip --disable-pip-version-check install -q "hypothesis>=6.100"
  fi
else
  PY="$(find_python 3.11 "${HARNESS_PYTHON311:-}")" || { echo "setup_releases.sh: error: MB 0.3.1 needs Python 3.11 (python3.11 on PATH or pyenv); set HARNESS_PYTHON311" >&2; exit 2; }
  echo "setup_releases.sh: creating $V311 with $PY (first time: about 3 minutes, 2.8 GB)"
  [ -x "$V311/bin/python" ] || "$PY" -m venv "$V311"
  P311=("$V311/bin/python" -m pip --disable-pip-version-check)
  "${P311[@]}" install -q --upgrade pip
  # huggingface-hub<1.0: otherwise datasets upgrades it and transformers 4.x refuses to import;
  # triton: megatron-core 0.16.1's mamba mixer import; nvidia-modelopt: gpt_step imports it unguarded.
  "${P311[@]}" install -q "torch==2.13.0" "megatron-core==0.16.1" "transformers>=4.57,<5" "huggingface-hub<1.0" \
    datasets omegaconf einops triton tensorboard nvidia-modelopt rich six megatron-energon sentencepiece
  "${P311[@]}" install -q --no-deps "megatron-bridge==0.3.1"
  "${P311[@]}" install -q pytest pytest-xdist GitPython pandas pyarrow jinja2 numpy "hypothesis>=6.100"
  "${P311[@]}" install -q --no-deps -e .
fi
echo "setup_releases.sh: done. Run: $VENV/bin/python -m pytest -m slow tests/test_releases.py"
