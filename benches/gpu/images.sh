#!/usr/bin/env bash
# Run on the H200 in session 11 (2026-12-05): benches/gpu/RESULTS.md,
# "encoded input", raw files in results/2026-12-05-session11/.
#
# Does decoding keep the H200 fed? The seed-budget run (digits-seed, bf16,
# 16,384-segment budget) on the GPU benchmark's input, raw, then with every
# segment a 32x32 JPEG (benches/gpu/encode_input.py) shrunk to 8x8 by the
# decode pool, at several decode_threads. Reports segments/s, the encoded
# run over the raw one, and the report's decode_us_per_segment, from which
# the cores decoding needs at the raw rate follow: raw segs/s x us / 1e6.
#
#   bash benches/gpu/images.sh --segpredict target/release/segpredict --out out/gpu-images \
#       --work /tmp/segpredict-bench-images [--rows 200000 --threads "2 4 8 12"]
set -euo pipefail
. "$(dirname "$0")/../args.sh"; bench_args "SEGPREDICT OUT WORK ROWS THREADS PYTHON BENCH_COMMIT" "$@"
OUT=${OUT:-out/gpu-images}
ROWS=${ROWS:-200000}
BIN=${SEGPREDICT:?set SEGPREDICT to the segpredict binary}
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/segpredict-bench-images}
THREADS=${THREADS:-"2 4 8 12"}
TORCH_LIB=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$OUT" "$WORK"
"$PY" "$(dirname "$0")/../provenance.py" ${BIN:+--binary "$BIN"} > "$OUT/provenance.md" || true  # commit and machine
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"); "$BIN" --version
echo "cores $(nproc)"
$PY benches/gpu/make_data.py --rows "$ROWS" --out "$WORK/input.parquet"
$PY benches/gpu/encode_input.py --input "$WORK/input.parquet" --out "$WORK/input-jpeg.parquet"
ls -l "$WORK"/*.parquet

# case NAME PIPELINE INPUT: one run, its summary, its report's numbers.
case_run() {
  local name=$1 pipeline=$2 input=$3
  "$BIN" run "$pipeline" --input "$input" --output "$WORK/out-$name" --overwrite > "$OUT/$name.log" 2>&1
  cp "$WORK/out-$name/_report.json" "$OUT/$name.report.json"
  $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], round(r['segments_per_s']), r.get('decode_us_per_segment'), r['busy_s'])" \
    "$OUT/$name.report.json" "$name" | tee -a "$OUT/summary.txt"
}

: > "$OUT/summary.txt"
case_run raw benches/gpu/seed-budget.toml "$WORK/input.parquet"
for n in $THREADS; do
  sed "s/^decode_threads = .*/decode_threads = $n/" benches/gpu/seed-budget-jpeg.toml > benches/gpu/.seed-budget-jpeg-$n.toml
  case_run "jpeg-decode$n" "benches/gpu/.seed-budget-jpeg-$n.toml" "$WORK/input-jpeg.parquet"
  rm -f "benches/gpu/.seed-budget-jpeg-$n.toml"
done
# The encoded runs over the raw one, and the cores decoding needs at the raw rate.
$PY - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
raw = json.loads((out / "raw.report.json").read_text())
for path in sorted(out.glob("jpeg-decode*.report.json")):
    r = json.loads(path.read_text())
    us = r.get("decode_us_per_segment") or 0.0
    print(f"{path.stem}: {r['segments_per_s'] / raw['segments_per_s']:.3f}x raw; "
          f"{us:.2f} us/segment: {raw['segments_per_s'] * us / 1e6:.1f} cores to decode at the raw rate")
PY
