#!/usr/bin/env bash
# Session 8, call 4 (call 3's machine start, its data and package in WORK):
# gap.sh on 2,000,000 rows, 3 rounds of segpredict with the package and the
# careful plain-PyTorch pipeline, alternating; then the ceilings: short (30
# batches) at every size class, sustained at the budget's shape on the
# input's own segments: the package 3,000 batches (0.6 of a run) over one
# and over two streams, TorchScript 600 (one and two streams; to fit the call).
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
tar -C $DEV -xJf $DEV/bins.tar.xz segpredict && chmod +x $DEV/segpredict
nvidia-smi -L; date -u
[ -s /tmp/segpredict-gap/input.parquet ] || echo "!! not call 3's machine: the data is made again"
[ -s /tmp/segpredict-gap/digits-seed.cuda.bf16.pt2 ] || { mkdir -p /tmp/segpredict-gap; cp $DEV/pkg.pt2 /tmp/segpredict-gap/digits-seed.cuda.bf16.pt2; }
OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt ROWS=2000000 ROUNDS=3 \
  BACKENDS="aoti" PROFILE=0 EXTRA=0 CEILING_ITERS=30 SUSTAIN=3000 SUSTAIN_TS=600 PYTHON_AOTI_CEILING=0 \
  timeout 590 bash benches/gpu/gap.sh 2>&1 | grep -v '^  <=' | tail -60
date -u
