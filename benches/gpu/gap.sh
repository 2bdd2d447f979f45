#!/usr/bin/env bash
# The gap account (issue 12), one script, one run on the GPU machine:
#   1,000,000 rows from make_data.py; ROUNDS rounds, alternating, of
#   segpredict (seed-budget.toml) and the careful plain-PyTorch pipeline
#   (plain_pytorch.py --careful: reader thread, log2 buckets under 16,384
#   unpadded, pinned non-blocking uploads, channels-last bf16, next batch
#   queued before the last one's answers are read, writer thread); the
#   weaker plain pipeline once (EXTRA=1); the model alone at every size class
#   of the budget, one and two streams; a profiler trace of the careful
#   pipeline; then gap.py splits each pipeline's time beyond the model
#   alone into terms.
#
#   SEGPREDICT=target/release/segpredict MODEL=models/digits-seed.pt bash benches/gpu/gap.sh
# Results go to $OUT (or out/gap): gap.md, gap.json, runs.tar.gz, gap-log.txt,
# careful-profile.txt, careful-trace.json.gz.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-out/gap}; ROWS=${ROWS:-1000000}; ROUNDS=${ROUNDS:-3}; EXTRA=${EXTRA:-1}; PROFILE_ROWS=${PROFILE_ROWS:-20000}
BIN=$(realpath "${SEGPREDICT:?set SEGPREDICT to the segpredict binary}")
MODEL=$(realpath "${MODEL:-models/digits-seed.pt}"); LABELS=$(realpath "${LABELS:-${MODEL%.pt}.labels.txt}")
PY=${PYTHON:-python3}; WORK=${WORK:-/tmp/segpredict-gap}; RUNS=$WORK/runs
export LD_LIBRARY_PATH=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$RUNS"; rm -rf "${RUNS:?}"/*
exec > >(tee "$OUT/gap-log.txt") 2>&1

echo "== machine"; date -u
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(free -g | awk '/Mem/{print $2" GiB"}'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "nsys: $(command -v nsys || echo none)"; "$BIN" --version
$PY -c "import torch,pyarrow;print('torch',torch.__version__,'pyarrow',pyarrow.__version__)"

# The pipeline file with the model's absolute paths (the repo's refers to models/).
sed -e "s|^path = \"../../models/digits-seed.pt\"|path = \"$MODEL\"|" \
    -e "s|^labels = .*|labels = \"$LABELS\"|" "$HERE/seed-budget.toml" > "$WORK/seed-budget.toml"

echo "== data"
$PY "$HERE/make_data.py" --rows "$ROWS" --out "$WORK/input.parquet"
$PY "$HERE/make_data.py" --rows "$PROFILE_ROWS" --out "$WORK/profile.parquet"

stamp() { date +%s.%N; }
check_ids() { # NAME OUTPUT(dir or file)
  $PY - "$1" "$2" "$WORK/input.parquet" "$RUNS" <<'PY'
import json, sys, pyarrow.dataset as ds, pyarrow.parquet as pq
name, out, inp, runs = sys.argv[1:]
ids = ds.dataset(out, format="parquet").to_table(columns=["id"]).column("id").to_pylist()
n_in = pq.ParquetFile(inp).metadata.num_rows
json.dump({"input_rows": n_in, "output_rows": len(ids), "unique_ids": len(set(ids))}, open(f"{runs}/{name}.ids.json", "w"))
PY
}
segpredict() { # NAME
  local t0 t1; t0=$(stamp)
  "$BIN" run "$WORK/seed-budget.toml" --input "$WORK/input.parquet" --output "$WORK/$1" --overwrite > "$RUNS/$1.log" 2>&1
  local rc=$?; t1=$(stamp); echo "$t0 $t1" > "$RUNS/$1.ext"
  grep -E "segments/s|GPU busy" "$RUNS/$1.log" | head -3; [ $rc -eq 0 ] || { echo "!! $1 exit $rc"; tail -5 "$RUNS/$1.log"; }
  [ -f "$WORK/$1/_report.json" ] && $PY "$HERE/report_with_batches.py" "$WORK/$1" "$RUNS/$1.json" && check_ids "$1" "$WORK/$1"
}
baseline() { # NAME ARGS...
  local name=$1 t0 t1; shift; t0=$(stamp)
  $PY "$HERE/plain_pytorch.py" --model "$MODEL" --labels "$LABELS" --input "$WORK/input.parquet" \
    --output "$WORK/$name.parquet" --policy budget --budget 16384 --dtype bf16 --json "$RUNS/$name.json" "$@" > "$RUNS/$name.log" 2>&1
  local rc=$?; t1=$(stamp); echo "$t0 $t1" > "$RUNS/$name.ext"
  tail -1 "$RUNS/$name.log"; [ $rc -eq 0 ] || echo "!! $name exit $rc"
  [ -f "$WORK/$name.parquet" ] && check_ids "$name" "$WORK/$name.parquet"
}

# First, so the libraries are in the page cache before any timed round.
echo "== profile (careful pipeline, $PROFILE_ROWS rows, PyTorch profiler)"
$PY "$HERE/profile_careful.py" --model "$MODEL" --labels "$LABELS" --input "$WORK/profile.parquet" --out "$WORK/profile" \
  > "$RUNS/profile.log" 2>&1 || { echo "!! profile failed"; tail -5 "$RUNS/profile.log"; }
cp "$WORK/profile/careful-profile.txt" "$WORK/profile/careful-trace.json.gz" "$OUT/" 2>/dev/null


for round in $(seq "$ROUNDS"); do
  echo "== round $round"
  segpredict "segpredict-$round"
  baseline "careful-$round" --careful --channels-last
done

echo "== labels: segpredict round 1 against careful round 1"
$PY - "$WORK/segpredict-1" "$WORK/careful-1.parquet" <<'PY' | tee "$RUNS/labels.txt"
import sys, pyarrow.dataset as ds
def load(p):
    t = ds.dataset(p, format="parquet").to_table(columns=["id", "label_id"])
    return dict(zip(t.column("id").to_pylist(), t.column("label_id").to_pylist()))
a, b = load(sys.argv[1]), load(sys.argv[2])
same = sum(a[k] == b.get(k) for k in a)
print(f"rows {len(a)} / {len(b)}; same label {same} ({same / max(len(a), 1):.5f})")
PY

echo "== the model alone at the budget's size classes"
CLASSES=$($PY -c "import json;print(' '.join(map(str,json.load(open('$RUNS/segpredict-1.json'))['size_classes'])))" 2>/dev/null || echo "1024 2048 4096 8192 12288 16384")
$PY "$HERE/model_ceiling.py" --model "$MODEL" --layouts channels_last --benchmark off --streams 1 2 \
  --segments $CLASSES --iters 120 --json "$RUNS/ceiling.json"

summarise() { tar -czf "$OUT/runs.tar.gz" -C "$RUNS" .; echo "== gap"; $PY "$HERE/gap.py" "$RUNS" "$OUT"; }
summarise
# Last, so a run cut short still has its account.
if [ "$EXTRA" = 1 ]; then
  echo "== weaker baseline (one round): simple loop, log2 budget, channels-last"
  baseline python-simple-channels-last --channels-last
fi
[ "$EXTRA" = 1 ] && summarise
