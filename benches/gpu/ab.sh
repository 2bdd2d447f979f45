#!/usr/bin/env bash
# A/B of segpredict builds and settings on the GPU machine, in one run:
# alternating rounds on the same data, the model alone at the budget's size
# classes, and gap.py's account for each arm.
#
#   bash benches/gpu/ab.sh --arms "old:path/to/segpredict-old new:path/to/segpredict new-unpadded:path/to/segpredict:unpadded" \
#     --model models/digits-seed.pt --out out/ab --work /tmp/segpredict-ab [--rows 600000]
# An arm is NAME:BINARY[:unpadded] (unpadded: pad_to_size_classes = false).
set -uo pipefail
. "$(dirname "$0")/../args.sh"; bench_args "ARMS OUT WORK MODEL LABELS ROWS ROUNDS PYTHON BENCH_COMMIT" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-out/ab}; ROWS=${ROWS:-600000}; ROUNDS=${ROUNDS:-3}; ARMS=${ARMS:?}
MODEL=$(realpath "${MODEL:-models/digits-seed.pt}"); LABELS=$(realpath "${LABELS:-${MODEL%.pt}.labels.txt}")
PY=${PYTHON:-python3}; WORK=${WORK:-/tmp/segpredict-ab}; RUNS=$WORK/runs
export LD_LIBRARY_PATH=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$RUNS"; rm -rf "${RUNS:?}"/*
"$PY" "$(dirname "$0")/../provenance.py" > "$OUT/provenance.md" || true  # commit and machine
exec > >(tee "$OUT/ab-log.txt") 2>&1
echo "== machine"; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "cores $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg)"
sed -e "s|^path = \"../../models/digits-seed.pt\"|path = \"$MODEL\"|" \
    -e "s|^labels = .*|labels = \"$LABELS\"|" "$HERE/seed-budget.toml" > "$WORK/padded.toml"
sed -e "s|^pad_to_size_classes = true|pad_to_size_classes = false|" "$WORK/padded.toml" > "$WORK/unpadded.toml"
$PY "$HERE/make_data.py" --rows "$ROWS" --out "$WORK/input.parquet"
# Untimed warm-up: libraries into the page cache.
first_bin=$(echo "$ARMS" | awk '{print $1}' | cut -d: -f2)
"$(realpath "$first_bin")" run "$WORK/padded.toml" --input "$HERE/../../sample_data/digits.parquet" --output "$WORK/warm" --overwrite > /dev/null 2>&1
for round in $(seq "$ROUNDS"); do
  echo "== round $round"
  for arm in $ARMS; do
    IFS=: read -r name bin mode <<< "$arm"
    cfg=$WORK/padded.toml; [ "${mode:-}" = unpadded ] && cfg=$WORK/unpadded.toml
    t0=$(date +%s.%N)
    "$(realpath "$bin")" run "$cfg" --input "$WORK/input.parquet" --output "$WORK/$name" --overwrite > "$RUNS/$name-$round.log" 2>&1 || echo "!! $name exit $?"
    echo "$t0 $(date +%s.%N)" > "$RUNS/$name-$round.ext"
    $PY "$HERE/report_with_batches.py" "$WORK/$name" "$RUNS/$name-$round.json"
    echo "$name: $(grep -E 'segments/s' "$RUNS/$name-$round.log" | head -1)"
  done
done
CLASSES=$($PY -c "import json,glob;print(' '.join(map(str,json.load(open(sorted(glob.glob('$RUNS/*-1.json'))[0]))['size_classes'])))")
$PY "$HERE/model_ceiling.py" --model "$MODEL" --layouts channels_last --benchmark off --streams 1 2 \
  --segments $CLASSES --iters 120 --json "$RUNS/ceiling.json"
tar -czf "$OUT/runs.tar.gz" -C "$RUNS" .
$PY - "$RUNS" <<'PY'
import glob, json, sys
for p in sorted(glob.glob(sys.argv[1] + "/*-[0-9].json")):
    m = json.load(open(p)).get("memory") or {}
    print(p.rsplit("/", 1)[1], {k: m.get(k) for k in ("peak_allocated_bytes", "peak_reserved_bytes", "reserved_growth_events_after_warmup")})
PY
$PY "$HERE/gap.py" "$RUNS" "$OUT"
