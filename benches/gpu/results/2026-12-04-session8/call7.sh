#!/usr/bin/env bash
# Session 8, call 7: the GPU tests (just test-gpu's, the
# two-stream one among them) after `speed --streams` waits for each pool
# stream with c10::Stream::synchronize, and the package alone over
# one and two streams, 300 batches each, alternating.
set -uo pipefail
DEV=.device
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD; nvidia-smi -L; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 90 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -8
sed -e "s|^path = .*pt\"|path = \"$PWD/$DEV/pkg.pt2\"|" -e "s|^labels = .*|labels = \"$PWD/$DEV/models/digits-seed.labels.txt\"|" \
  benches/gpu/seed-budget.toml > /tmp/aoti.toml
for s in 1 2 1 2; do $DEV/segpredict speed /tmp/aoti.toml --segments 16384 --rows 400 --batches 300 --streams $s 2>&1 | tail -1; done | tee $OUT/streams.txt
date -u
