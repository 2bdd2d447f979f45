#!/usr/bin/env bash
# Session 5, call 4: main's start-up (cuDNN/cuBLAS primed while a package loads too) and
# the CUDA package exported with a segment bound (64-bit-safe indices; segpredict keeps batches
# within it). gap.sh: 1,000,000 rows; the scan-pooling package (built here, make_models.py's
# CUDA default); 3 rounds of segpredict (package) and careful; --gpu-memory 6GiB with the
# package (it died of 32-bit index overflow in call 3); ceilings short and sustained (1,000
# batches on the input's segments); then just test-gpu's tests.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD; nvidia-smi -L; date -u
OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt MAKE_MODELS=$DEV/tools/make_models.py \
  AOTI_PACKAGE=/tmp/digits-seed.cuda.bf16.pt2 POOLINGS=scan \
  BACKENDS="aoti" ROUNDS=3 PROFILE=0 EXTRA=0 CEILING_ITERS=40 SUSTAIN=1000 MEMORY_ROWS=100000 \
  PACKAGE_CHECK=0 PYTHON_AOTI_CEILING=0 SPEED_BACKENDS=aoti GPU_MEMORY=6GiB GPU_MEMORY_BACKENDS=aoti \
  timeout 380 bash $DEV/gpu/gap.sh 2>&1 | grep -v '^  <=' | tail -42
unzip -p /tmp/digits-seed.cuda.bf16.pt2 '*metadata*' 2>/dev/null | tr '\0' ' ' | grep -o 'segpredict[^ ]*' | head -3
grep -h "calibrated\|segments/s\|budget\|error\|Error" /tmp/segpredict-gap/gpumem/*.log 2>/dev/null | head -5
echo "== GPU tests"; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 50 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -4
date -u
