#!/usr/bin/env bash
# Session 3, call 1: GPU tests of main with start-up overlapped with reading,
# then the start-up timeline and memory on 300,000 rows at the seed's budget.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
TORCH_LIB=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" && cp $DEV/segpredict "$ROOT/target/release/segpredict"
mkdir -p models && cp $DEV/models/* models/
echo "== $(git log --oneline -1 2>/dev/null)"; nvidia-smi -L; nproc
(python3 $DEV/gpu/make_data.py --rows 300000 --out /tmp/w-input.parquet > "$OUT/make-data.log" 2>&1; echo done > /tmp/w-data-done) &
echo "== GPU tests (just test-gpu: integration gpu -- --ignored)"
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 240 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -30
wait
echo "== start-up timeline: 300,000 rows, seed budget 16,384, TorchScript bf16, 3 runs"
mkdir -p "$OUT/startup"
for round in 1 2 3; do
  SEGPREDICT_LOG=debug $DEV/segpredict --log-format json run $DEV/gpu/seed-budget.toml --input /tmp/w-input.parquet --output /tmp/w-out$round --overwrite > "$OUT/startup/run$round.log" 2>&1
  echo "exit $?"; cp /tmp/w-out$round/_report.json "$OUT/startup/report$round.json"
  python3 - "$OUT/startup/report$round.json" "$OUT/startup/run$round.log" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r.get("memory") or {}
print({k: r.get(k) for k in ["rows_in", "rows_out", "batches", "padded_segments", "model_ready_s", "warm_up_s", "time_to_first_batch_s", "segments_per_s", "wall_s"]})
print({k: m.get(k) for k in ["reserved_growth_events_after_warmup", "growth_events_after_warmup", "peak_allocated_bytes", "peak_reserved_bytes"]})
for line in open(sys.argv[2]):
    if line.startswith("{") and '"progress"' not in line:
        d = json.loads(line); f = d["fields"]
        print("  ", d["timestamp"][11:23], f.pop("message"), f)
PY
done
rm -rf /tmp/w-out*
