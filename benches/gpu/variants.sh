#!/usr/bin/env bash
# Which model-worker settings make segpredict fastest on this GPU: the budget
# pipeline with cuDNN benchmark and TorchScript's profiling executor each on
# and off, beside the plain-PyTorch budget pipeline, on the same data.
#   SEGPREDICT=path/to/segpredict bash benches/gpu/variants.sh
set -euo pipefail
OUT=${OUT:-out/gpu-variants}; ROWS=${ROWS:-200000}; BIN=${SEGPREDICT:?}; PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/segpredict-variants}; P=benches/gpu
export LD_LIBRARY_PATH=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p "$OUT" "$WORK"
$PY $P/make_data.py --rows "$ROWS" --out "$WORK/input.parquet"
variant() { # NAME then lines appended to [model]
  local name=$1; shift
  sed "s|^dtype = \"bf16\"|dtype = \"bf16\"\n$*|" $P/seed-budget.toml > $P/.variant-$name.toml
  "$BIN" run $P/.variant-$name.toml --input "$WORK/input.parquet" --output "$WORK/$name" 2>&1 | grep -E "segments/s|GPU memory"
  rm -f $P/.variant-$name.toml
}
for round in 1 2; do
  echo "== round $round"
  echo "-- default"; variant default ""
  echo "-- no cudnn benchmark"; variant nobench "cudnn_benchmark = false"
  echo "-- no jit profiling"; variant noprof "jit_profiling = false"
  echo "-- neither"; variant neither "cudnn_benchmark = false\njit_profiling = false"
  echo "-- python budget"; $PY $P/plain_pytorch.py --model models/digits-seed.pt --labels models/digits-seed.labels.txt \
    --input "$WORK/input.parquet" --output "$WORK/py.parquet" --policy budget --budget 16384 --dtype bf16 --json "$WORK/py.json"
done
