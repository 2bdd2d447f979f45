#!/usr/bin/env bash
# Session 7, call 1: where the package's 0.83 s of start-up goes, and whether
# loading the package's two copies at once (B) beats one after the other (A,
# main at cd7e65a), and whether priming cuDNN/cuBLAS on a third thread while
# they load (C = B + priming) adds to it. Builds the scan-pooling CUDA package (kept in $OUT for
# the next call), times CUDA's own start-up steps from Python, then runs A and
# B and C alternately on 50,000 rows with debug logs (their timestamps are the
# timeline), 4 rounds each.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
tar -C $DEV -xJf $DEV/bins.tar.xz && chmod +x $DEV/seg-A $DEV/seg-B $DEV/seg-C
nvidia-smi -L; nproc; date -u
W=/tmp/s7; mkdir -p $W $OUT/logs
( python3 $DEV/gpu/make_data.py --rows 50000 --out $W/input.parquet > $W/data.log 2>&1 ) &
DATA=$!
t0=$(date +%s.%N)
python3 -X faulthandler $DEV/tools/make_models.py --aoti --only digits-seed --device cuda --dtype bf16 --pooling scan \
  --out $W/pkg.pt2 --no-check > $OUT/logs/make-package.log 2>&1 || { echo "!! package build failed"; tail -20 $OUT/logs/make-package.log; }
echo "package built in $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s"; ls -la $W/pkg.pt2 && cp $W/pkg.pt2 $OUT/digits-seed.cuda.bf16.scan.pt2
wait $DATA
echo "== CUDA's own start-up (Python, 3 processes)"
for i in 1 2 3; do python3 $DEV/gpu/startup_floor.py; done | tee $OUT/logs/floor.txt
sed -e "s|^path = .*pt\"|path = \"$W/pkg.pt2\"|" -e "s|^labels = .*|labels = \"$PWD/$DEV/models/digits-seed.labels.txt\"|" \
  $DEV/gpu/seed-budget.toml > $W/aoti.toml
sed -e "s|^path = .*pt\"|path = \"$PWD/$DEV/models/digits-seed.pt\"|" -e "s|^labels = .*|labels = \"$PWD/$DEV/models/digits-seed.labels.txt\"|" \
  $DEV/gpu/seed-budget.toml > $W/ts.toml
grep -n "^path\|^labels" $W/aoti.toml
run() { # BIN CONFIG NAME
  local t0 t1; t0=$(date +%s.%N)
  SEGPREDICT_LOG=segpredict=debug $DEV/$1 run $W/$2 --input $W/input.parquet --output $W/out-$3 --overwrite > $OUT/logs/$3.log 2>&1
  local rc=$?; t1=$(date +%s.%N)
  python3 - "$W/out-$3/_report.json" "$3" "$t0" "$t1" "$rc" <<'PY'
import json, sys
path, name, t0, t1, rc = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"{name}: rc {rc}, no report ({e})"); sys.exit()
keys = ["time_to_first_batch_s", "model_ready_s", "warm_up_s", "wall_s", "segments_per_s"]
print(f"{name}: rc {rc} process {float(t1)-float(t0):.3f} " + " ".join(f"{k}={r.get(k) if not isinstance(r.get(k), float) else round(r.get(k), 4)}" for k in keys))
PY
}
echo "== untimed warm runs"; run seg-A aoti.toml warm-A >/dev/null; run seg-B aoti.toml warm-B > /dev/null; run seg-C aoti.toml warm-C > /dev/null; run seg-A ts.toml warm-ts
echo "== A/B/C, package"
for i in 1 2 3 4; do run seg-A aoti.toml A$i; run seg-B aoti.toml B$i; run seg-C aoti.toml C$i; done | tee $OUT/logs/ab.txt
echo "== TorchScript (A), 2"
for i in 1 2; do run seg-A ts.toml ts$i; done | tee -a $OUT/logs/ab.txt
echo "== timelines (debug lines of A1, B1, C1)"
for n in A1 B1 C1 ts1; do echo "-- $n"; grep -E "DEBUG|INFO" $OUT/logs/$n.log | grep -v progress | head -30 | cut -c1-220; done
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
date -u
