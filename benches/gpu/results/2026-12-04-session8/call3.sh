#!/usr/bin/env bash
# Session 8, call 3: a fresh machine start for a second account, now with the
# package alone over two streams (`segpredict speed --streams 2`, new this
# session). Before the rounds (call 4 reuses WORK on this machine start): the
# 2,000,000-row data, a short check that two streams run, CUDA's floor, and
# just test-gpu's tests (the new two-stream test among them).
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
mkdir -p /tmp/segpredict-gap && cp $DEV/pkg.pt2 /tmp/segpredict-gap/digits-seed.cuda.bf16.pt2
ROOT=$PWD; nvidia-smi -L; nproc; date -u
OUT=$OUT/prep SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt ROWS=2000000 ROUNDS=0 \
  BACKENDS="aoti" PROFILE=0 EXTRA=0 timeout 300 bash benches/gpu/gap.sh > /tmp/prep.log 2>&1; tail -8 /tmp/prep.log
echo "== the package alone, 1 and 2 streams, 300 batches each"
for s in 1 2 1 2; do $DEV/segpredict speed /tmp/segpredict-gap/seed-budget-aoti.toml --segments 16384 --rows 400 --batches 300 \
  --input /tmp/segpredict-gap/input.parquet --streams $s 2>&1 | tail -1; done | tee $OUT/streams.txt
echo "== CUDA's floor"
for i in 1 2 3; do python3 benches/gpu/startup_floor.py; done | tee $OUT/floor.txt
echo "== GPU tests"; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 90 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -4
date -u
