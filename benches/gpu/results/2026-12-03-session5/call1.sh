#!/usr/bin/env bash
# Session 5, call 1: where the CUDA package's per-batch excess and start-up go.
# 1. two packages built side by side: A (main's default: index_put as an ATen call)
#    and B (--pool-by-matmul: the segments pooled by a matrix product);
# 2. segpredict speed at 16,384 segments over 8..4,096 even rows, A, B and TorchScript;
# 3. 1,000,000 rows through segpredict: TorchScript, A, B (debug logs: start-up steps),
#    batch records kept; labels of A and B against TorchScript;
# 4. just test-gpu's tests with this build.
set -uo pipefail
DEV=.device
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p $DEV/t && tar -C $DEV -xJf $DEV/bins.tar.xz && mv $DEV/integration $DEV/t/integration
chmod +x $DEV/segpredict $DEV/t/integration
ROOT=$PWD; W=/tmp/w1; R=$OUT/runs; mkdir -p $W $R
nvidia-smi -L; nproc; date -u
A=$W/a.pt2; B=$W/b.pt2
build() { timeout 200 python3 $DEV/tools/make_models.py --aoti --only digits-seed --device cuda --dtype bf16 --no-check --out "$@"; }
(build $A > $R/build-a.log 2>&1; echo "build A exit $?") &
(build $B --pool-by-matmul > $R/build-b.log 2>&1; echo "build B exit $?") &
python3 $DEV/gpu/make_data.py --rows 1000000 --out $W/input.parquet
wait; tail -2 $R/build-a.log $R/build-b.log; date -u
M=$(realpath $DEV/models/digits-seed.pt); L=$(realpath $DEV/models/digits-seed.labels.txt)
sed -e "s|^path = \"../../models/digits-seed.pt\"|path = \"$M\"|" -e "s|^labels = .*|labels = \"$L\"|" $DEV/gpu/seed-budget.toml > $W/ts.toml
sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$A\"|" $W/ts.toml > $W/a.toml
sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$B\"|" $W/ts.toml > $W/b.toml
echo "== speed"
for cfg in a b ts; do
  [ $cfg != ts ] && [ ! -s $W/$cfg.pt2 ] && continue
  for rows in 8 32 128 400 1600 4096; do
    $DEV/segpredict speed $W/$cfg.toml --segments 16384 --rows $rows --batches 40 --json $R/speed-$cfg-$rows.json > /dev/null 2>&1 || echo "!! speed $cfg $rows"
  done
  python3 -c "
import json,sys
print('$cfg', ', '.join(f\"{r}: {json.load(open(f'$R/speed-$cfg-{r}.json'))['speed']['batch_ms_median']:.2f} ms\" for r in [8,32,128,400,1600,4096]))" 2>&1 | tail -1
done
echo "== runs"; date -u
one() { # CFG
  [ $1 != ts ] && [ ! -s $W/$1.pt2 ] && return
  SEGPREDICT_LOG=debug $DEV/segpredict --log-format json run $W/$1.toml --input $W/input.parquet --output $W/out-$1 --overwrite > $R/$1.log 2>&1
  echo "$1 exit $?: $(grep -h 'segments/s' $R/$1.log | head -1)"
  python3 $DEV/gpu/report_with_batches.py $W/out-$1 $R/$1.json
}
one ts; one a; one b
python3 - $W <<'PY' | tee $R/labels.txt
import sys, pyarrow.dataset as ds
def load(p):
    t = ds.dataset(p, format="parquet").to_table(columns=["id", "label_id"])
    return dict(zip(t.column("id").to_pylist(), t.column("label_id").to_pylist()))
w = sys.argv[1]; ts = load(f"{w}/out-ts")
for name in ["a", "b"]:
    try: p = load(f"{w}/out-{name}")
    except Exception as e: print(name, "no output", e); continue
    same = sum(p[k] == ts.get(k) for k in p)
    print(f"{name} vs TorchScript: rows {len(p)} / {len(ts)}; same label {same} ({same / max(len(p), 1):.5f})")
PY
echo "== GPU tests"; date -u
BUILT=/work/main
if [ "$BUILT" != "$ROOT" ] && [ ! -e "$BUILT" ]; then mkdir -p "$(dirname "$BUILT")"; ln -s "$ROOT" "$BUILT"; fi
mkdir -p "$ROOT/target/release" models && cp $DEV/segpredict "$ROOT/target/release/segpredict" && cp $DEV/models/digits-seed.* models/
VIRTUAL_ENV=$(python3 -c "import sys;print(sys.prefix)") timeout 60 $DEV/t/integration gpu --ignored --test-threads 1 2>&1 | tee "$R/gpu-tests.log" | tail -4
cp $A $B $OUT/ 2>/dev/null; ls -la $OUT
tar -czf $OUT/runs.tar.gz -C $OUT runs && rm -rf $R
date -u
