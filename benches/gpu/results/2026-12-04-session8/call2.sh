#!/usr/bin/env bash
# Session 8, call 2 (the machine start of call 1, its data and package in
# WORK): gap.sh on 2,000,000 rows, 3 rounds of segpredict with the package
# and the careful plain-PyTorch pipeline, alternating; then the ceilings:
# short (40 batches) at every size class, and sustained at the budget's
# shape on the input's own segments: the package 4,000 batches (about 0.8 of
# a run), TorchScript 1,000 (one and two streams; to fit the call).
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
tar -C $DEV -xJf $DEV/bins.tar.xz segpredict && chmod +x $DEV/segpredict
nvidia-smi -L; date -u
# A fresh machine (call 1's gone): the package is not rebuilt, the data is made again.
[ -s /tmp/segpredict-gap/digits-seed.cuda.bf16.pt2 ] || { echo "!! not call 1's machine"; mkdir -p /tmp/segpredict-gap; cp $DEV/pkg.pt2 /tmp/segpredict-gap/digits-seed.cuda.bf16.pt2; }
ls -la /tmp/segpredict-gap
OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt ROWS=2000000 ROUNDS=3 \
  BACKENDS="aoti" PROFILE=0 EXTRA=0 CEILING_ITERS=40 SUSTAIN=4000 SUSTAIN_TS=1000 PYTHON_AOTI_CEILING=0 \
  timeout 585 bash benches/gpu/gap.sh 2>&1 | grep -v '^  <=' | tail -70
date -u
