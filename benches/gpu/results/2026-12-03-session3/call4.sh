#!/usr/bin/env bash
# Session 3, call 4: the CUDA package exported at a real batch's sizes
# (4,096 rows) with channels-last weights: segpredict on it against TorchScript
# (labels on 100,000 rows), then both backends' speed at 16,384 and one timed
# 300,000-row run each.
set -uo pipefail
DEV=.device; W=/tmp/c4
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
chmod +x $DEV/segpredict
mkdir -p $W "$OUT"
(python3 $DEV/gpu/make_data.py --rows 300000 --out $W/input.parquet > $W/data.log 2>&1) &
t0=$(date +%s)
timeout 150 python3 -X faulthandler $DEV/tools/make_models.py --aoti --only digits-seed --device cuda --dtype bf16 --out $W/seed.pt2 --no-check 2>&1 | grep -v '^W1203' | tail -3
echo "package built in $(( $(date +%s) - t0 )) s"; wait
LABELS=$(realpath $DEV/models/digits-seed.labels.txt)
sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$(realpath $DEV/models/digits-seed.pt)\"|" -e "s|^labels = .*|labels = \"$LABELS\"|" $DEV/gpu/seed-budget.toml > $W/ts.toml
sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$W/seed.pt2\"|" -e "s|^labels = .*|labels = \"$LABELS\"|" $DEV/gpu/seed-budget.toml > $W/aoti.toml
for b in ts aoti; do
  timeout 60 $DEV/segpredict run $W/$b.toml --input $W/input.parquet --output $W/out-$b --overwrite > "$OUT/run-$b.log" 2>&1
  echo "$b exit $?: $(grep segments/s "$OUT/run-$b.log")"; cp $W/out-$b/_report.json "$OUT/report-$b.json" 2>/dev/null
done
python3 - $W/out-aoti $W/out-ts <<'PY' | tee "$OUT/labels.txt"
import sys, pyarrow.dataset as ds
def load(p):
    t = ds.dataset(p, format="parquet").to_table(columns=["id", "label_id", "score"])
    return {i: (l, s) for i, l, s in zip(*(t.column(c).to_pylist() for c in ["id", "label_id", "score"]))}
a, b = load(sys.argv[1]), load(sys.argv[2])
same = sum(a[k][0] == b[k][0] for k in a if k in b)
worst = max((abs(a[k][1] - b[k][1]) for k in a if k in b and a[k][0] == b[k][0]), default=float("nan"))
print(f"package vs TorchScript on CUDA: rows {len(a)} / {len(b)}, same label {same} ({same / max(len(a), 1):.5f}), "
      f"largest score difference where they agree {worst:.3g}")
PY
python3 - "$OUT" <<'PY'
import json, sys
for b in ["ts", "aoti"]:
    try:
        r = json.load(open(f"{sys.argv[1]}/report-{b}.json")); m = r.get("memory") or {}
        print(b, {k: r.get(k) for k in ["segments_per_s", "wall_s", "time_to_first_batch_s", "model_ready_s"]},
              {k: m.get(k) for k in ["reserved_growth_events_after_warmup", "peak_allocated_bytes", "peak_reserved_bytes"]}, r.get("batch_ms"))
    except Exception as e:
        print(b, "no report", e)
PY
for b in ts aoti; do
  timeout 40 $DEV/segpredict speed $W/$b.toml --segments 16384 --rows 400 --batches 60 --json "$OUT/speed-$b.json"
done
