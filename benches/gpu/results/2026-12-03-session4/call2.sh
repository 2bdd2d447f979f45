#!/usr/bin/env bash
# Session 4, call 2 (same machine as call 1 if still warm): call 1's step 3 again with
# the pipeline's dtype kept (bf16), plus the package built as today (default).
set -uo pipefail
DEV=.device; W=/tmp/w
export LD_LIBRARY_PATH=$(python3 -c "import torch,os;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
chmod +x $DEV/segpredict; ls $W
[ -f $W/input.parquet ] || python3 $DEV/gpu/make_data.py --rows 20000 --out $W/input.parquet
(TORCHINDUCTOR_CACHE_DIR=/tmp/ind-default timeout 200 python3 $DEV/tools/make_models.py --aoti --only digits-seed --device cuda --dtype bf16 --no-check --out $W/default.pt2 > "$OUT/build-default.log" 2>&1; echo "build default exit $?") &
LABELS=$(realpath $DEV/models/digits-seed.labels.txt)
one() { m=$1; if [ $m = torchscript ]; then model=$(realpath $DEV/models/digits-seed.pt); else model=$W/$m.pt2; fi
  [ -f "$model" ] || { echo "no $model"; return; }
  sed -e "s|^path = \"[^\"]*\\.pt\"|path = \"$model\"|" -e "s|^labels = .*|labels = \"$LABELS\"|" $DEV/gpu/seed-budget.toml > $W/$m.toml
  timeout 90 $DEV/segpredict run $W/$m.toml --input $W/input.parquet --output $W/out-$m --overwrite > "$OUT/run-$m.log" 2>&1
  echo "segpredict ($m) exit $?"; tail -5 "$OUT/run-$m.log"; cp $W/out-$m/_report.json "$OUT/report-$m.json" 2>/dev/null; }
[ -d $W/out-torchscript ] || one torchscript
one aten-all; one aten-cumsum
wait; one default
python3 - $W aten-all aten-cumsum default <<'PY' 2>&1 | tee "$OUT/labels.txt"
import sys, pyarrow.dataset as ds
def load(p):
    t = ds.dataset(p, format="parquet", exclude_invalid_files=True).to_table(columns=["id", "label_id", "score"])
    return {i: (l, s) for i, l, s in zip(*(t.column(c).to_pylist() for c in ["id", "label_id", "score"]))}
w = sys.argv[1]; ts = load(f"{w}/out-torchscript")
for b in sys.argv[2:]:
    try:
        a = load(f"{w}/out-{b}")
    except Exception as e:
        print(b, "no output", e); continue
    same = sum(a[k][0] == ts[k][0] for k in a if k in ts)
    worst = max((abs(a[k][1] - ts[k][1]) for k in a if k in ts and a[k][0] == ts[k][0]), default=float("nan"))
    print(f"{b}: rows {len(a)} / {len(ts)}, same label as TorchScript {same} ({same / max(len(a), 1):.5f}), largest score difference where they agree {worst:.3g}")
PY
