#!/usr/bin/env bash
# Pack what forward_gpu needs for an offline GPU machine (no package registry; 64 MiB carried a call,
# the workplace's `device` tool) into .gpu/ (git-ignored), next to scripts/offline_gpu_run.sh:
#   site.tar.xz    the distributions of this venv (MB, megatron-core, their imports) that the
#                  device image lacks; its torch, numpy, transformers ... are used as they are
#   tesite.tar.xz  Transformer Engine $TE_VERSION, python side (meta + core wheels, no jax)
#   libte.so.xz    TE's core library with every cubin but sm_$ARCH zeroed (scripts/prune_fatbin.py)
#   ext.so.xz      TE's torch extension (a C++-only sdist), compiled here against the device's torch
#                  ($DEVICE_TORCH from PyPI: same version, same ABI); the sdist and cudnn-frontend
#                  headers travel too, so the run can compile it there if this build does not import
#   mainsrc.tar.xz with MB_CLONE and MLM_CLONE set: MB's src/ at MB_CLONE's HEAD and the
#                  megatron/core of the Megatron-LM commit it pins (git archive of the user's clones)
# Takes ~20 min on 2 cores (the extension); ~45 MB in all. Run from the repo root after setup.sh.
# Env: DEVICE_TORCH (2.11.0), TE_VERSION (2.20.2), ARCH (90), MB_CLONE, MLM_CLONE.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
DEVICE_TORCH="${DEVICE_TORCH:-2.11.0}"
TE_VERSION="${TE_VERSION:-2.20.2}"
ARCH="${ARCH:-90}"
OUTDIR=$ROOT/.gpu
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUTDIR"
DL=("$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 -d "$WORK")

# The distributions the device image lacks (its package list in the device tool's KINDS.md, read
# 2026-11-17), minus video/solver/cloud extras no suite imports.
DISTS="aioitertools annotated-types antlr4-python3-runtime braceexpand bracex cffi datasets deprecation dill
filetype gitdb gitpython hydra-core jmespath jsonschema jsonschema-specifications lark megatron-bridge
megatron-core megatron-energon mfusepy multi-storage-client multiprocess nvidia-modelopt omegaconf
opentelemetry-api prettytable pulp pycparser pydantic pydantic-core pyroute2 qwen-vl-utils rapidyaml
referencing rpds-py smmap submitit typing-inspection tzdata wcmatch wcwidth webdataset xattr"
"$PY" - "$WORK/site.tar" $DISTS <<'EOF'
import importlib.metadata as md, sys, sysconfig, tarfile
from pathlib import Path
site = Path(sysconfig.get_paths()["purelib"])
skip = ("pulp/solverdir/cbc/osx", "pulp/solverdir/cbc/win", "pulp/solverdir/cbc/linux/arm64", "pulp/solverdir/cbc/linux/i32")
with tarfile.open(sys.argv[1], "w") as tar:
    for name in sys.argv[2:]:
        dist = md.distribution(name)
        for f in dist.files or []:
            p = Path(dist.locate_file(f)).resolve()
            rel = str(p.relative_to(site)) if site in p.parents else ""
            if rel and p.is_file() and "__pycache__" not in p.parts and not rel.startswith(skip):
                tar.add(p, arcname=rel)
EOF
xz -9 -T0 -c "$WORK/site.tar" >"$OUTDIR/site.tar.xz"

# Transformer Engine: python side, pruned core, torch extension.
"${DL[@]}" "transformer_engine==$TE_VERSION" "transformer_engine_cu13==$TE_VERSION" "nvidia-cudnn-frontend"
"$PY" -m pip download -q --no-deps --no-build-isolation --no-binary=:all: -d "$WORK" "transformer_engine_torch==$TE_VERSION"
mkdir -p "$WORK/te" "$WORK/fe"
(cd "$WORK/te" && unzip -q -o "$WORK"/transformer_engine-"$TE_VERSION"-py3-none-any.whl && unzip -q -o "$WORK"/transformer_engine_cu13-*.whl)
mv "$WORK/te/transformer_engine/wheel_lib/libtransformer_engine.so" "$WORK/libte.so"
rm -rf "$WORK/te/transformer_engine/jax"
tar cf - -C "$WORK/te" . | xz -9 -T0 >"$OUTDIR/tesite.tar.xz"
"$PY" scripts/prune_fatbin.py "$WORK/libte.so" "$ARCH"
xz -6 -T0 -c "$WORK/libte.so" >"$OUTDIR/libte.so.xz"
(cd "$WORK/fe" && unzip -q -o "$WORK"/nvidia_cudnn_frontend-*.whl 'include/*' && tar cf - include | xz -9 >"$OUTDIR/fe.tar.xz")
cp "$WORK/transformer_engine_torch-$TE_VERSION.tar.gz" "$OUTDIR/"

"${DL[@]}" "torch==$DEVICE_TORCH"
mkdir -p "$WORK/torch" && (cd "$WORK/torch" && unzip -q -o "$WORK"/torch-"$DEVICE_TORCH"-*.whl 'torch/*' 'torchgen/*')
NV=$("$PY" -c "import nvidia; print(':'.join(f'{p}/{d}/include' for p in nvidia.__path__ for d in ('cu13','cudnn','nccl')))")
(cd "$WORK" && tar xzf "transformer_engine_torch-$TE_VERSION.tar.gz" && cd "transformer_engine_torch-$TE_VERSION" \
  && CPATH="$NV:$WORK/fe/include" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" NVTE_CUDA_ARCHS="$ARCH" MAX_JOBS="$(nproc)" \
     PYTHONPATH="$WORK/torch" "$PY" setup.py build_ext -j"$(nproc)" --inplace >"$WORK/ext.log" 2>&1) \
  || { tail -20 "$WORK/ext.log"; echo "offline_gpu_bundle.sh: the extension did not build here; the run builds it there"; }
ext=$(ls "$WORK/transformer_engine_torch-$TE_VERSION"/transformer_engine_torch*.so 2>/dev/null || true)
rm -f "$OUTDIR/ext.so.xz"
[ -n "$ext" ] && xz -9 -c "$ext" >"$OUTDIR/ext.so.xz"

if [ -n "${MB_CLONE:-}" ] && [ -n "${MLM_CLONE:-}" ]; then
  pin=$(git -C "$MB_CLONE" ls-tree HEAD 3rdparty/Megatron-LM | awk '{print $3}')
  mkdir -p "$WORK/main/mlm"
  git -C "$MB_CLONE" archive HEAD src/megatron | tar x -C "$WORK/main"
  git -C "$MLM_CLONE" archive "$pin" megatron/core | tar x -C "$WORK/main/mlm"
  tar cf - -C "$WORK/main" src mlm | xz -9 -T0 >"$OUTDIR/mainsrc.tar.xz"
  echo "MB $(git -C "$MB_CLONE" rev-parse --short HEAD) pins Megatron-LM ${pin:0:9}" >"$OUTDIR/mainsrc.txt"
fi
du -sh "$OUTDIR"
