#!/usr/bin/env bash
# Issue 33 in one device call (<= 9 minutes): size classes as compiled shapes.
#
#   1. builds the CUDA bf16 bundle of digits-seed on the device (tools/make_models.py --aoti
#      --size-classes, the budget's six classes, compiled in parallel) while make_data.py writes
#      ROWS rows and the Python anchors compile every class's shape once, cold (anchor.py
#      --warm-only: their cold compile time, inflated by the build beside them, and inductor's
#      caches filled, so each round's compile is a warm-cache one: a user's second night); the
#      bundle's dynamic model is also copied out as a plain package;
#   2. untimed runs on PROFILE_ROWS rows of each segpredict variant (the first one on a fresh
#      machine gives the cold time to first batch), then the package(s) alone (`segpredict speed`,
#      SUSTAIN batches of the input's segments at 16,384 segments, 400 rows a batch);
#   3. ROUNDS rounds, alternating: segpredict with the dynamic package, with the per-class
#      packages (cuda_graphs = false), with per-class packages + CUDA graphs; the Python anchor
#      (anchor.py: torch.compile reduce-overhead, dynamic=False, same classes) and torch.compile's
#      default mode with dynamic shapes;
#   4. labels of each against the dynamic package's; summary.py writes summary.md and summary.json.
#
# A step that would pass DEADLINE seconds since the start is skipped and said so (the device kills
# the call at its time limit; everything so far is under $OUT). Every step's output is in $OUT/log.
#
#   OUT=... bash benches/gpu/size-classes/run.sh            # SEGPREDICT=.device/segpredict by default
#   ROWS=1000000 ROUNDS=2 DEADLINE=530 ...                    # the defaults
set -x -uo pipefail
START=$(date +%s)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${OUT:-$ROOT/out/size-classes}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log") 2>&1
# 600,000 rows (about 25M segments, 15 s a run): 1,000,000 with the build and every variant twice
# did not fit 9 minutes by the estimate (each segpredict run about 27 s, each anchor the same plus
# its compile).
ROWS=${ROWS:-600000}; ROUNDS=${ROUNDS:-2}; DEADLINE=${DEADLINE:-530}; PROFILE_ROWS=${PROFILE_ROWS:-20000}
SUSTAIN=${SUSTAIN:-400}; CLASSES=${CLASSES:-1024,2048,4096,8192,12288,16384}; JOBS=${JOBS:-7}
BIN=$(realpath "${SEGPREDICT:-$ROOT/.device/segpredict}")
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/segpredict-size-classes}; RUNS=$OUT/runs
mkdir -p "$WORK" "$RUNS"
chmod +x "$BIN" 2>/dev/null
[ -x "$BIN" ] || { echo "!! no segpredict binary at ${SEGPREDICT:-$ROOT/.device/segpredict} (see README.md: Prepare)"; exit 2; }
export LD_LIBRARY_PATH=$($PY -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export PYTHONUNBUFFERED=1

elapsed() { echo $(( $(date +%s) - START )); }
# fits SECONDS NAME: whether a step of about SECONDS still fits before DEADLINE (says so when not).
fits() { if [ $(( $(elapsed) + $1 )) -le "$DEADLINE" ]; then return 0; fi
         echo "!! skipped $2: $(elapsed) s elapsed, about $1 s more would pass DEADLINE=$DEADLINE" | tee -a "$OUT/skipped.txt"; return 1; }
stamp() { date +%s.%N; }

echo "== machine"; date -u
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(free -g | awk '/Mem/{print $2" GiB"}'); load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" --version
$PY -c "import torch,pyarrow;print('torch',torch.__version__,'pyarrow',pyarrow.__version__)"

echo "== data ($ROWS rows) and the anchors' cold compiles beside the bundle build"
$PY "$ROOT/benches/gpu/make_data.py" --rows "$PROFILE_ROWS" --out "$WORK/profile.parquet" > "$RUNS/make-data.log" 2>&1
$PY "$ROOT/benches/gpu/make_data.py" --rows "$ROWS" --out "$WORK/input.parquet" >> "$RUNS/make-data.log" 2>&1 &
DATA=$!
( for mode in reduce-overhead default-dynamic; do
    $PY "$HERE/anchor.py" --mode $mode --warm-only --input "$WORK/profile.parquet" --output /dev/null \
      --json "$RUNS/anchor-cold-$mode.json" > "$RUNS/anchor-cold-$mode.log" 2>&1
    echo "anchor cold compile $mode exit $?: $(tail -1 "$RUNS/anchor-cold-$mode.log")"
  done ) &
COLD=$!
BUNDLE=$WORK/digits-seed.cuda.bf16.classes.pt2; DYNAMIC=$WORK/digits-seed.cuda.bf16.pt2
t0=$(stamp)
$PY -X faulthandler "$ROOT/tools/make_models.py" --aoti --only digits-seed --device cuda --dtype bf16 \
  --size-classes "$CLASSES" --jobs "$JOBS" --no-check --out "$BUNDLE" > "$RUNS/build-bundle.log" 2>&1
echo "bundle build exit $? in $(awk "BEGIN{print $(stamp) - $t0}") s"; tail -12 "$RUNS/build-bundle.log"
# The dynamic model alone, as a plain package (the same compiled model the bundle falls back to).
$PY - "$BUNDLE" "$DYNAMIC" <<'PY'
import sys, zipfile
src, dst = sys.argv[1:]
with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
    for info in z.infolist():
        if "/data/aotinductor/class_" not in info.filename:
            out.writestr(info, z.read(info))
print("dynamic package", dst)
PY
ls -la "$WORK"/*.pt2
wait $DATA; echo "data exit $?"; tail -3 "$RUNS/make-data.log"

# The pipeline files: benches/gpu/seed-budget.toml (16,384-segment budget, 4,096 rows, padded,
# bf16) with each model; `cuda_graphs = false` for the per-class packages without graphs.
conf() { # NAME MODEL [EXTRA MODEL LINE]
  sed -e "s|^path = \"../../models/digits-seed.pt\"|path = \"$2\"|" \
      -e "s|^labels = .*|labels = \"$ROOT/models/digits-seed.labels.txt\"|" \
      -e "s|^dtype = \"bf16\"|dtype = \"bf16\"\n${3:-}|" "$ROOT/benches/gpu/seed-budget.toml" > "$WORK/$1.toml"
}
conf dynamic "$DYNAMIC"; conf classes "$BUNDLE" "cuda_graphs = false"; conf graphs "$BUNDLE" "cuda_graphs = true"
cat "$WORK/graphs.toml"

segpredict() { # NAME VARIANT INPUT
  local t0 t1 rc; t0=$(stamp)
  "$BIN" run "$WORK/$2.toml" --input "$3" --output "$WORK/out-$1" --overwrite > "$RUNS/$1.log" 2>&1; rc=$?
  t1=$(stamp); echo "$t0 $t1" > "$RUNS/$1.ext"
  echo "$1: exit $rc, $(grep -E "segments/s" "$RUNS/$1.log" | head -1)"
  [ $rc -eq 0 ] || tail -5 "$RUNS/$1.log"
  cp "$WORK/out-$1/_report.json" "$RUNS/$1.report.json" 2>/dev/null
}
anchor() { # NAME MODE
  local t0 t1 rc; t0=$(stamp)
  $PY "$HERE/anchor.py" --mode "$2" --warm --input "$WORK/input.parquet" --output "$WORK/out-$1.parquet" \
    --json "$RUNS/$1.json" > "$RUNS/$1.log" 2>&1; rc=$?
  t1=$(stamp); echo "$t0 $t1" > "$RUNS/$1.ext"
  echo "$1: exit $rc, $(tail -1 "$RUNS/$1.log")"
}

echo "== untimed first runs on $PROFILE_ROWS rows (cold start first), then the package(s) alone"
for v in dynamic classes graphs; do fits 30 "first run $v" && segpredict "first-$v" "$v" "$WORK/profile.parquet"; done
# Nothing is timed beside the anchors' cold compiles.
wait $COLD; echo "cold compiles done at $(elapsed) s"
for v in dynamic classes graphs; do
  fits 40 "speed $v" || continue
  "$BIN" speed "$WORK/$v.toml" --segments 16384 --rows 400 --batches "$SUSTAIN" --input "$WORK/input.parquet" \
    --json "$RUNS/speed-$v.json" > "$RUNS/speed-$v.log" 2>&1; echo "speed $v exit $?: $(tail -1 "$RUNS/speed-$v.log")"
done

for round in $(seq "$ROUNDS"); do
  echo "== round $round"
  for v in dynamic classes graphs; do fits 45 "round $round $v" && segpredict "$v-$round" "$v" "$WORK/input.parquet"; done
  fits 80 "round $round anchor reduce-overhead" && anchor "anchor-ro-$round" reduce-overhead
  fits 60 "round $round anchor default-dynamic" && anchor "anchor-dyn-$round" default-dynamic
done

echo "== labels against the dynamic package's (round 1)"
$PY - "$WORK" "$RUNS" <<'PY' | tee "$RUNS/labels.txt"
import sys, os, pyarrow.dataset as ds
work, runs = sys.argv[1:]
def load(p):
    t = ds.dataset(p, format="parquet").to_table(columns=["id", "label_id"])
    return dict(zip(t.column("id").to_pylist(), t.column("label_id").to_pylist()))
base = f"{work}/out-dynamic-1"
if not os.path.isdir(base):
    sys.exit("no dynamic run to compare with")
want = load(base)
for name, path in [("classes", f"{work}/out-classes-1"), ("graphs", f"{work}/out-graphs-1"),
                   ("anchor-ro", f"{work}/out-anchor-ro-1.parquet"), ("anchor-dyn", f"{work}/out-anchor-dyn-1.parquet")]:
    if not os.path.exists(path):
        print(f"{name}: no output"); continue
    got = load(path)
    same = sum(got.get(k) == v for k, v in want.items())
    print(f"{name}: rows {len(got)} / {len(want)}; same label as the dynamic package {same} ({same / max(len(want), 1):.5f})")
PY

echo "== summary"
$PY "$HERE/summary.py" "$RUNS" "$OUT" || echo "!! summary failed"
cp "$WORK"/*.toml "$RUNS/" 2>/dev/null
echo "done in $(elapsed) s"
