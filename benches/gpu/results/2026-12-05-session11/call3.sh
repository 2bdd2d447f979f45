#!/usr/bin/env bash
# Session 11, call 3, at fdfea56: call 2 again with the reader threads cut
# from 8 to 2 (the JPEG input is 9 MB: its Parquet decoding is light), so
# the decode pool's 14 and 16 threads have the 16 cores to themselves.
set -uo pipefail
DEV=.device
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
[ -x $DEV/segpredict ] || { tar -C $DEV -xJf $DEV/bins.tar.xz && chmod +x $DEV/segpredict; }
nproc; date -u
python3 -m pip install --no-index --no-deps --target /tmp/pil $DEV/wheels/pillow-*.whl -q 2>&1 | tail -1
export PYTHONPATH=/tmp/pil
[ -f models/digits-seed.pt ] || python3 tools/make_models.py --only digits-seed 2>&1 | tail -1
sed -i 's/^threads = 8$/threads = 2/' benches/gpu/seed-budget-jpeg.toml
grep -n "^threads" benches/gpu/seed-budget-jpeg.toml
OUT=$OUT/images SEGPREDICT=$DEV/segpredict ROWS=100000 THREADS="14 16" timeout 300 bash benches/gpu/images.sh 2>&1 | tee "$OUT/images.log" | tail -8
date -u
