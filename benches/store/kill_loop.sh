#!/usr/bin/env bash
# The random-kill S3 test run N times in a row, each with its own kill moments (the test draws
# them from SEGPREDICT_TEST_SEED, here the loop's own seeds, so any failure can be replayed
# alone). Writes one line per run (seed, exit, seconds) and a summary to OUT/kill-loop.md.
#
#   bash benches/store/kill_loop.sh [--runs 20] [--test objects::runs_writing_to_s3_killed_at_random_moments_resume_with_no_partial_object_ever_visible] [--out DIR] [--bin TEST_BINARY]
#
# TEST_BINARY defaults to the newest integration-test binary under target/release/deps (build it
# with `cargo test --release --test integration --no-run`).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=20; OUT=$ROOT/benches/store/results; BIN=""
TEST=objects::runs_writing_to_s3_killed_at_random_moments_resume_with_no_partial_object_ever_visible
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2;; --test) TEST=$2; shift 2;; --out) OUT=$2; shift 2;; --bin) BIN=$2; shift 2;;
    -h|--help) sed -n 2,9p "$0"; exit 0;; *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
if [ -z "$BIN" ]; then
  BIN=$(ls -t "$ROOT"/target/release/deps/integration-* 2>/dev/null | grep -v '\.d$' | head -1)
fi
[ -x "$BIN" ] || { echo "no integration-test binary (cargo test --release --test integration --no-run)" >&2; exit 2; }
export VIRTUAL_ENV=${VIRTUAL_ENV:-$ROOT/.venv}
mkdir -p "$OUT/kill-loop-logs"
md=$OUT/kill-loop.md
# Before the results file is opened: rewriting it would count as a change.
provenance=$(python3 "$ROOT/benches/provenance.py" 2>/dev/null || git -C "$ROOT" describe --always --dirty)
{
  echo "# The random-kill S3 test, $RUNS runs in a row"
  echo
  echo "$provenance"
  echo
  echo "Test: \`$TEST\` (three trials a run: kill -9 at a random moment, rerun, output checked against the uninterrupted run; a watcher lists the bucket throughout and fails the test on any object not whole under a final name)."
  echo
  echo "| run | SEGPREDICT_TEST_SEED | exit | seconds | trials: kill moment (still running), parts listed at the kill |"
  echo "|---|---|---|---|---|"
} > "$md"
fails=0; durations=()
for i in $(seq "$RUNS"); do
  seed=$(( 1000003 * i + 17 ))
  log=$OUT/kill-loop-logs/run-$i.log
  t0=$(date +%s.%N)
  SEGPREDICT_TEST_SEED=$seed "$BIN" --exact "$TEST" --nocapture --test-threads 1 > "$log" 2>&1; rc=$?
  t=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
  durations+=("$t")
  [ $rc -eq 0 ] || fails=$((fails + 1))
  trials=$(grep -o 'trial [0-9]: killed after [^,]*([^)]*), [0-9]* parts' "$log" | sed 's/killed after //' | paste -sd ';' -)
  echo "| $i | $seed | $rc | $t | $trials |" >> "$md"
  echo "run $i: seed $seed exit $rc in $t s"
done
median=$(printf '%s\n' "${durations[@]}" | sort -n | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
total=$(printf '%s\n' "${durations[@]}" | awk '{s+=$1} END{printf "%.0f", s}')
{ echo; echo "**$((RUNS - fails)) of $RUNS passed**; a run's median $median s, $total s in all. Logs: \`kill-loop-logs/\`."; } >> "$md"
echo "$((RUNS - fails))/$RUNS passed, median $median s, total $total s"
[ $fails -eq 0 ]
