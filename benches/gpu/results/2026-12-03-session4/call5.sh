#!/usr/bin/env bash
# Session 4, call 5: main with the warm-up at two row counts per class (full and
# typical) and cuDNN/cuBLAS primed while the model loads.
# 1. gap.sh: 1,000,000 rows, 3 rounds of segpredict (TorchScript) and careful,
#    the CUDA package in round 1, now exported with channels-last weights
#    (built here; call 1's package if that build fails), --gpu-memory 6GiB
#    (TorchScript), the ceilings;
# 2. just test-gpu's tests with this build.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD
nvidia-smi -L; nproc; date -u
echo "== 1. gap.sh"
OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt MAKE_MODELS=$DEV/tools/make_models.py \
  AOTI_PACKAGE=/tmp/digits-seed.cuda.bf16.channels-last.pt2 PACKAGE_ARGS=--channels-last \
  FALLBACK_PACKAGE=$(realpath $DEV/models/digits-seed.cuda.bf16.pt2) BACKENDS="torchscript aoti" AOTI_ROUNDS=1 \
  PROFILE=0 EXTRA=0 ROUNDS=3 CEILING_ITERS=60 PACKAGE_CHECK=0 PYTHON_AOTI_CEILING=0 SPEED_BACKENDS=aoti \
  GPU_MEMORY=6GiB GPU_MEMORY_BACKENDS=torchscript timeout 470 bash $DEV/gpu/gap.sh 2>&1 | grep -v '^  <=' | tail -60
echo "== 2. GPU tests"; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 60 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -8
date -u
