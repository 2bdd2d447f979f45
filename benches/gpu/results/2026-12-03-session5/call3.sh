#!/usr/bin/env bash
# Session 5, call 3: the gap account with the CUDA package in every round.
# gap.sh: 1,000,000 rows; packages built with index_put and with scan pooling,
# the faster on the input's segments measured; 3 rounds of segpredict (package)
# and careful, TorchScript in round 1; --gpu-memory 6GiB (package); ceilings
# short (60 batches) and sustained (1,500 batches on the input's segments);
# nvidia-smi clocks and power throughout.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
nvidia-smi -L; nproc; date -u
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt MAKE_MODELS=$DEV/tools/make_models.py \
  AOTI_PACKAGE=/tmp/digits-seed.cuda.bf16.pt2 POOLINGS="index_put scan" FALLBACK_PACKAGE=$(realpath $DEV/models/a.pt2) \
  BACKENDS="torchscript aoti" TS_ROUNDS=1 ROUNDS=3 PROFILE=0 EXTRA=0 CEILING_ITERS=60 SUSTAIN=1500 \
  PACKAGE_CHECK=0 PYTHON_AOTI_CEILING=0 SPEED_BACKENDS=aoti GPU_MEMORY=6GiB GPU_MEMORY_BACKENDS=aoti \
  timeout 575 bash $DEV/gpu/gap.sh 2>&1 | grep -v '^  <=' | tail -75
kill $SMI; date -u
