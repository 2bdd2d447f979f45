#!/usr/bin/env bash
# Repeated rounds of the throughput comparison (the machine is noisy, so
# medians): segpredict's budget pipeline with its defaults (channels-last on
# CUDA) and with NCHW weights, beside the plain-PyTorch budget pipeline with
# NCHW and channels-last weights, on the same data. Prints a median table.
#   bash benches/gpu/variants.sh --segpredict target/release/segpredict --out out/gpu-variants --work /tmp/segpredict-variants
set -euo pipefail
. "$(dirname "$0")/../args.sh"; bench_args "SEGPREDICT OUT WORK ROWS ROUNDS DEVICE PYTHON BENCH_COMMIT" "$@"
OUT=${OUT:-out/gpu-variants}; ROWS=${ROWS:-200000}; BIN=${SEGPREDICT:?}; PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/segpredict-variants}; P=benches/gpu; ROUNDS=${ROUNDS:-3}
export LD_LIBRARY_PATH=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
mkdir -p "$OUT" "$WORK"
"$PY" "$(dirname "$0")/../provenance.py" ${BIN:+--binary "$BIN"} > "$OUT/provenance.md" || true  # commit and machine
[ -f "$WORK/input.parquet" ] || $PY $P/make_data.py --rows "$ROWS" --out "$WORK/input.parquet"
variant() { # NAME then lines appended to [model]
  local name=$1; shift
  sed "s|^dtype = \"bf16\"|dtype = \"bf16\"\n$*|" $P/seed-budget.toml > $P/.variant-$name.toml
  "$BIN" run $P/.variant-$name.toml --input "$WORK/input.parquet" --output "$WORK/$name" --device "${DEVICE:-cuda}" 2>&1 | grep -E "segments/s|GPU busy|GPU memory"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], d['segments_per_s'])" \
    "$WORK/$name/_report.json" "$name" >> "$OUT/rounds.txt"
  rm -f $P/.variant-$name.toml
}
baseline() { # NAME [ARGS...]
  local name=$1; shift
  $PY $P/plain_pytorch.py --model models/digits-seed.pt --labels models/digits-seed.labels.txt \
    --input "$WORK/input.parquet" --output "$WORK/$name.parquet" --policy budget --budget 16384 --dtype bf16 \
    --json "$WORK/$name.json" --device "${DEVICE:-cuda}" "$@"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], d['segments'] / d['wall_s'])" \
    "$WORK/$name.json" "$name" >> "$OUT/rounds.txt"
}
rm -f "$OUT/rounds.txt"
for round in $(seq "$ROUNDS"); do
  echo "== round $round"
  echo "-- segpredict (defaults)"; variant segpredict ""
  echo "-- segpredict, NCHW weights"; variant segpredict-nchw "channels_last = false"
  echo "-- python budget"; baseline python-budget
  echo "-- python budget, channels-last"; baseline python-budget-channels-last --channels-last
done
python3 - "$OUT/rounds.txt" <<'PY' | tee "$OUT/medians.md"
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, sps = line.split()
    runs.setdefault(name, []).append(float(sps))
med = {k: statistics.median(v) for k, v in runs.items()}
print("| run | rounds | median segments/s | min | max |\n|---|---|---|---|---|")
for k, v in runs.items():
    print(f"| {k} | {len(v)} | {med[k]:,.0f} | {min(v):,.0f} | {max(v):,.0f} |")
print()
for ours in [k for k in med if k.startswith("segpredict")]:
    for base in [k for k in med if k.startswith("python")]:
        print(f"- {ours} / {base}: {med[ours] / med[base]:.2f}x (medians)")
PY
