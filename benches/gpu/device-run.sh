#!/usr/bin/env bash
# What one call of the device tool runs, from the repository root there, with
# the files it needs carried in DEV (default .device):
#   DEV/segpredict          stripped release binary
#   DEV/t/integration       stripped integration-test binary (cargo test --release --test integration --no-run)
#   DEV/gpu/                benches/gpu/*.sh, *.py, *.toml
#   DEV/tools/              tools/make_models.py, tools/digits_data.py
#   DEV/models/             digits-seed.pt, digits-seed.labels.txt
#
#   bash .device/gpu/device-run.sh check   # GPU tests, the CUDA package, --gpu-memory runs per backend
#   bash .device/gpu/device-run.sh bench   # ROUNDS rounds: segpredict per backend, careful plain PyTorch, ceilings
#   bash .device/gpu/device-run.sh all     # the GPU tests matching TESTS (default gpu), then bench with
#                                          # GPU_MEMORY for GPU_MEMORY_BACKENDS
# Both write to $OUT and share WORK (/tmp/segpredict-gap): on a machine still
# warm from `check`, `bench` reuses its data and package; on a fresh one it
# makes them again.
set -uo pipefail
STAGE=${1:?check or bench}
DEV=${DEV:-.device}
OUT=${OUT:?}
export PYTHONUNBUFFERED=1
TORCH_LIB=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB
chmod +x "$DEV/segpredict" "$DEV/t/integration" 2>/dev/null
ROOT=$PWD

gpu_tests() { # FILTER
  echo "== GPU tests (just test-gpu's: integration $1 -- --ignored)"
  # The test binary was built in BUILT (its CARGO_MANIFEST_DIR); it finds the
  # repository's sample data and the segpredict binary there, and Python with
  # numpy and pyarrow in VIRTUAL_ENV (here torch's own environment).
  BUILT=${BUILT:-/work/wt-gpu}
  if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
  mkdir -p "$ROOT/target/release" && cp "$DEV/segpredict" "$ROOT/target/release/segpredict"
  nvidia-smi -L
  VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 240 "$DEV/t/integration" "$1" --ignored --test-threads 1 2>&1 \
    | tee "$OUT/gpu-tests.log"
}
bench() {
  OUT=$OUT SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt MAKE_MODELS=$DEV/tools/make_models.py \
    BACKENDS="torchscript aoti" PROFILE=0 EXTRA=0 "$@" bash "$DEV/gpu/gap.sh"
}
case "$STAGE" in
check)
  gpu_tests gpu
  echo "== benchmark set-up and memory (gap.sh with ROUNDS=0)"
  bench env ROUNDS=0 GPU_MEMORY="${GPU_MEMORY:-6GiB}"
  cp /tmp/segpredict-gap/make-package.log "$OUT/" 2>/dev/null
  ;;
bench)
  bench env ROUNDS="${ROUNDS:-3}" GPU_MEMORY="${GPU_MEMORY:-}"
  ;;
all)
  gpu_tests "${TESTS:-gpu}"
  bench env ROUNDS="${ROUNDS:-3}" GPU_MEMORY="${GPU_MEMORY:-}" GPU_MEMORY_BACKENDS="${GPU_MEMORY_BACKENDS:-}"
  cp /tmp/segpredict-gap/make-package.log "$OUT/" 2>/dev/null
  ;;
*) echo "unknown stage $STAGE"; exit 2 ;;
esac
