#!/usr/bin/env bash
# The CUDA AOTInductor package of digits-seed on the GPU machine, in one device
# call (not yet run; expected 3-5 minutes of command time, the build ~100 s of
# it; each part has its own timeout, 870 s in all at worst): does it build,
# does it compute what eager does, and is it faster than eager, alone and in a
# CUDA graph. Each part runs in its own process and a failing part is printed
# and skipped; the last line is one JSON object (also $OUT/aoti-check.json).
#   1. tools/make_models.py --aoti --device cuda --dtype bf16: the package of the
#      sync-free export (no .item(), no data-dependent shape), checked in a child
#      process against the eager sync-free model and the eager TorchScript
#      model's class, on tiny inputs and on a benchmark-sized batch of ~400 rows;
#   2. model_ceiling.py, the models alone at the budget shape (SEGMENTS segments,
#      ROWS_PER_BATCH rows, TAGS_PER_ROW tags a row, bf16, inputs on the device,
#      one stream, ITERS batches after warm-up): the TorchScript model (MODEL,
#      channels-last, cuDNN benchmark off) and the sync-free eager model
#      (channels-last), then the eager one captured in a CUDA graph;
#   3. model_ceiling.py --aoti, in another process (Python's package loader has
#      crashed before): the package loaded as segpredict loads it and loaded
#      single-threaded, then the latter captured in a CUDA graph;
#   4. the summary: segs/s of each and their ratios (by wall time over the
#      back-to-back batches, and by the median batch), one JSON line;
#   5. with SEGPREDICT set: segpredict with seed-budget.toml pointed at the
#      package, and at MODEL, over ROWS rows of make_data.py, and their labels
#      compared (a check of the package that needs no Python loader;
#      LAUNCH_BLOCKING=1 sets CUDA_LAUNCH_BLOCKING=1, so a device-side assert
#      names its kernel).
#
#   bash benches/gpu/aoti-check.sh --model models/digits-seed.pt --make-models tools/make_models.py \
#     [--segpredict target/release/segpredict] --out out/aoti-check --work /tmp/segpredict-aoti
# MODEL is optional: without it the TorchScript model is not timed, and the
# weights are digits-seed's, rebuilt from its seed. INDUCTOR_CONFIGS="k=v ..."
# passes inductor configs to the build (make_models.py --inductor-config).
set -uo pipefail
. "$(dirname "$0")/../args.sh"; bench_args "SEGPREDICT OUT WORK MODEL LABELS MAKE_MODELS ROWS SEGMENTS ROWS_PER_BATCH TAGS_PER_ROW ITERS INDUCTOR_CONFIGS LAUNCH_BLOCKING PYTHON BENCH_COMMIT" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-out/aoti-check}; ROWS=${ROWS:-4000}; WORK=${WORK:-/tmp/segpredict-aoti}; PY=${PYTHON:-python3}
SEGMENTS=${SEGMENTS:-16384}; ROWS_PER_BATCH=${ROWS_PER_BATCH:-400}; TAGS_PER_ROW=${TAGS_PER_ROW:-0}; ITERS=${ITERS:-100}
MAKE_MODELS=$(realpath "${MAKE_MODELS:-$HERE/../../tools/make_models.py}"); PACKAGE=$WORK/digits-seed.cuda.bf16.pt2
MODEL=${MODEL:-}; if [ -n "$MODEL" ]; then MODEL=$(realpath "$MODEL"); fi
export LD_LIBRARY_PATH=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))") PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
"$PY" "$(dirname "$0")/../provenance.py" ${SEGPREDICT:+--binary "$SEGPREDICT"} > "$OUT/provenance.md" || true  # commit and machine
exec > >(tee "$OUT/aoti-check-log.txt") 2>&1
date -u
nvidia-smi -L
if [ -n "${SEGPREDICT:-}" ]; then
  $PY "$HERE/make_data.py" --rows "$ROWS" --out "$WORK/input.parquet" > "$WORK/make-data.log" 2>&1 &
fi

echo "== 1. build and check the package"
rm -f "$PACKAGE"
start=$(date +%s)
configs=(); for c in ${INDUCTOR_CONFIGS:-}; do configs+=(--inductor-config "$c"); done
timeout 300 $PY -X faulthandler "$MAKE_MODELS" --aoti --only digits-seed --device cuda --dtype bf16 --out "$PACKAGE" \
  "${configs[@]}" 2>&1 \
  | grep -v "^W1203"
build_rc=${PIPESTATUS[0]}
echo "make_models exit $build_rc after $(( $(date +%s) - start )) s (build and check; the check's failure alone also exits 1)"

echo "== 1b. load the package in a bare Python process (it crashed before with SIGSEGV; exit 139 is that)"
if [ -f "$PACKAGE" ]; then
  for single in False True; do
    timeout 45 $PY -X faulthandler -c "
import sys, torch
torch.cuda.init()
p = torch._inductor.aoti_load_package(sys.argv[1], run_single_threaded=$single, device_index=torch.cuda.current_device())
print('loaded, run_single_threaded=$single')" "$PACKAGE" 2>&1 | grep -v "^W1203" | tail -8
    echo "load probe (run_single_threaded=$single) exit ${PIPESTATUS[0]}"
  done
fi

ceiling=("$HERE/model_ceiling.py" --segments "$SEGMENTS" --rows "$ROWS_PER_BATCH" --tags-per-row "$TAGS_PER_ROW"
         --iters "$ITERS" --streams 1 --cuda-graph)
echo "== 2. eager alone and in a CUDA graph: ${SEGMENTS} segments, ${ROWS_PER_BATCH} rows"
eager=(--sync-free digits-seed --make-models "$MAKE_MODELS" --layouts channels_last --benchmark off)
if [ -n "$MODEL" ]; then eager+=(--model "$MODEL"); else echo "MODEL unset: the TorchScript model is not timed"; fi
timeout 150 $PY -X faulthandler "${ceiling[@]}" "${eager[@]}" --json "$OUT/ceiling-eager.json"
echo "model_ceiling (eager) exit $?"

echo "== 3. the package alone and in a CUDA graph"
if [ -f "$PACKAGE" ]; then
  timeout 150 $PY -X faulthandler "${ceiling[@]}" --aoti "$PACKAGE" --json "$OUT/ceiling-aoti.json"
  echo "model_ceiling (package) exit $?"
else
  echo "no package: not timed"
fi

echo "== 4. summary (segs/s and ratios, one stream)"
$PY "$HERE/model_ceiling.py" --summarize "$OUT/ceiling-eager.json" "$OUT/ceiling-aoti.json" | tee "$OUT/aoti-check.json"

if [ -n "${SEGPREDICT:-}" ] && [ -f "$PACKAGE" ]; then
  echo "== 5. segpredict on the package, ${ROWS} rows (and on MODEL, to compare labels)"
  wait
  BIN=$(realpath "$SEGPREDICT"); chmod +x "$BIN" 2>/dev/null; LABELS=$(realpath "${LABELS:-$(dirname "$MAKE_MODELS")/../models/digits-seed.labels.txt}")
  blocking=(); if [ "${LAUNCH_BLOCKING:-0}" = 1 ]; then blocking=(env CUDA_LAUNCH_BLOCKING=1); fi
  for backend in aoti torchscript; do
    if [ "$backend" = aoti ]; then model=$PACKAGE; elif [ -n "$MODEL" ]; then model=$MODEL; else continue; fi
    sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$model\"|" -e "s|^labels = .*|labels = \"$LABELS\"|" \
      "$HERE/seed-budget.toml" > "$WORK/$backend.toml"
    timeout 90 "${blocking[@]}" "$BIN" run "$WORK/$backend.toml" --input "$WORK/input.parquet" \
      --output "$WORK/out-$backend" --overwrite > "$WORK/run-$backend.log" 2>&1
    echo "segpredict ($backend) exit $?"
    grep -v "^$" "$WORK/run-$backend.log" | awk '!/Assertion/ || n++ < 3' | tail -12
    cp "$WORK/run-$backend.log" "$OUT/segpredict-$backend.log"
    cp "$WORK/out-$backend/_report.json" "$OUT/segpredict-$backend-report.json" 2>/dev/null
  done
  $PY - "$WORK/out-aoti" "$WORK/out-torchscript" <<'PY' 2>&1 | tee "$OUT/segpredict-labels.txt"
import sys, pyarrow.dataset as ds
def load(p):
    t = ds.dataset(p, format="parquet").to_table(columns=["id", "label_id", "score"])
    return {i: (l, s) for i, l, s in zip(*(t.column(c).to_pylist() for c in ["id", "label_id", "score"]))}
a, b = load(sys.argv[1]), load(sys.argv[2])
same = sum(a[k][0] == b[k][0] for k in a if k in b)
worst = max((abs(a[k][1] - b[k][1]) for k in a if k in b and a[k][0] == b[k][0]), default=float("nan"))
print(f"segpredict labels, package vs TorchScript: rows {len(a)} / {len(b)}, same label {same} "
      f"({same / max(len(a), 1):.5f}), largest score difference where they agree {worst:.3g}")
PY
fi
echo "== summary"
cat "$OUT/aoti-check.json"
