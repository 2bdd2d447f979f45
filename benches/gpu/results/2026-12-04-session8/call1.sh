#!/usr/bin/env bash
# Session 8, call 1: what comes before the rounds, on the machine start that
# call 2 reuses (same WORK): 2,000,000 rows from make_data.py (the criterion
# says at least 1,000,000; at 1,000,000 CUDA's own start-up is 2% of a run),
# the --gpu-memory 6GiB run with the scan-pooling CUDA package (carried, built
# in session 7); then CUDA's start-up floor (3 processes) and just test-gpu's tests.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
mkdir -p /tmp/segpredict-gap && cp $DEV/pkg.pt2 /tmp/segpredict-gap/digits-seed.cuda.bf16.pt2
ROOT=$PWD; nvidia-smi -L; nproc; date -u
( OUT=$OUT/prep SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt ROWS=2000000 ROUNDS=0 \
  BACKENDS="aoti" PROFILE=0 EXTRA=0 MEMORY_ROWS=100000 GPU_MEMORY=6GiB GPU_MEMORY_BACKENDS=aoti \
  timeout 400 bash benches/gpu/gap.sh > /tmp/prep.log 2>&1 ); tail -20 /tmp/prep.log
echo "== CUDA's floor (after the above, the device otherwise idle)"
for i in 1 2 3; do python3 benches/gpu/startup_floor.py; done | tee $OUT/floor.txt
echo "== GPU tests"; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 90 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -4
ls -la /tmp/segpredict-gap; date -u
