#!/usr/bin/env bash
# Session 5, call 2: is the model alone slower on the run's real digits than on
# the synthetic inputs its ceilings use, and does a long run drift?
# ceiling_data.py for TorchScript, then (own process: torch's package loader once
# crashed) for package A; segpredict speed of A sustained 2,500 batches;
# nvidia-smi clocks and power throughout.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict
W=/tmp/w2; R=$OUT/runs; mkdir -p $W $R
nvidia-smi -L; date -u
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv -lms 250 > $R/smi.csv 2>&1 &
SMI=$!
python3 $DEV/gpu/make_data.py --rows 20000 --out $W/input.parquet
M=$(realpath $DEV/models/digits-seed.pt); L=$(realpath $DEV/models/digits-seed.labels.txt); A=$(realpath $DEV/models/a.pt2)
echo "== ts"; date -u +%T.%N
timeout 150 python3 $DEV/gpu/ceiling_data.py --model $M --input $W/input.parquet --json $R/data-ts.json 2>&1 | tail -8
echo "== aoti"; date -u +%T.%N
timeout 150 python3 -X faulthandler - $M $W/input.parquet $A $R/data-aoti.json <<'PY' 2>&1 | tail -12
import sys, json, torch
sys.path.insert(0, ".device/gpu"); import ceiling_data as c
m, inp, a, out = sys.argv[1:]
with torch.inference_mode():
    p = torch._inductor.aoti_load_package(a, device_index=torch.cuda.current_device())
    r = c.measure("aoti", p, c.data_kinds(inp), 3, 60, 2500)
json.dump([r], open(out, "w"), indent=1)
PY
echo "== segpredict speed, A, 2500 batches"; date -u +%T.%N
sed -e "s|^path = \"../../models/digits-seed.pt\"|path = \"$A\"|" -e "s|^labels = .*|labels = \"$L\"|" $DEV/gpu/seed-budget.toml > $W/a.toml
$DEV/segpredict speed $W/a.toml --segments 16384 --rows 400 --batches 2500 --json $R/speed-a-2500.json 2>&1 | tail -2
date -u +%T.%N
kill $SMI
tar -czf $OUT/runs.tar.gz -C $OUT runs && rm -rf $R
