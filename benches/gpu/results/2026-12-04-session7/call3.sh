#!/usr/bin/env bash
# Session 7, call 3: the gap account on main (cd7e65a plus a debug line that
# times the read plan). gap.sh: 1,000,000 rows; the scan-pooling CUDA package
# from call 1 (carried); 3 rounds of segpredict (package) and careful plain
# PyTorch, TorchScript in round 1; --gpu-memory 6GiB (package); ceilings short
# (60 batches) and sustained (1,500 batches on the input's segments); then
# just test-gpu's tests.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
cp $DEV/pkg.pt2 /tmp/digits-seed.cuda.bf16.pt2
ROOT=$PWD; nvidia-smi -L; nproc; date -u
OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt MAKE_MODELS=$DEV/tools/make_models.py \
  AOTI_PACKAGE=/tmp/digits-seed.cuda.bf16.pt2 POOLINGS=scan \
  BACKENDS="torchscript aoti" TS_ROUNDS=1 ROUNDS=3 PROFILE=0 EXTRA=0 CEILING_ITERS=60 SUSTAIN=1500 MEMORY_ROWS=100000 \
  PACKAGE_CHECK=0 PYTHON_AOTI_CEILING=0 SPEED_BACKENDS=aoti GPU_MEMORY=6GiB GPU_MEMORY_BACKENDS=aoti \
  timeout 480 bash $DEV/gpu/gap.sh 2>&1 | grep -v '^  <=' | tail -75
echo "== GPU tests"; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 60 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -4
date -u
