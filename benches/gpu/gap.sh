#!/usr/bin/env bash
# The gap account (issues 10 and 12), one script, run on the GPU machine:
#   ROWS rows from make_data.py; ROUNDS rounds, alternating, of segpredict
#   (seed-budget.toml) with each model backend in BACKENDS and the careful
#   plain-PyTorch pipeline (plain_pytorch.py --careful: reader thread, log2
#   buckets under 16,384 unpadded, pinned non-blocking uploads, channels-last
#   bf16, next batch queued before the last one's answers are read, writer
#   thread); the weaker plain pipeline once (EXTRA=1); the model alone at
#   every size class of the budget, one and two streams, for TorchScript and
#   (with aoti in BACKENDS) for the AOTInductor package; a profiler trace of
#   the careful pipeline (PROFILE=1); with GPU_MEMORY set, one run per backend
#   with `--gpu-memory $GPU_MEMORY` over MEMORY_ROWS rows; then gap.py splits
#   each pipeline's time beyond the model alone into terms and tabulates
#   memory.
#
#   bash benches/gpu/gap.sh --segpredict target/release/segpredict --model models/digits-seed.pt \
#       --out out/gap --work /tmp/segpredict-gap [--rows 1000000 --rounds 3]
#   bash benches/gpu/gap.sh ... --backends "torchscript aoti" --gpu-memory 6GiB --profile 0 --extra 0
#
# Every setting below is an argument named after its variable (ROWS:
# --rows; benches/args.sh), or that variable in the environment.
#
# BACKENDS: torchscript (MODEL, a TorchScript file) and/or aoti (AOTI_PACKAGE,
# a CUDA bf16 AOTInductor package of the same model; built here with
# tools/make_models.py --aoti --device cuda --dtype bf16 when the file is
# missing, since a package is compiled for the machine that runs it).
# GPU_MEMORY_BACKENDS limits the --gpu-memory runs to some backends,
# SPEED_BACKENDS the `segpredict speed` ceilings; AOTI_ROUNDS=N (TS_ROUNDS=N)
# runs the package (TorchScript) in the first N rounds only.
# POOLINGS: the package is built once per make_models.py --pooling given
# (side by side), and the one whose `segpredict speed` on the input's own
# segments is fastest over 16..1,024 rows a batch is the package measured.
# SUSTAIN: batches in the sustained ceilings (one and two streams): the model alone at the budget's
# shape on the input's own segments for about as long as a run (the H200
# holds its boost clock for a second or two, then its 700 W power cap brings
# it down), which replace the short ceilings at that shape. SUSTAIN_TS: the
# TorchScript model's (one and two streams), SUSTAIN by default; a shorter
# one keeps a long run's call within the device's 10 minutes (each ceiling
# runs its batches once a stream count: twice SUSTAIN for the package).
# ROUNDS=0 runs only what comes before the rounds (data, package, the
# --gpu-memory runs), so a later call on the same machine (same WORK) can
# reuse them: the data and the package are kept when they are already there.
# Results go to $OUT (or out/gap): gap.md, gap.json, runs.tar.gz, gap-log.txt,
# careful-profile.txt, careful-trace.json.gz.
set -uo pipefail
. "$(dirname "$0")/../args.sh"; bench_args "SEGPREDICT OUT WORK MODEL LABELS MAKE_MODELS AOTI_PACKAGE FALLBACK_PACKAGE ROWS ROUNDS BACKENDS AOTI_ROUNDS TS_ROUNDS EXTRA PROFILE PROFILE_ROWS GPU_MEMORY GPU_MEMORY_BACKENDS MEMORY_ROWS POOLINGS PACKAGE_ARGS PACKAGE_CHECK SPEED_BACKENDS CEILING_ITERS PYTHON_AOTI_CEILING SUSTAIN SUSTAIN_TS PYTHON BENCH_COMMIT" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-out/gap}; ROWS=${ROWS:-1000000}; ROUNDS=${ROUNDS:-3}; EXTRA=${EXTRA:-1}; PROFILE=${PROFILE:-1}
PROFILE_ROWS=${PROFILE_ROWS:-20000}; BACKENDS=${BACKENDS:-torchscript}
GPU_MEMORY=${GPU_MEMORY:-}; MEMORY_ROWS=${MEMORY_ROWS:-200000}; GPU_MEMORY_BACKENDS=${GPU_MEMORY_BACKENDS:-}
BIN=$(realpath "${SEGPREDICT:?set SEGPREDICT to the segpredict binary}")
MODEL=$(realpath "${MODEL:-models/digits-seed.pt}"); LABELS=$(realpath "${LABELS:-${MODEL%.pt}.labels.txt}")
MAKE_MODELS=${MAKE_MODELS:-$HERE/../../tools/make_models.py}
PY=${PYTHON:-python3}; WORK=${WORK:-/tmp/segpredict-gap}; RUNS=$WORK/runs
AOTI_PACKAGE=${AOTI_PACKAGE:-$WORK/digits-seed.cuda.bf16.pt2}
export LD_LIBRARY_PATH=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$RUNS" "$WORK/gpumem"; rm -rf "${RUNS:?}"/*
"$PY" "$(dirname "$0")/../provenance.py" ${BIN:+--binary "$BIN"} > "$OUT/provenance.md" || true  # commit and machine
exec > >(tee "$OUT/gap-log.txt") 2>&1

echo "== machine"; date -u
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(free -g | awk '/Mem/{print $2" GiB"}'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "nsys: $(command -v nsys || echo none)"; "$BIN" --version
$PY -c "import torch,pyarrow;print('torch',torch.__version__,'pyarrow',pyarrow.__version__)"
echo "backends: $BACKENDS; rows $ROWS; rounds $ROUNDS; gpu memory target ${GPU_MEMORY:-none}"

has_backend() { [[ " $BACKENDS " == *" $1 "* ]]; }
stamp() { date +%s.%N; }

# The pipeline files with absolute paths (the repo's refers to models/); the
# AOTInductor one takes the package (its dtype, bf16, is the package's).
sed -e "s|^path = \"../../models/digits-seed.pt\"|path = \"$MODEL\"|" \
    -e "s|^labels = .*|labels = \"$LABELS\"|" "$HERE/seed-budget.toml" > "$WORK/seed-budget.toml"
sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$AOTI_PACKAGE\"|" "$WORK/seed-budget.toml" > "$WORK/seed-budget-aoti.toml"
config_of() { if [ "$1" = aoti ]; then echo "$WORK/seed-budget-aoti.toml"; else echo "$WORK/seed-budget.toml"; fi; }
name_of() { if [ "$1" = aoti ]; then echo segpredict-aoti; else echo segpredict; fi; }

rows_of() { $PY -c "import pyarrow.parquet as pq,sys;print(pq.ParquetFile(sys.argv[1]).metadata.num_rows)" "$1" 2>/dev/null || echo 0; }
make_data() { # ROWS FILE: kept when it already holds ROWS rows
  if [ "$(rows_of "$2")" = "$1" ]; then echo "kept $2 ($1 rows)"; else $PY "$HERE/make_data.py" --rows "$1" --out "$2"; fi
}
echo "== data"
make_data "$ROWS" "$WORK/input.parquet" &
DATA_PID=$!
POOLINGS=${POOLINGS:-scan}
build_package() { # POOLING: AOTI_PACKAGE's sibling for that pooling
  # -X faulthandler: a crash in compiled code still says where Python was.
  # PACKAGE_CHECK=0: no check in Python (its package loader crashed on the H200; the
  # labels against TorchScript's and segpredict speed check the package instead).
  local check_flag=(); [ "${PACKAGE_CHECK:-1}" = 0 ] && check_flag=(--no-check)
  # PACKAGE_ARGS: more make_models.py options (e.g. --no-channels-last, --aten searchsorted).
  $PY -X faulthandler "$MAKE_MODELS" --aoti --only digits-seed --device cuda --dtype bf16 --pooling "$1" \
    --out "${AOTI_PACKAGE%.pt2}.$1.pt2" "${check_flag[@]}" ${PACKAGE_ARGS:-} > "$WORK/make-package-$1.log" 2>&1 \
    || { echo "!! package build ($1) or its check failed (exit $?): not a candidate"; rm -f "${AOTI_PACKAGE%.pt2}.$1.pt2"; }
}
if has_backend aoti && [ ! -s "$AOTI_PACKAGE" ]; then
  echo "== AOTInductor packages (tools/make_models.py --aoti --device cuda --dtype bf16), pooling: $POOLINGS"
  t0=$(stamp)
  builds=(); for pooling in $POOLINGS; do build_package "$pooling" & builds+=($!); done
  wait "${builds[@]}"
  for pooling in $POOLINGS; do tail -2 "$WORK/make-package-$pooling.log"; done | tee "$WORK/make-package.log"
  echo "package builds took $(awk "BEGIN{printf \"%.1f\", $(stamp) - $t0}") s"
fi
wait $DATA_PID
make_data "$PROFILE_ROWS" "$WORK/profile.parquet"
sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"PACKAGE\"|" "$WORK/seed-budget.toml" > "$WORK/seed-budget-package.toml"
choose_pooling() { # each built pooling's package timed on the input's segments; the fastest becomes AOTI_PACKAGE
  local pooling rows best="" best_ms="" total
  for pooling in $POOLINGS; do
    local package="${AOTI_PACKAGE%.pt2}.$pooling.pt2"; [ -s "$package" ] || continue
    sed "s|PACKAGE|$package|" "$WORK/seed-budget-package.toml" > "$WORK/pooling.toml"; total=0
    for rows in 16 64 256 1024; do
      "$BIN" speed "$WORK/pooling.toml" --segments 16384 --rows $rows --batches 60 --input "$WORK/profile.parquet" \
        --json "$RUNS/pooling-$pooling-$rows.json" > /dev/null 2>&1 || { total=inf; break; }
      total=$($PY -c "import json,sys;print($total + json.load(open(sys.argv[1]))['speed']['batch_ms_median'])" "$RUNS/pooling-$pooling-$rows.json")
    done
    echo "pooling $pooling: $total ms for one batch at each of 16, 64, 256, 1024 rows" | tee -a "$RUNS/pooling.txt"
    if [ "$total" != inf ] && { [ -z "$best" ] || $PY -c "import sys;sys.exit(not $total < $best_ms)"; }; then best=$pooling; best_ms=$total; fi
  done
  [ -n "$best" ] && cp "${AOTI_PACKAGE%.pt2}.$best.pt2" "$AOTI_PACKAGE" && echo "the package measured: pooling $best" | tee -a "$RUNS/pooling.txt"
}
if has_backend aoti && [ ! -s "$AOTI_PACKAGE" ]; then
  choose_pooling
  # FALLBACK_PACKAGE is used when no build succeeded.
  if [ ! -s "$AOTI_PACKAGE" ] && [ -n "${FALLBACK_PACKAGE:-}" ]; then
    echo "!! no package built: using FALLBACK_PACKAGE $FALLBACK_PACKAGE" | tee -a "$WORK/make-package.log"
    cp "$FALLBACK_PACKAGE" "$AOTI_PACKAGE"
  fi
fi
has_backend aoti && [ -s "$AOTI_PACKAGE" ] && ls -la "$AOTI_PACKAGE"
[ -n "$GPU_MEMORY" ] && make_data "$MEMORY_ROWS" "$WORK/memory.parquet"

check_ids() { # NAME OUTPUT(dir or file) INPUT
  $PY - "$1" "$2" "$3" "$RUNS" <<'PY'
import json, sys, pyarrow.dataset as ds, pyarrow.parquet as pq
name, out, inp, runs = sys.argv[1:]
ids = ds.dataset(out, format="parquet").to_table(columns=["id"]).column("id").to_pylist()
n_in = pq.ParquetFile(inp).metadata.num_rows
json.dump({"input_rows": n_in, "output_rows": len(ids), "unique_ids": len(set(ids))}, open(f"{runs}/{name}.ids.json", "w"))
PY
}
segpredict() { # NAME BACKEND [ARGS...]
  local name=$1 backend=$2 t0 t1; shift 2; t0=$(stamp)
  "$BIN" run "$(config_of "$backend")" --input "$WORK/input.parquet" --output "$WORK/$name" --overwrite "$@" > "$RUNS/$name.log" 2>&1
  local rc=$?; t1=$(stamp); echo "$t0 $t1" > "$RUNS/$name.ext"
  echo "$name: $(grep -E "segments/s" "$RUNS/$name.log" | head -1)"; [ $rc -eq 0 ] || { echo "!! $name exit $rc"; tail -5 "$RUNS/$name.log"; }
  [ -f "$WORK/$name/_report.json" ] && $PY "$HERE/report_with_batches.py" "$WORK/$name" "$RUNS/$name.json" && check_ids "$name" "$WORK/$name" "$WORK/input.parquet"
}
baseline() { # NAME ARGS...
  local name=$1 t0 t1; shift; t0=$(stamp)
  $PY "$HERE/plain_pytorch.py" --model "$MODEL" --labels "$LABELS" --input "$WORK/input.parquet" \
    --output "$WORK/$name.parquet" --policy budget --budget 16384 --dtype bf16 --json "$RUNS/$name.json" "$@" > "$RUNS/$name.log" 2>&1
  local rc=$?; t1=$(stamp); echo "$t0 $t1" > "$RUNS/$name.ext"
  tail -1 "$RUNS/$name.log"; [ $rc -eq 0 ] || echo "!! $name exit $rc"
  [ -f "$WORK/$name.parquet" ] && check_ids "$name" "$WORK/$name.parquet" "$WORK/input.parquet"
}

# Untimed first runs, so the libraries are in the page cache before any timed round.
if [ "$PROFILE" = 1 ]; then
  echo "== profile (careful pipeline, $PROFILE_ROWS rows, PyTorch profiler)"
  $PY "$HERE/profile_careful.py" --model "$MODEL" --labels "$LABELS" --input "$WORK/profile.parquet" --out "$WORK/profile" \
    > "$RUNS/profile.log" 2>&1 || { echo "!! profile failed"; tail -5 "$RUNS/profile.log"; }
  cp "$WORK/profile/careful-profile.txt" "$WORK/profile/careful-trace.json.gz" "$OUT/" 2>/dev/null
fi

echo "== warm-up (untimed, $PROFILE_ROWS rows): each backend and the careful pipeline"
# A backend whose warm-up fails is left out of the rounds (said here), so the others still run.
for backend in $BACKENDS; do
  if "$BIN" run "$(config_of "$backend")" --input "$WORK/profile.parquet" --output "$WORK/warm-$backend" --overwrite > "$WORK/warm-$backend.log" 2>&1; then
    echo "warm-up $backend: $(grep -E "segments/s" "$WORK/warm-$backend.log" | head -1)"
  else
    echo "!! warm-up $backend exit $?: left out of the rounds"; tail -5 "$WORK/warm-$backend.log"
    BACKENDS=$(echo " $BACKENDS " | sed "s/ $backend / /g")
  fi
  cp "$WORK/warm-$backend.log" "$RUNS/"
done
$PY "$HERE/plain_pytorch.py" --model "$MODEL" --labels "$LABELS" --input "$WORK/profile.parquet" --output "$WORK/warm-careful.parquet" \
  --policy budget --budget 16384 --dtype bf16 --careful --channels-last --json "$WORK/warm-careful.json" > "$WORK/warm-careful.log" 2>&1 \
  || { echo "!! warm-up careful failed"; tail -5 "$WORK/warm-careful.log"; }

if [ -n "$GPU_MEMORY" ]; then
  echo "== --gpu-memory $GPU_MEMORY, $MEMORY_ROWS rows, each backend"
  rm -rf "${WORK:?}/gpumem"/*
  target=$($PY -c "import sys;n=sys.argv[1];u={'KiB':2**10,'MiB':2**20,'GiB':2**30,'KB':1e3,'MB':1e6,'GB':1e9};k=next((k for k in u if n.endswith(k)),'');print(int(float(n[:len(n)-len(k)])*u.get(k,1)))" "$GPU_MEMORY")
  for backend in ${GPU_MEMORY_BACKENDS:-$BACKENDS}; do
    has_backend "$backend" || continue
    name=gpumem-$(name_of "$backend")
    "$BIN" run "$(config_of "$backend")" --input "$WORK/memory.parquet" --output "$WORK/$name" --overwrite --gpu-memory "$GPU_MEMORY" \
      > "$WORK/gpumem/$name.log" 2>&1 || { echo "!! $name exit $?"; tail -5 "$WORK/gpumem/$name.log"; }
    echo "$name: $(grep -E "segments/s" "$WORK/gpumem/$name.log" | head -1)"
    cp "$WORK/$name/_report.json" "$WORK/gpumem/$name.json" 2>/dev/null && echo "$target" > "$WORK/gpumem/$name.target"
    RUNS=$WORK/gpumem check_ids "$name" "$WORK/$name" "$WORK/memory.parquet"
  done
fi

summarise() {
  cp "$WORK"/gpumem/* "$RUNS/" 2>/dev/null
  cp "$WORK/make-package.log" "$RUNS/" 2>/dev/null
  tar -czf "$OUT/runs.tar.gz" -C "$RUNS" .; echo "== gap"; $PY "$HERE/gap.py" "$RUNS" "$OUT"
}
if [ "$ROUNDS" = 0 ]; then
  cp "$WORK"/gpumem/* "$RUNS/" 2>/dev/null; cp "$WORK/make-package.log" "$RUNS/" 2>/dev/null
  tar -czf "$OUT/runs.tar.gz" -C "$RUNS" .
  exit 0
fi

for round in $(seq "$ROUNDS"); do
  echo "== round $round"
  for backend in $BACKENDS; do
    [ "$backend" = aoti ] && [ "$round" -gt "${AOTI_ROUNDS:-$ROUNDS}" ] && continue
    [ "$backend" = torchscript ] && [ "$round" -gt "${TS_ROUNDS:-$ROUNDS}" ] && continue
    segpredict "$(name_of "$backend")-$round" "$backend"
  done
  baseline "careful-$round" --careful --channels-last
  tar -czf "$OUT/runs.tar.gz" -C "$RUNS" .  # what a run cut short still brings back
done

echo "== labels: segpredict round 1 (each backend) against careful round 1"
for backend in $BACKENDS; do
  [ "$backend" = aoti ] && [ "${AOTI_ROUNDS:-$ROUNDS}" = 0 ] && continue  # no run of it this call
  $PY - "$WORK/$(name_of "$backend")-1" "$WORK/careful-1.parquet" "$(name_of "$backend")" <<'PY' | tee -a "$RUNS/labels.txt"
import sys, pyarrow.dataset as ds
def load(p):
    t = ds.dataset(p, format="parquet").to_table(columns=["id", "label_id"])
    return dict(zip(t.column("id").to_pylist(), t.column("label_id").to_pylist()))
a, b = load(sys.argv[1]), load(sys.argv[2])
same = sum(a[k] == b.get(k) for k in a)
print(f"{sys.argv[3]}: rows {len(a)} / {len(b)}; same label as careful {same} ({same / max(len(a), 1):.5f})")
PY
done

echo "== the model alone at the budget's size classes"
CLASSES=$($PY -c "import json;print(' '.join(map(str,json.load(open('$RUNS/segpredict-1.json'))['size_classes'])))" 2>/dev/null || echo "1024 2048 4096 8192 12288 16384")
$PY "$HERE/model_ceiling.py" --model "$MODEL" --layouts channels_last --benchmark off --streams 1 2 \
  --segments $CLASSES --iters "${CEILING_ITERS:-120}" --json "$RUNS/ceiling.json"
if has_backend aoti && [ "${PYTHON_AOTI_CEILING:-1}" = 1 ]; then
  timeout 120 $PY -X faulthandler "$HERE/model_ceiling.py" --aoti "$AOTI_PACKAGE" --streams 1 2 \
    --segments $CLASSES --iters "${CEILING_ITERS:-120}" --json "$RUNS/ceiling-aoti.json" \
    || echo "!! the package alone in Python failed (exit $?)"
fi
# The model alone through segpredict's own loader (`segpredict speed`), one
# stream, 400 rows a batch like model_ceiling.py: for each backend at each
# class. For the package it is the ceiling when Python's loader cannot load it.
speed_to_ceiling() { # BACKEND OUT.json SPEED.json...: segpredict speed's measurements as model_ceiling.py's results
  $PY - "$@" <<'PY'
import json, sys
backend, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
layout = "aoti" if backend == "aoti" else "channels_last"
results = []
for f in files:
    m = json.load(open(f)); s = m["speed"]; streams = s.get("streams", 1)
    # Over more streams speed's per-batch figure is the time between a stream's batches, not a batch's device time.
    ms = {"device_ms_median": round(s["batch_ms_median"], 3), "device_ms_p90": round(s["batch_ms_p90"], 3)} if streams == 1 else \
         {"device_ms_median": None, "device_ms_p90": None, "stream_interval_ms_median": round(s["batch_ms_median"], 3)}
    results.append({"layout": layout, "cudnn_benchmark": False, "streams": streams, "segments": s["segments"], "rows": s["rows"],
                    "iters": s["batches"], "data": m.get("data", "pattern"), "segments_per_s": round(s["segments_per_s"]),
                    **ms, "queue_ms_median": None, "via": "segpredict speed"})
json.dump({"results": sorted(results, key=lambda r: r["segments"])}, open(out, "w"), indent=1)
print(f"segpredict speed, {backend}:", ", ".join(f"{r['segments']} ({r['streams']} stream(s)): {r['segments_per_s']:,} segs/s" for r in results))
PY
}
speed_ceiling() { # BACKEND OUT.json
  local backend=$1 out=$2 size
  for size in $CLASSES; do
    "$BIN" speed "$(config_of "$backend")" --segments "$size" --rows 400 --batches "${CEILING_ITERS:-120}" \
      --json "$RUNS/speed-$backend-$size.json" || echo "!! segpredict speed $backend $size exit $?"
  done
  speed_to_ceiling "$backend" "$out" "$RUNS"/speed-"$backend"-*.json
}
summarise  # what a run cut short during the ceilings below still brings back
for backend in ${SPEED_BACKENDS:-$BACKENDS}; do
  has_backend "$backend" && speed_ceiling "$backend" "$RUNS/speed-ceiling-$backend.json"
done
if has_backend aoti && [ ! -s "$RUNS/ceiling-aoti.json" ] && [ -s "$RUNS/speed-ceiling-aoti.json" ]; then
  echo "the package alone: from segpredict speed (Python's loader failed)"
  cp "$RUNS/speed-ceiling-aoti.json" "$RUNS/ceiling-aoti.json"
fi
sustained_merge() { # CEILING.json SUSTAINED.json: the sustained results replace the short ones at their shape
  $PY - "$1" "$2" <<'PY'
import json, shutil, sys
ceiling, sustained = sys.argv[1], sys.argv[2]
shutil.copy(ceiling, ceiling.replace(".json", "-short.json"))
short, long = json.load(open(ceiling))["results"], json.load(open(sustained))["results"]
for r in long:
    r["sustained"] = True
# Every short result at a sustained shape goes, whatever its streams: the best of them would
# otherwise stand in for the sustained ceiling.
key = lambda r: (r["layout"], r["segments"], r.get("cudnn_benchmark"))
replaced = {key(r) for r in long}
for r in short:
    if key(r) in replaced:
        match = next((x for x in long if key(x) == key(r) and x["streams"] == r["streams"]), long[0])
        print(f"{r['layout']} {r['segments']} segments, {r['streams']} stream(s): {r['segments_per_s']:,} segs/s over "
              f"{r.get('iters')} batches -> {match['segments_per_s']:,} over {match.get('iters')} (sustained)")
json.dump({"results": [r for r in short if key(r) not in replaced] + long}, open(ceiling, "w"), indent=1)
PY
}
SUSTAIN=${SUSTAIN:-1500}
if [ "$SUSTAIN" -gt 0 ]; then
  BUDGET=$(echo $CLASSES | awk '{print $NF}')
  echo "== sustained: the model alone at $BUDGET segments, $SUSTAIN batches (TorchScript ${SUSTAIN_TS:-$SUSTAIN}), on the input's own segments"
  $PY "$HERE/model_ceiling.py" --model "$MODEL" --layouts channels_last --benchmark off --streams 1 2 \
    --segments "$BUDGET" --iters "${SUSTAIN_TS:-$SUSTAIN}" --input "$WORK/input.parquet" --json "$RUNS/ceiling-sustained.json" \
    && sustained_merge "$RUNS/ceiling.json" "$RUNS/ceiling-sustained.json"
  if has_backend aoti && [ -s "$RUNS/ceiling-aoti.json" ]; then
    # One stream, then two (the best of them is the ceiling; a failed second stream leaves the first's).
    sustained=()
    for streams in 1 2; do
      file="$RUNS/sustained-speed-aoti-$streams.json"; rm -f "$file"
      "$BIN" speed "$(config_of aoti)" --segments "$BUDGET" --rows 400 --batches "$SUSTAIN" --input "$WORK/input.parquet" \
        --streams $streams --json "$file" || echo "!! segpredict speed --streams $streams exit $?"
      [ -s "$file" ] && sustained+=("$file")
    done
    [ ${#sustained[@]} -gt 0 ] && speed_to_ceiling aoti "$RUNS/ceiling-aoti-sustained.json" "${sustained[@]}" \
      && sustained_merge "$RUNS/ceiling-aoti.json" "$RUNS/ceiling-aoti-sustained.json"
  fi
fi

summarise
# Last, so a run cut short still has its account.
if [ "$EXTRA" = 1 ]; then
  echo "== weaker baseline (one round): simple loop, log2 budget, channels-last"
  baseline python-simple-channels-last --channels-last
  summarise
fi
