#!/usr/bin/env bash
# On an offline GPU machine (the workplace's `device` tool: `bash scripts/offline_gpu_run.sh` with
# carry [".gpu"], made by scripts/offline_gpu_bundle.sh): assemble the installed MB, megatron-core
# and Transformer Engine over the image's torch under /tmp/site, then run forward_gpu + forward_cpu
# with --require-gpu at the installed MB, and, when .gpu/mainsrc.tar.xz is there, at MB main (its
# src/ and the megatron/core it pins, first on PYTHONPATH). Logs, results.json and report.html of
# each run are written to $OUT (8 files at most come back).
set -u -o pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
G=$PWD/.gpu
S=/tmp/site
L=$OUT/setup.log
mkdir -p $S /tmp/main
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch,sys; print(sys.executable, sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
xz -dc $G/site.tar.xz | tar x -C $S
xz -dc $G/tesite.tar.xz | tar x -C $S
xz -dc $G/libte.so.xz > $S/transformer_engine/wheel_lib/libtransformer_engine.so
[ -f $G/ext.so.xz ] && xz -dc $G/ext.so.xz > $S/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so
[ -f $G/mainsrc.tar.xz ] && xz -dc $G/mainsrc.tar.xz | tar x -C /tmp/main
echo "assembled at $(el) s"
} > $L 2>&1
export PYTHONPATH=$S:$PWD PYTHONUNBUFFERED=1
check() {
  python3 - <<'EOF'
import torch, transformer_engine, transformer_engine.pytorch as te
print("TE", transformer_engine.__version__, "imports with torch", torch.__version__)
from harness.suite.adapters import gpu
print("preflight:", gpu.preflight())
EOF
}
if ! check >> $L 2>&1; then
  echo "prebuilt extension did not import; building it here (sm_90) at $(el) s" >> $L
  rm -f $S/transformer_engine_torch*.so
  (
    set -e
    mkdir -p /tmp/b && cd /tmp/b && tar xzf $G/transformer_engine_torch-2.20.2.tar.gz && xz -dc $G/fe.tar.xz | tar x
    NV=$(python3 -c "import nvidia; print(':'.join(p + '/' + d + '/include' for p in nvidia.__path__ for d in ('cu13','cudnn','nccl')))")
    cd transformer_engine_torch-2.20.2
    CPATH=$NV:/tmp/b/include CUDA_HOME=/usr/local/cuda NVTE_CUDA_ARCHS=90 MAX_JOBS=16 \
      python3 setup.py build_ext -j16 --inplace 2>&1 | tail -20
    cp transformer_engine_torch*.so $S/
  ) >> $L 2>&1
  echo "built at $(el) s" >> $L
  check >> $L 2>&1 || { echo "TE still does not import" >> $L; }
fi
echo "TE ready at $(el) s" >> $L
cat $L
run() {  # name, seconds, extra PYTHONPATH prefix
  local name=$1 secs=$2 pre=$3
  PYTHONPATH=$pre$S:$PWD timeout $secs python3 -m harness run --suite forward_gpu --suite forward_cpu \
    --require-gpu -j 6 --out /tmp/r-$name > $OUT/run-$name.log 2>&1
  echo "run $name: rc=$? at $(el) s"
  cp /tmp/r-$name/results.json $OUT/results-$name.json 2>/dev/null
  cp /tmp/r-$name/report.html $OUT/report-$name.html 2>/dev/null
  tail -25 $OUT/run-$name.log
}
run installed 260 ""
left=$(( 520 - $(el) ))
if [ ! -d /tmp/main/src ]; then echo "no MB main in .gpu"; elif [ $left -gt 60 ]; then run main $left "/tmp/main/src:/tmp/main/mlm:"; else echo "no time left for main"; fi
