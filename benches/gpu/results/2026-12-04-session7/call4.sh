#!/usr/bin/env bash
# Session 7, call 4: the gap account again on a second machine start, with
# CUDA's own start-up measured on the same machine first (startup_floor.py,
# 3 processes) and segpredict's debug timeline in every round, so the
# start-up term splits into CUDA's floor and segpredict's own steps. Same
# binary and package as call 3; no --gpu-memory run.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && chmod +x $DEV/segpredict
cp $DEV/pkg.pt2 /tmp/digits-seed.cuda.bf16.pt2
nvidia-smi -L; nproc; date -u
echo "== CUDA's own start-up (Python, 3 processes)"
for i in 1 2 3; do python3 $DEV/gpu/startup_floor.py; done | tee $OUT/floor.txt
SEGPREDICT_LOG=segpredict=debug OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt MAKE_MODELS=$DEV/tools/make_models.py \
  AOTI_PACKAGE=/tmp/digits-seed.cuda.bf16.pt2 POOLINGS=scan \
  BACKENDS="aoti" ROUNDS=3 PROFILE=0 EXTRA=0 CEILING_ITERS=60 SUSTAIN=1500 \
  PACKAGE_CHECK=0 PYTHON_AOTI_CEILING=0 SPEED_BACKENDS=aoti \
  timeout 480 bash $DEV/gpu/gap.sh 2>&1 | grep -v '^  <=' | tail -48
echo "== start-up timelines"
for r in 1 2 3; do echo "-- round $r"; tar -xzOf $OUT/gap/runs.tar.gz ./segpredict-aoti-$r.log 2>/dev/null | grep -E "DEBUG|INFO" | grep -v progress | head -11 | cut -c1-190; done
date -u
