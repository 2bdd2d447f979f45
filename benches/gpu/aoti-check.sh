#!/usr/bin/env bash
# The CUDA AOTInductor package of digits-seed, built and checked on the GPU
# machine, then run by segpredict on a small input: which side a fault is on.
#   1. tools/make_models.py --aoti --device cuda --dtype bf16 (the package is
#      checked against the eager model in a fresh process, on tiny inputs and
#      on a benchmark-sized batch of ~400 rows);
#   2. segpredict with benches/gpu/seed-budget.toml pointed at the package,
#      over ROWS rows of make_data.py (CUDA_LAUNCH_BLOCKING=1, so a device-side
#      assert names the kernel that failed).
#   SEGPREDICT=... MODEL=.../digits-seed.pt MAKE_MODELS=tools/make_models.py bash benches/gpu/aoti-check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-out/aoti-check}; ROWS=${ROWS:-4000}; WORK=${WORK:-/tmp/segpredict-aoti}; PY=${PYTHON:-python3}
BIN=$(realpath "${SEGPREDICT:?}"); MODEL=$(realpath "${MODEL:?}"); LABELS=$(realpath "${LABELS:-${MODEL%.pt}.labels.txt}")
MAKE_MODELS=${MAKE_MODELS:-$HERE/../../tools/make_models.py}; PACKAGE=$WORK/digits-seed.cuda.bf16.pt2
export LD_LIBRARY_PATH=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))") PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/aoti-check-log.txt") 2>&1
date -u
$PY "$HERE/make_data.py" --rows "$ROWS" --out "$WORK/input.parquet" &
$PY -X faulthandler "$MAKE_MODELS" --aoti --only digits-seed --device cuda --dtype bf16 --out "$PACKAGE" 2>&1 | grep -v "^W1203"
echo "make_models exit ${PIPESTATUS[0]}"
wait
sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$PACKAGE\"|" -e "s|^labels = .*|labels = \"$LABELS\"|" "$HERE/seed-budget.toml" > "$WORK/aoti.toml"
CUDA_LAUNCH_BLOCKING=1 "$BIN" run "$WORK/aoti.toml" --input "$WORK/input.parquet" --output "$WORK/out" --overwrite > "$WORK/run.log" 2>&1
echo "segpredict exit $?"
grep -v "^$" "$WORK/run.log" | awk '!/Assertion/ || n++ < 3' | head -40
