"""Summarise the GPU benchmark's runs into results.json, results.md and a
memory plot (memory.svg). Every run is summarised by the same code, from its
per-batch records, so the numbers compare like with like.

    python benches/gpu/summarize.py RUN_DIR OUT_DIR
RUN_DIR holds, per run NAME: NAME.json (segpredict's _report.json or the
baseline's result), NAME.util (nvidia-smi utilization samples, one per line),
NAME.time (GNU time -v output) and optionally NAME.ids.json (output id check).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

COMPUTE_LIMIT_SEGS = 2.3e6  # bf16 on the H200, ../shared/GPU.md
MIB = 1 << 20


def warmup_batches(records):
    seen, last_new = set(), 0
    for i, r in enumerate(records):
        if r["padded_segments"] not in seen:
            seen.add(r["padded_segments"])
            last_new = i + 1
    return max(min(last_new, len(records) // 10), min(1, len(records)))


def memory(records):
    mem = [r["memory"] for r in records if r.get("memory")]
    if not mem:
        return {}
    warm = warmup_batches(records)
    high, growth = 0, 0
    for i, m in enumerate(mem):
        if m["reserved_peak"] > high:
            growth += i >= warm
            high = m["reserved_peak"]
    peak_alloc = max(m["allocated_peak"] for m in mem)
    return {
        "peak_allocated_mib": round(peak_alloc / MIB, 1),
        "peak_reserved_mib": round(high / MIB, 1),
        "final_reserved_mib": round(mem[-1]["reserved"] / MIB, 1),
        "reserved_over_allocated": round(high / max(peak_alloc, 1), 3),
        "growth_events_after_warmup": growth,
        "warmup_batches": warm,
    }


def util(path: Path):
    if not path.exists():
        return None
    vals = [float(v) for v in path.read_text().split() if v.replace(".", "", 1).isdigit()]
    return round(statistics.mean(vals) / 100, 3) if vals else None


def max_rss_mib(path: Path):
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        if "Maximum resident set size" in line:
            return round(int(line.split(":")[1]) / 1024, 1)
    return None


def summarise(run_dir: Path, name: str):
    data = json.loads((run_dir / f"{name}.json").read_text())
    records = data["batch_records"]
    segments = data["segments"]
    wall = data["wall_s"]
    sps = segments / wall
    row = {
        "run": name,
        "tool": data.get("tool", "segpredict"),
        "policy": data.get("policy", data.get("strategy")),
        "dtype": data.get("dtype", data.get("model_dtype")),
        "layout": "channels_last" if data.get("channels_last") else "nchw",
        "rows": data.get("rows", data.get("rows_out")),
        "segments": segments,
        "batches": len(records),
        "distinct_batch_shapes": len({r["padded_segments"] for r in records}),
        "wall_s": round(wall, 2),
        "segments_per_s": round(sps),
        "fraction_of_compute_limit": round(sps / COMPUTE_LIMIT_SEGS, 3),
        "gpu_util_nvidia_smi": util(run_dir / f"{name}.util"),
        # Device time per batch (CUDA events) summed over wall time: segpredict's
        # device_busy_share; the baseline times its model call the same way.
        "gpu_busy_cuda_events": round(data.get("device_busy_share", data.get("model_busy_share", 0)) or 0, 3),
        "max_rss_mib": max_rss_mib(run_dir / f"{name}.time"),
        "max_segments": data.get("final_max_segments"),
        **memory(records),
    }
    if data.get("calibration"):
        target = data["calibration"]["target_bytes"] / MIB
        row["gpu_memory_target_mib"] = round(target, 1)
        row["peak_reserved_vs_target"] = round(row["peak_reserved_mib"] / target, 3)
    ids = run_dir / f"{name}.ids.json"
    if ids.exists():
        row["output_check"] = json.loads(ids.read_text())
    return row, records


def svg(runs, path: Path):
    w, h, pad = 1000, 420, 60
    colours = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]
    top = max(max((r["memory"]["reserved_peak"] for r in recs if r.get("memory")), default=1) for _, recs in runs) / MIB * 1.1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w/2}" y="20" text-anchor="middle" font-size="16">Peak reserved GPU memory per batch (MiB) over the run, H200</text>',
             f'<line x1="{pad}" y1="{h-pad}" x2="{w-20}" y2="{h-pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{h-pad}" x2="{pad}" y2="30" stroke="black"/>',
             f'<text x="{w/2}" y="{h-20}" text-anchor="middle">fraction of the run (batches)</text>']
    for k in range(6):
        y = h - pad - k / 5 * (h - pad - 30)
        parts.append(f'<text x="{pad-5}" y="{y+4}" text-anchor="end">{top*k/5:.0f}</text>')
        parts.append(f'<line x1="{pad}" y1="{y}" x2="{w-20}" y2="{y}" stroke="#eee"/>')
    for i, (name, recs) in enumerate(runs):
        mem = [r["memory"]["reserved_peak"] / MIB for r in recs if r.get("memory")]
        if not mem:
            continue
        pts = " ".join(
            f"{pad + j / max(len(mem) - 1, 1) * (w - pad - 20):.1f},{h - pad - v / top * (h - pad - 30):.1f}" for j, v in enumerate(mem)
        )
        c = colours[i % len(colours)]
        # The baselines dashed, segpredict solid.
        dash = ' stroke-dasharray="6,3"' if name.startswith("python") else ""
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5"{dash} points="{pts}"/>')
        parts.append(f'<text x="{pad+10}" y="{45 + 16*i}" fill="{c}">{name}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts))


def markdown(rows):
    cols = ["run", "policy", "dtype", "layout", "segments_per_s", "fraction_of_compute_limit", "gpu_util_nvidia_smi",
            "gpu_busy_cuda_events", "peak_allocated_mib", "peak_reserved_mib", "reserved_over_allocated",
            "growth_events_after_warmup", "distinct_batch_shapes", "max_rss_mib"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return "\n".join(out)


def main() -> None:
    run_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    names = [p.stem for p in sorted(run_dir.glob("*.json")) if not p.stem.endswith(".ids")]
    summaries, runs = [], []
    for name in names:
        row, recs = summarise(run_dir, name)
        summaries.append(row)
        runs.append((name, recs))
    by = {r["run"]: r for r in summaries}
    ratios = {}
    for ours in [n for n in by if n.startswith("segpredict")]:
        for base in [n for n in by if n.startswith("python")]:
            ratios[f"{ours}/{base}"] = round(by[ours]["segments_per_s"] / by[base]["segments_per_s"], 2)
    result = {"runs": summaries, "throughput_ratios": ratios}
    (out_dir / "results.json").write_text(json.dumps(result, indent=2))
    md = markdown(summaries) + "\n\nThroughput ratios (segments/s):\n\n" + "\n".join(f"- {k}: {v}x" for k, v in ratios.items())
    (out_dir / "results.md").write_text(md + "\n")
    svg(runs, out_dir / "memory.svg")
    print(md)


if __name__ == "__main__":
    main()
