#!/usr/bin/env bash
# Session 4, call 6: the small pool mapped 4 MiB past the warm-up's needs.
# segpredict alone (no careful, no ceiling: call 5 has those): 1,000,000 rows,
# TorchScript 3 runs and the CUDA package once (built here: channels-last
# weights, index_put as an ATen call, as its atomic adds are the suspect for
# call 5's slow batches; call 1's package if the build fails) and its
# `segpredict speed` at 16,384; growth events after warm-up and throughput of
# each; just test-gpu's tests.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD; W=/tmp/w6; mkdir -p $W "$OUT/runs"
nvidia-smi -L; date -u
P=$W/digits-seed.cuda.bf16.cl-aten-index_put.pt2
(timeout 150 python3 $DEV/tools/make_models.py --aoti --only digits-seed --device cuda --dtype bf16 --no-check --channels-last \
   --aten index_put --out $P > "$OUT/build.log" 2>&1; echo "build exit $?") &
python3 $DEV/gpu/make_data.py --rows 1000000 --out $W/input.parquet
wait; tail -2 "$OUT/build.log"
[ -s $P ] || { echo "no new package: call 1's"; P=$(realpath $DEV/models/digits-seed.cuda.bf16.pt2); }
M=$(realpath $DEV/models/digits-seed.pt); L=$(realpath $DEV/models/digits-seed.labels.txt)
sed -e "s|^path = \"../../models/digits-seed.pt\"|path = \"$M\"|" -e "s|^labels = .*|labels = \"$L\"|" $DEV/gpu/seed-budget.toml > $W/ts.toml
sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$P\"|" $W/ts.toml > $W/aoti.toml
one() { # NAME CONFIG
  SEGPREDICT_LOG=debug $DEV/segpredict --log-format json run $W/$2.toml --input $W/input.parquet --output $W/out --overwrite > $W/$1.log 2>&1
  echo "$1 exit $?"; [ "$1" = ts-1 ] && cp -r $W/out $W/out-ts-1; cp $W/out/_report.json "$OUT/runs/$1.json"; grep -h "headroom" $W/$1.log | head -1 > "$OUT/runs/$1.headroom"
  python3 - "$OUT/runs/$1.json" "$OUT/runs/$1.headroom" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); m = r.get("memory") or {}
print({k: r.get(k) for k in ["rows_in", "rows_out", "batches", "segments_per_s", "model_ready_s", "warm_up_s"]},
      {k: m.get(k) for k in ["reserved_growth_events_after_warmup", "peak_allocated_bytes", "peak_reserved_bytes"]}, open(sys.argv[2]).read().strip()[-120:])
PY
}
one ts-1 ts; one aoti-1 aoti
$DEV/segpredict speed $W/aoti.toml --segments 16384 --rows 400 --batches 60 --json "$OUT/runs/speed-aoti-16384.json" 2>&1 | tail -2
python3 - $W/out-ts-1 $W/out <<'PY' | tee "$OUT/runs/labels.txt"
import sys, pyarrow.dataset as ds
def load(p):
    t = ds.dataset(p, format="parquet").to_table(columns=["id", "label_id"])
    return dict(zip(t.column("id").to_pylist(), t.column("label_id").to_pylist()))
a, b = load(sys.argv[2]), load(sys.argv[1])
same = sum(a[k] == b.get(k) for k in a)
print(f"package vs TorchScript (ts-1): rows {len(a)} / {len(b)}; same label {same} ({same / max(len(a), 1):.5f})")
PY
echo "== GPU tests"; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 40 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -8
one ts-2 ts; one ts-3 ts
date -u
