#!/usr/bin/env bash
# The GPU benchmark, one script, one run, every policy on the same data:
#   segpredict (segment budget; also with NCHW weights and with cuDNN
#   benchmark on), segpredict (budget calibrated to a memory target),
#   segpredict (the seed's 32 rows a batch), and the plain-PyTorch pipeline
#   (pyarrow + eager TorchScript: 32 rows a batch, and a log2 budget with
#   NCHW and with channels-last weights).
# Runs on the GPU machine from the repository root; the segpredict binary is
# built elsewhere and passed as --segpredict. Results go to --out (default
# out/gpu), its data and runs to --work (default /tmp/segpredict-bench);
# every setting is an argument (benches/args.sh; --help lists them).
#
#   bash benches/gpu/run.sh --segpredict target/release/segpredict --out out/gpu --work /tmp/bench [--rows 200000]
set -euo pipefail
. "$(dirname "$0")/../args.sh"; bench_args "SEGPREDICT OUT WORK ROWS TARGET CASES DEVICE PYTHON BENCH_COMMIT" "$@"
OUT=${OUT:-out/gpu}
ROWS=${ROWS:-200000}
TARGET=${TARGET:-6GiB}
BIN=${SEGPREDICT:?set SEGPREDICT to the segpredict binary}
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/segpredict-bench}
TORCH_LIB=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$OUT" "$WORK/runs"
"$PY" "$(dirname "$0")/../provenance.py" ${BIN:+--binary "$BIN"} > "$OUT/provenance.md" || true  # commit and machine
RUNS=$WORK/runs

(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"); "$BIN" --version
$PY -c "import torch;print('torch',torch.__version__)"; echo "cores $(nproc)"
rm -rf "$WORK/runs"/*
$PY benches/gpu/make_data.py --rows "$ROWS" --out "$WORK/input.parquet"

# A background sampler left running would hold the caller's pipe open forever.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

# Runs NAME CMD...: samples GPU utilization while CMD runs, times it. A failed
# case is reported and the others still run.
FAILED=""
run_case() {
  local name=$1; shift
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 > "$RUNS/$name.util" 2>/dev/null &
  local sampler=$! rc=0
  echo "== $name"
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v -o "$RUNS/$name.time" "$@" > "$RUNS/$name.log" 2>&1 || rc=$?
  else
    "$@" > "$RUNS/$name.log" 2>&1 || rc=$?
  fi
  tail -6 "$RUNS/$name.log"
  kill $sampler 2>/dev/null || true; wait $sampler 2>/dev/null || true
  if [ $rc -ne 0 ]; then echo "!! $name failed (exit $rc)"; FAILED="$FAILED $name"; fi
  return 0
}

check_ids() { # NAME OUTPUT(dir or file)
  $PY - "$1" "$2" "$WORK/input.parquet" "$RUNS" <<'PY'
import json, sys, pyarrow.dataset as ds, pyarrow.parquet as pq
name, out, inp, runs = sys.argv[1:]
ids = ds.dataset(out, format="parquet").to_table(columns=["id"]).column("id").to_pylist()
n_in = pq.ParquetFile(inp).metadata.num_rows
json.dump({"input_rows": n_in, "output_rows": len(ids), "unique_ids": len(set(ids))}, open(f"{runs}/{name}.ids.json", "w"))
PY
}

P=benches/gpu
DEVICE=${DEVICE:-cuda}
CASES=${CASES:-all}   # or a space-separated subset of the case names below
wanted() { [ "$CASES" = all ] || [[ " $CASES " == *" $1 "* ]]; }   # cpu: a dry run of this script on a machine without a GPU
segpredict_case() { # NAME PIPELINE OUTDIR [ARGS...]
  local name=$1 pipeline=$2 dir=$3; shift 3
  wanted "$name" || return 0
  run_case "$name" "$BIN" run "$pipeline" --input "$WORK/input.parquet" --output "$dir" --device "$DEVICE" "$@"
  if [ -f "$dir/_report.json" ]; then $PY $P/report_with_batches.py "$dir" "$RUNS/$name.json"; check_ids "$name" "$dir"; fi
}
segpredict_case segpredict-budget $P/seed-budget.toml "$WORK/sp-budget"
segpredict_case segpredict-budget-cudnn-benchmark $P/seed-budget-cudnn.toml "$WORK/sp-budget-cudnn"
segpredict_case segpredict-budget-nchw $P/seed-budget-nchw.toml "$WORK/sp-budget-nchw"
if [ "$DEVICE" != cpu ]; then
  segpredict_case segpredict-auto $P/seed-budget.toml "$WORK/sp-auto" --gpu-memory "$TARGET"
fi
segpredict_case segpredict-rows $P/seed-rows.toml "$WORK/sp-rows"
python_case() { # NAME POLICY [ARGS...]
  local name=$1 policy=$2; shift 2
  wanted "$name" || return 0
  run_case "$name" $PY $P/plain_pytorch.py --model models/digits-seed.pt --labels models/digits-seed.labels.txt \
    --input "$WORK/input.parquet" --output "$WORK/$name.parquet" --policy "$policy" --rows 32 --budget 16384 \
    --dtype bf16 --json "$RUNS/$name.json" --device "$DEVICE" "$@"
  [ -f "$WORK/$name.parquet" ] && check_ids "$name" "$WORK/$name.parquet"
}
python_case python-budget budget
python_case python-budget-channels-last budget --channels-last
python_case python-rows rows
if [ "$DEVICE" != cpu ] && wanted calibrate; then
  "$BIN" calibrate $P/seed-budget.toml --gpu-memory "$TARGET" --json "$OUT/calibration.json" > "$OUT/calibration.txt" 2>&1 || FAILED="$FAILED calibrate"
  cat "$OUT/calibration.txt"
fi

$PY $P/summarize.py "$RUNS" "$OUT"
cp "$WORK/sp-budget/_report.svg" "$OUT/segpredict-budget.svg" 2>/dev/null || true
cp "$WORK/sp-rows/_report.svg" "$OUT/segpredict-rows.svg" 2>/dev/null || true
# Every run's own per-batch records, for a second look.
tar -czf "$OUT/runs.tar.gz" -C "$RUNS" . 2>/dev/null || true
if [ -n "$FAILED" ]; then echo "failed:$FAILED"; exit 1; fi
