"""segpredict against a plain-PyTorch CPU pipeline on the same data, this
machine's CPU: the sample repeated 5 times with fresh ids (10,000 items),
digits-small in f32, log2 buckets under segpredict's budget (read from its
report: 1,024 segments on CPU unless the pipeline sets one), pyarrow in and
out. The pipelines run alternately, --rounds times; medians, their ratios
(and the median of per-round ratios), CPU seconds, and a check that every id
got the same label from each.

    python benches/cpu/compare.py [--rounds 5] [--times 5] [--bin target/release/segpredict]

The plain pipeline is benches/gpu/plain_pytorch.py on the CPU, libtorch's
intra-op threads at their default (one per core), under inference_mode:
- `careful-channels-last`: a reader thread (pyarrow, numpy-gathered log2
  buckets, unpadded), the model on the main thread, a writer thread,
  channels-last weights; the same budget as segpredict;
- `careful-channels-last-passive`: the same with OMP_WAIT_POLICY=PASSIVE, so
  libtorch's OpenMP threads sleep instead of spinning while Python works
  between operators (they spun 60% of its CPU time at this budget);
- `careful-channels-last-4096`: the same at a 4,096-segment budget (the one
  this comparison used before; larger batches mean fewer Python gaps);
- `careful`: NCHW weights; `simple`: one thread (read, batch, predict, write).
The strongest (fastest median) is the one that counts. Writes
benches/cpu/results.json and results.md. The load average is recorded
around every run: on a shared machine the numbers are only as quiet as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from provenance import markdown as provenance_line, provenance  # noqa: E402  (commit and machine)
SAMPLE = ROOT / "sample_data" / "digits.parquet"
MODEL = ROOT / "models" / "digits-small.pt"
LABELS = ROOT / "models" / "digits-small.labels.txt"
# Plain variants: (plain_pytorch.py flags, budget or None for segpredict's, extra environment).
VARIANTS = {
    "careful-channels-last": (["--careful", "--channels-last"], None, {}),
    "careful-channels-last-passive": (["--careful", "--channels-last"], None, {"OMP_WAIT_POLICY": "PASSIVE"}),
    "careful-channels-last-4096": (["--careful", "--channels-last"], 4096, {}),
    "careful": (["--careful"], None, {}),
    "simple": ([], None, {}),
}


def make_scaled(times: int, out: Path) -> int:
    table = pq.read_table(SAMPLE)
    parts = []
    for k in range(times):
        ids = pa.array([f"x{k:02d}-{i}" for i in table.column("id").to_pylist()])
        parts.append(table.set_column(0, "id", ids))
    scaled = pa.concat_tables(parts)
    pq.write_table(scaled, out, row_group_size=500, compression="zstd")
    return scaled.num_rows


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, tuple[float, float], float]:
    """Process wall time, load average before and after, CPU seconds used."""
    load_before, cpu_before = os.getloadavg()[0], children_cpu_s()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    return wall, (load_before, os.getloadavg()[0]), children_cpu_s() - cpu_before


def run_segpredict(bin_path: Path, pipeline: Path, big: Path, out: Path) -> dict:
    # A finished run's folder makes the next run a no-op ("already complete"), even with --overwrite.
    shutil.rmtree(out, ignore_errors=True)
    wall, load, cpu = timed([str(bin_path), "run", str(pipeline), "--input", str(big), "--output", str(out),
                             "--overwrite", "--device", "cpu"])
    report = json.loads((out / "_report.json").read_text())
    assert report["rows_out"] + report["rows_rejected"] == report["rows_in"]
    return {"process_wall_s": wall, "wall_s": report["wall_s"], "segments": report["segments"],
            "padded_segments": report["padded_segments"], "load": load, "cpu_s": cpu, "budget": report["max_segments"]}


def run_plain(kind: str, budget: int, big: Path, out: Path, result: Path) -> dict:
    flags, own_budget, env = VARIANTS[kind]
    budget = own_budget or budget
    cmd = [sys.executable, str(ROOT / "benches" / "gpu" / "plain_pytorch.py"), "--model", str(MODEL), "--labels", str(LABELS),
           "--input", str(big), "--output", str(out), "--policy", "budget", "--budget", str(budget), "--dtype", "f32",
           "--device", "cpu", "--json", str(result), *flags]
    wall, load, cpu = timed(cmd, env)
    data = json.loads(result.read_text())
    return {"process_wall_s": wall, "wall_s": data["wall_s"], "segments": data["segments"], "padded_segments": data["segments"],
            "load": load, "cpu_s": cpu, "budget": budget, "torch_threads": data.get("torch_threads"), "env": env}


def labels_of(path: Path) -> dict:
    t = ds.dataset(path, format="parquet").to_table(columns=["id", "label"])
    return dict(zip(t.column("id").to_pylist(), t.column("label").to_pylist()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--times", type=int, default=5)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "segpredict")
    ap.add_argument("--pipeline", type=Path, default=ROOT / "pipelines" / "sample.toml")
    kinds = list(VARIANTS)
    ap.add_argument("--plain", nargs="+", default=kinds, choices=kinds)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = ap.parse_args()
    runs: dict[str, list] = {"segpredict": [], **{f"plain-{k}": [] for k in args.plain}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        big = tmp / f"sample-{args.times}x.parquet"
        rows = make_scaled(args.times, big)
        outputs = {}
        budget = None  # segpredict's, from its first report
        for r in range(args.rounds):
            for name in runs:
                if name == "segpredict":
                    out = tmp / "segpredict"
                    res = run_segpredict(args.bin, args.pipeline, big, out)
                    budget = budget or res["budget"]
                else:
                    out = tmp / f"{name}.parquet"
                    res = run_plain(name.removeprefix("plain-"), budget, big, out, tmp / f"{name}.json")
                outputs[name] = out
                res["round"] = r + 1
                runs[name].append(res)
                print(f"round {r + 1} {name}: {res['segments'] / res['wall_s']:,.0f} segs/s (run clock), "
                      f"{res['process_wall_s']:.1f} s process, {res['cpu_s']:.1f} CPU s, load {res['load'][0]:.1f} -> {res['load'][1]:.1f}", flush=True)
        reference = labels_of(outputs["segpredict"])
        label_check = {}
        for name in runs:
            if name == "segpredict":
                continue
            other = labels_of(outputs[name])
            same = sum(reference[k] == other.get(k) for k in reference)
            label_check[name] = {"rows": len(reference), "other_rows": len(other), "same_label": same}
    summary = {}
    for name, rs in runs.items():
        summary[name] = {
            "segments_per_s_median": statistics.median(r["segments"] / r["wall_s"] for r in rs),
            "segments_per_s_process_median": statistics.median(r["segments"] / r["process_wall_s"] for r in rs),
            "padded_share": rs[0]["padded_segments"] / rs[0]["segments"] - 1,
            "cpu_s_median": statistics.median(r["cpu_s"] for r in rs),
        }
    ratios = {}
    for name in runs:
        if name != "segpredict":
            ratios[f"segpredict/{name}"] = round(summary["segpredict"]["segments_per_s_median"] / summary[name]["segments_per_s_median"], 3)
            ratios[f"segpredict/{name} (process)"] = round(
                summary["segpredict"]["segments_per_s_process_median"] / summary[name]["segments_per_s_process_median"], 3)
            # The machine is shared: the ratio within each round (runs next
            # to each other in time), then the median of those.
            ratios[f"segpredict/{name} (median of per-round ratios)"] = round(statistics.median(
                (s["segments"] / s["wall_s"]) / (o["segments"] / o["wall_s"]) for s, o in zip(runs["segpredict"], runs[name])), 3)
            ratios[f"{name}/segpredict CPU seconds (median)"] = round(
                summary[name]["cpu_s_median"] / summary["segpredict"]["cpu_s_median"], 3)
    strongest = max((n for n in runs if n != "segpredict"), key=lambda n: summary[n]["segments_per_s_median"])
    ratios[f"segpredict/strongest plain ({strongest})"] = ratios[f"segpredict/{strongest}"]
    loads = [x for rs in runs.values() for r in rs for x in r["load"]]
    result = {"provenance": provenance(args.bin), "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                          "load_min": min(loads), "load_median": statistics.median(loads), "load_max": max(loads)},
              "rows": rows, "rounds": args.rounds, "segpredict_budget": budget, "strongest_plain": strongest, "runs": runs, "summary": summary, "ratios": ratios, "labels": label_check}
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    lines = [provenance_line(result["provenance"]), "", f"{rows:,} rows ({args.times}x the sample), {args.rounds} rounds, {os.cpu_count()} cores, "
             f"load average {min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f}), {result['machine']['date_utc']} UTC", "",
             "| pipeline | budget | segs/s, median (run clock) | segs/s, median (process wall) | CPU s, median | padding share | rounds (run clock) |",
             "|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        each = ", ".join(f"{r['segments'] / r['wall_s']:,.0f}" for r in runs[name])
        lines.append(f"| {name} | {runs[name][0]['budget']} | {s['segments_per_s_median']:,.0f} | {s['segments_per_s_process_median']:,.0f} | "
                     f"{s['cpu_s_median']:.1f} | {s['padded_share']:.3f} | {each} |")
    lines.append("")
    lines += [f"- {k}: {v}x" for k, v in ratios.items()]
    lines += [f"- labels, segpredict vs {k}: {v['same_label']:,} of {v['rows']:,} identical ({v['other_rows']:,} rows there)" for k, v in label_check.items()]
    md = "\n".join(lines) + "\n"
    (args.out / "results.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
