#!/usr/bin/env bash
# Session 11, call 2 (call 1 ran the GPU tests: 4 passed; its images step failed in encode_input.py, fixed),  at fdfea56 (binaries built here, carried in .device):
#  1. `just test-gpu`'s tests (integration gpu -- --ignored) on the workspace code
#     (issue 22: never run on it before).
#  2. benches/gpu/images.sh (issue 25): the seed-budget run on raw input, then on
#     the same rows as 32x32 JPEGs decoded on 4/8/12/15 decode threads.
#     Pillow (for encode_input.py) from a carried wheel: nothing is downloaded there.
set -uo pipefail
DEV=.device
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
tar -C $DEV -xJf $DEV/bins.tar.xz && mkdir -p $DEV/t && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD; nvidia-smi -L; date -u; nproc
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" && cp $DEV/segpredict "$ROOT/target/release/segpredict"
if [ -n "${GPU_TESTS:-}" ]; then echo "== GPU tests"
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 200 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -10
fi
date -u
echo "== images"
python3 -m pip install --no-index --no-deps --target /tmp/pil $DEV/wheels/pillow-*.whl -q 2>&1 | tail -2
export PYTHONPATH=/tmp/pil
python3 tools/make_models.py --only digits-seed 2>&1 | tail -2
OUT=$OUT/images SEGPREDICT=$DEV/segpredict ROWS=${ROWS:-100000} THREADS="4 8 12 15" timeout 330 bash benches/gpu/images.sh 2>&1 | tee "$OUT/images.log" | tail -20
date -u
