#!/usr/bin/env bash
# Session 4, call 3 (issues 12 and 10):
# 1. start-up A/B on one machine: main at 4dc82fb against this build (cuDNN and
#    cuBLAS primed on a second thread while the model loads; warm-up keeps one
#    class in flight), 20,000 rows, alternating, 4 runs each, debug timeline;
# 2. gap.sh: 1,000,000 rows, 3 rounds of segpredict (TorchScript) and careful,
#    the CUDA package (cumsum as an ATen call, built in call 1) in round 1,
#    --gpu-memory 6GiB for both backends, the ceilings;
# 3. just test-gpu's tests with this build.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/segpredict-4dc82fb $DEV/t/integration
ROOT=$PWD
nvidia-smi -L; nproc; date -u
echo "== 1. start-up A/B"
python3 $DEV/gpu/make_data.py --rows 20000 --out /tmp/ab.parquet > /dev/null 2>&1
mkdir -p "$OUT/startup"
sed -e "s|^path = \"../../models/digits-seed.pt\"|path = \"$(realpath $DEV/models/digits-seed.pt)\"|" \
    -e "s|^labels = .*|labels = \"$(realpath $DEV/models/digits-seed.labels.txt)\"|" $DEV/gpu/seed-budget.toml > /tmp/ab.toml
for i in 1 2 3 4; do for b in 4dc82fb new; do
  bin=$DEV/segpredict; [ $b = 4dc82fb ] && bin=$DEV/segpredict-4dc82fb
  SEGPREDICT_LOG=debug $bin --log-format json run /tmp/ab.toml --input /tmp/ab.parquet --output /tmp/ab-out --overwrite > "$OUT/startup/$b-$i.log" 2>&1
  cp /tmp/ab-out/_report.json "$OUT/startup/$b-$i.json"
done; done
python3 - "$OUT/startup" <<'PY' | tee "$OUT/startup/summary.txt"
import json, sys, glob, statistics as st
d = sys.argv[1]
for b in ["4dc82fb", "new"]:
    ready, warm, ttfb, growth = [], [], [], []
    for f in sorted(glob.glob(f"{d}/{b}-*.json")):
        r = json.load(open(f)); ready.append(r.get("model_ready_s")); warm.append(r.get("warm_up_s"))
        ttfb.append(r.get("time_to_first_batch_s")); growth.append((r.get("memory") or {}).get("growth_events_after_warmup"))
    print(b, "model_ready_s", ready, "median", st.median(ready), "| warm_up_s", warm, "| first batch", ttfb, "| growth", growth)
    for f in sorted(glob.glob(f"{d}/{b}-1.log")):
        for line in open(f):
            if line.startswith("{") and '"progress"' not in line:
                x = json.loads(line); fl = x["fields"]
                if "second" in line or "primed" in line: print("   ", x["timestamp"][11:23], fl.pop("message"), fl)
PY
echo "== 2. gap.sh"
OUT=$OUT/gap SEGPREDICT=$DEV/segpredict MODEL=$DEV/models/digits-seed.pt MAKE_MODELS=$DEV/tools/make_models.py \
  AOTI_PACKAGE=$(realpath $DEV/models/digits-seed.cuda.bf16.pt2) BACKENDS="torchscript aoti" AOTI_ROUNDS=1 \
  PROFILE=0 EXTRA=0 ROUNDS=3 CEILING_ITERS=60 PACKAGE_CHECK=0 PYTHON_AOTI_CEILING=0 SPEED_BACKENDS=aoti \
  GPU_MEMORY=6GiB GPU_MEMORY_BACKENDS="torchscript aoti" timeout 440 bash $DEV/gpu/gap.sh 2>&1 | grep -v '^  <=' | tail -60
echo "== 3. GPU tests"; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 60 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$OUT/gpu-tests.log" | tail -8
date -u
