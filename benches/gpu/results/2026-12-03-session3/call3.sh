#!/usr/bin/env bash
# Session 3, call 3: the gap benchmark of main (00efe76's binary): 1,000,000 rows,
# 3 alternating rounds of segpredict TorchScript, segpredict AOTInductor (the
# sync-free CUDA bf16 package built here) and the careful plain-PyTorch
# pipeline; the model alone per backend (Python for TorchScript, segpredict
# speed for both); --gpu-memory 6GiB; then just test-gpu's tests.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
TORCH_LIB=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD
nvidia-smi -L; nproc
OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt MAKE_MODELS=$DEV/tools/make_models.py \
  BACKENDS="torchscript aoti" PROFILE=0 EXTRA=0 ROUNDS=3 CEILING_ITERS=60 PACKAGE_CHECK=0 PYTHON_AOTI_CEILING=0 \
  GPU_MEMORY=6GiB GPU_MEMORY_BACKENDS=torchscript timeout 520 bash $DEV/gpu/gap.sh 2>&1 | tee "$OUT/gap-log.txt" | grep -v '^  <=' | tail -70
echo "== GPU tests"
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 60 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -8
