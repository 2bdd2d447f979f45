#!/usr/bin/env bash
# Session 7, call 5: how far start-up work that segpredict owns could go. A
# prototype binary (not committed: main plus SEGPREDICT_LEAN=1, which loads
# one copy of the package and probes it without AOTInductor's input checks)
# runs with `warm_size_classes = false`, against main, alternating, 3 rounds
# each on 1,000,000 rows; then the package alone sustained (1,500 batches of
# the input's segments at 16,384) for the ratio; CUDA's floor first.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
tar -C $DEV -xJf $DEV/bins.tar.xz && chmod +x $DEV/segpredict $DEV/seg-L
nvidia-smi -L; date -u
W=/tmp/s7; mkdir -p $W $OUT/logs
( python3 $DEV/gpu/make_data.py --rows 1000000 --out $W/input.parquet > $W/data.log 2>&1 ) & DATA=$!
for i in 1 2 3; do python3 $DEV/gpu/startup_floor.py; done | tee $OUT/logs/floor.txt
wait $DATA
sed -e "s|^path = .*pt\"|path = \"$PWD/$DEV/pkg.pt2\"|" -e "s|^labels = .*|labels = \"$PWD/$DEV/models/digits-seed.labels.txt\"|" \
  $DEV/gpu/seed-budget.toml > $W/aoti.toml
sed -e 's|^dtype = "bf16"|dtype = "bf16"\nwarm_size_classes = false|' $W/aoti.toml > $W/lean.toml
run() { # NAME BIN CONFIG [ENV=VALUE]
  local name=$1 bin=$2 config=$3; shift 3
  env "$@" SEGPREDICT_LOG=segpredict=debug $DEV/$bin run $W/$config --input $W/input.parquet --output $W/out-$name --overwrite > $OUT/logs/$name.log 2>&1 || echo "!! $name exit $?"
  python3 -c "
import json; r=json.load(open('$W/out-$name/_report.json'))
print('$name', *(f'{k}={round(r[k],4) if isinstance(r[k],float) else r[k]}' for k in ['wall_s','time_to_first_batch_s','model_ready_s','segments_per_s']), 'growth', r['memory']['reserved_growth_events_after_warmup'], 'peak_reserved', r['memory']['peak_reserved_bytes'])"
}
run warm segpredict aoti.toml > /dev/null
for i in 1 2 3; do run main-$i segpredict aoti.toml; run lean-$i seg-L lean.toml SEGPREDICT_LEAN=1; done | tee $OUT/logs/runs.txt
$DEV/segpredict speed $W/aoti.toml --segments 16384 --rows 400 --batches 1500 --input $W/input.parquet --json $OUT/logs/sustained.json | tail -2
python3 - $OUT/logs/runs.txt $OUT/logs/sustained.json <<'PY'
import json, re, statistics, sys
ceiling = json.load(open(sys.argv[2]))["speed"]["segments_per_s"]
rows = [dict(re.findall(r"(\w+)=([\d.]+)", l), name=l.split()[0]) for l in open(sys.argv[1]) if "=" in l]
for kind in ("main", "lean"):
    rs = [r for r in rows if r["name"].startswith(kind)]
    rate = statistics.median(float(r["segments_per_s"]) for r in rs)
    ttfb = statistics.median(float(r["time_to_first_batch_s"]) for r in rs)
    print(f"{kind}: median {rate:,.0f} segs/s = {rate / ceiling:.4f} of the package alone sustained ({ceiling:,.0f}); time to first batch {ttfb:.3f} s")
PY
echo "== timelines, round 1"
for n in main-1 lean-1; do echo "-- $n"; grep -E "DEBUG|INFO" $OUT/logs/$n.log | grep -v progress | head -10 | cut -c1-180; done
tar -czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $OUT/logs
date -u
