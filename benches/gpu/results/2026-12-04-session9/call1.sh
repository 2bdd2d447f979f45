#!/usr/bin/env bash
# Session 9, call 1: `just test-gpu`'s tests (integration gpu -- --ignored)
# after the workspace split, the checkpoint over a Store and the worker's
# one recovery context, on the binaries built at this commit (carried in
# .device/bins.tar.xz, as in session 8).
# NOT RUN: no device machine was lent in session 9 ("no new device machine
# is lent at present"); the GPU tests have not run on this code.
set -uo pipefail
DEV=.device
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
tar -C $DEV -xJf $DEV/bins.tar.xz && mkdir -p $DEV/t && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD; nvidia-smi -L; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" && cp $DEV/segpredict "$ROOT/target/release/segpredict"
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 300 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -12
date -u
