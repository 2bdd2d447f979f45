#!/usr/bin/env bash
# Session 7, call 2: what the warm-up buys and costs on 1,000,000 rows with
# the scan-pooling CUDA package (built in call 1, carried). Call 1 showed the
# warm-up is the one start-up step above CUDA's own floor (0.09-0.14 s of
# 0.66-0.88 s). One experimental binary (main + a "planned" debug line + an
# env switch, SEGPREDICT_WARM, not committed) runs four warm-ups, round-robin,
# 2 rounds: all classes full+typical (main), full only, the largest class
# only, none (`warm_size_classes = false`). Per run: wall, start-up, warm-up,
# growth events after warm-up, peak reserved.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
tar -C $DEV -xJf $DEV/bins.tar.xz && chmod +x $DEV/seg-X
nvidia-smi -L; date -u
W=/tmp/s7; mkdir -p $W $OUT/logs
t0=$(date +%s); python3 $DEV/gpu/make_data.py --rows 1000000 --out $W/input.parquet > $W/data.log 2>&1; echo "data in $(( $(date +%s) - t0 )) s"
sed -e "s|^path = .*pt\"|path = \"$PWD/$DEV/pkg.pt2\"|" -e "s|^labels = .*|labels = \"$PWD/$DEV/models/digits-seed.labels.txt\"|" \
  $DEV/gpu/seed-budget.toml > $W/aoti.toml
sed -e 's|^dtype = "bf16"|dtype = "bf16"\nwarm_size_classes = false|' $W/aoti.toml > $W/aoti-nowarm.toml
grep -n "^path\|warm_size" $W/aoti*.toml
run() { # NAME WARM CONFIG
  local t0 t1; t0=$(date +%s.%N)
  SEGPREDICT_WARM=$2 SEGPREDICT_LOG=segpredict=debug $DEV/seg-X run $W/$3 --input $W/input.parquet --output $W/out-$1 --overwrite > $OUT/logs/$1.log 2>&1
  local rc=$?; t1=$(date +%s.%N)
  python3 - "$W/out-$1/_report.json" "$1" "$t0" "$t1" "$rc" <<'PY'
import json, sys
path, name, t0, t1, rc = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"{name}: rc {rc}, no report ({e})"); sys.exit()
flat = {}
def walk(p, v):
    if isinstance(v, dict):
        for k, x in v.items(): walk(f"{p}{k}.", x)
    else: flat[p[:-1]] = v
walk("", r)
want = ["wall_s", "model_ready_s", "time_to_first_batch_s", "warm_up_s", "segments_per_s", "growth", "peak_reserved", "batches"]
keys = [k for k in flat if any(w in k for w in want) and not isinstance(flat[k], list)]
fmt = lambda v: round(v, 4) if isinstance(v, float) else v
print(f"{name}: rc {rc} process {float(t1)-float(t0):.3f} " + " ".join(f"{k}={fmt(flat[k])}" for k in keys))
PY
}
run warm-up-run all aoti.toml > /dev/null
for i in 1 2; do
  run all-$i all aoti.toml; run full-$i full aoti.toml; run largest-$i largest aoti.toml; run none-$i none aoti-nowarm.toml
done | tee $OUT/logs/warm.txt
echo "== start-up timelines (round 1)"
for n in all-1 full-1 largest-1 none-1; do echo "-- $n"; grep -E "DEBUG|INFO" $OUT/logs/$n.log | grep -v progress | head -12 | cut -c1-200; done
echo "== reserved growth, largest-1 and none-1"; grep -h -i "grew\|growth" $OUT/logs/largest-1.log $OUT/logs/none-1.log | head -10 | cut -c1-200
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
date -u
