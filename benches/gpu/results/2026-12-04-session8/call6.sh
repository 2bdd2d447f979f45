#!/usr/bin/env bash
# Session 8, call 6: priming cuDNN and cuBLAS on a second thread while the
# package's checking copy loads (as TorchScript models already were), against
# 51a3164 (seg-main), alternating, 6 rounds each on 200,000 rows; time to
# first batch and model ready from each run's report. Then 10 more starts of
# the primed binary on 20,000 rows, looking for crashes (concurrent package
# loads crashed in session 7; this is one load beside plain ATen work), and
# just test-gpu's tests on the primed binary.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/seg-main $DEV/t/integration
ROOT=$PWD; nvidia-smi -L; date -u
W=/tmp/s8; mkdir -p $W $OUT/logs
python3 benches/gpu/make_data.py --rows 200000 --out $W/input.parquet > /dev/null
python3 benches/gpu/make_data.py --rows 20000 --out $W/small.parquet > /dev/null
sed -e "s|^path = .*pt\"|path = \"$PWD/$DEV/pkg.pt2\"|" -e "s|^labels = .*|labels = \"$PWD/$DEV/models/digits-seed.labels.txt\"|" \
  benches/gpu/seed-budget.toml > $W/aoti.toml
run() { # NAME BIN INPUT
  SEGPREDICT_LOG=segpredict=debug $DEV/$2 run $W/aoti.toml --input $W/$3 --output $W/out-$1 --overwrite > $OUT/logs/$1.log 2>&1
  local rc=$?
  python3 -c "
import json; r=json.load(open('$W/out-$1/_report.json'))
print('$1 rc=$rc', *(f'{k}={round(r[k],4)}' for k in ['time_to_first_batch_s','model_ready_s','wall_s','segments_per_s']), 'rows_out', r.get('rows_out'))" 2>/dev/null || echo "$1 rc=$rc (no report)"
}
run warm-main seg-main small.parquet > /dev/null; run warm-primed segpredict small.parquet > /dev/null
for i in 1 2 3 4 5 6; do run main-$i seg-main input.parquet; run primed-$i segpredict input.parquet; done | tee $OUT/runs.txt
python3 - $OUT/runs.txt <<'PY'
import re, statistics, sys
rows = [dict(re.findall(r"(\w+)=([\d.]+)", l), name=l.split()[0]) for l in open(sys.argv[1]) if "=" in l]
for kind in ("main", "primed"):
    rs = [r for r in rows if r["name"].startswith(kind)]
    for key in ("time_to_first_batch_s", "model_ready_s"):
        v = sorted(float(r[key]) for r in rs if key in r)
        print(f"{kind} {key}: median {statistics.median(v):.3f} (min {v[0]:.3f}, max {v[-1]:.3f}, n {len(v)})")
PY
echo "== timelines, round 1"
for n in main-1 primed-1; do echo "-- $n"; grep -E "DEBUG" $OUT/logs/$n.log | grep -iE "prim|package|device|probe|warm|loaded" | head -8 | cut -c1-200; done
echo "== 10 more starts of the primed binary (20,000 rows)"
for i in $(seq 10); do run crash-$i segpredict small.parquet; done | tee $OUT/starts.txt | awk '{print $2}' | sort | uniq -c
echo "== GPU tests"
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 90 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -3
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
date -u
