"""The table of run.sh: each variant's rounds, medians, and the issue's ratios.

    python summary.py RUNS OUT   -> OUT/summary.md, OUT/summary.json

segpredict: segments/s by its run clock (the report's), steady (segments over the run clock after
the first batch was queued), whole (over the process's wall clock, libtorch's loading and exit
included). Anchors: steady leaves out the time to the first batch and the compile time (--warm compiles
every class before the first batch; calls in the run that compiled or recorded a CUDA graph); whole is the process wall (Python's imports included).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def ext_wall(runs: Path, name: str) -> float | None:
    f = runs / f"{name}.ext"
    if not f.exists():
        return None
    t0, t1 = map(float, f.read_text().split())
    return t1 - t0


def segpredict_round(runs: Path, name: str) -> dict | None:
    f = runs / f"{name}.report.json"
    if not f.exists():
        return None
    r = json.loads(f.read_text())
    seg, wall, ttfb = r["segments"], r["wall_s"], r.get("time_to_first_batch_s") or 0.0
    memory = r.get("memory") or {}
    process = ext_wall(runs, name)
    return {
        "segments": seg, "rows_out": r.get("rows_out"), "segments_per_s": r["segments_per_s"],
        "steady": seg / max(wall - ttfb, 1e-9), "whole": seg / process if process else None,
        "ttfb_s": ttfb, "model_ready_s": r.get("model_ready_s"), "warm_up_s": r.get("warm_up_s"),
        "growth_events": memory.get("reserved_growth_events_after_warmup"),
        "peak_reserved_mib": (memory.get("peak_reserved_bytes") or 0) / 2**20,
        "device_ms_median": (r.get("batch_ms") or {}).get("device_median"),
        "model_paths": r.get("model_paths", []),
    }


def anchor_round(runs: Path, name: str) -> dict | None:
    f = runs / f"{name}.json"
    if not f.exists():
        return None
    r = json.loads(f.read_text())
    seg, wall, ttfb = r["segments"], r["wall_s"], r.get("time_to_first_batch_s") or 0.0
    process = ext_wall(runs, name)
    growth = r.get("reserved_growth_after_warm_up")
    return {
        "segments": seg, "rows_out": r["rows"], "segments_per_s": r["segments_per_s"],
        # The warm-up's compiles are before the first batch, in ttfb already.
        "steady": seg / max(wall - ttfb - (r["compile_s"] - r.get("warm_s", 0.0)), 1e-9),
        "whole": seg / process if process else None,
        "ttfb_s": ttfb, "compile_s": r["compile_s"], "shapes": r["shapes"],
        "growth_mib": None if growth is None else growth / 2**20,
        "peak_reserved_mib": r["peak_reserved"] / 2**20, "device_ms_median": r.get("device_ms_median"),
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, spec=",.0f"):
    return "-" if v is None else format(v, spec)


def main() -> None:
    runs, out = Path(sys.argv[1]), Path(sys.argv[2])
    variants = {
        "segpredict, dynamic package": ("dynamic", segpredict_round),
        "segpredict, per-class packages": ("classes", segpredict_round),
        "segpredict, per-class + CUDA graphs": ("graphs", segpredict_round),
        "anchor: torch.compile reduce-overhead, static": ("anchor-ro", anchor_round),
        "anchor: torch.compile default, dynamic": ("anchor-dyn", anchor_round),
    }
    table, result = [], {}
    for label, (prefix, read) in variants.items():
        rounds = [r for i in range(1, 10) if (r := read(runs, f"{prefix}-{i}")) is not None]
        result[prefix] = {"rounds": rounds}
        if not rounds:
            table.append(f"| {label} | not run | | | | | | |")
            continue
        med = {k: median([r.get(k) for r in rounds]) for k in ("steady", "whole", "segments_per_s", "ttfb_s",
                                                                "device_ms_median", "peak_reserved_mib")}
        result[prefix]["median"] = med
        memory = ", ".join(str(r.get("growth_events", fmt(r.get("growth_mib"), ".0f") + " MiB")) for r in rounds)
        extra = ", ".join(f"{r['compile_s']:.1f}" for r in rounds) if prefix.startswith("anchor") else ""
        table.append(
            f"| {label} | {' / '.join(fmt(r['steady']) for r in rounds)} | {fmt(med['whole'])} | "
            f"{' / '.join(fmt(r['ttfb_s'], '.3f') for r in rounds)} | {extra} | {memory} | "
            f"{fmt(med['device_ms_median'], '.2f')} | {fmt(med['peak_reserved_mib'])} |"
        )
    speeds = {}
    for v in ("dynamic", "classes", "graphs"):
        f = runs / f"speed-{v}.json"
        if f.exists():
            s = json.loads(f.read_text())["speed"]
            speeds[v] = {"segments_per_s": s["segments_per_s"], "batch_ms_median": s["batch_ms_median"]}
    result["package_alone"] = speeds
    cold = {}
    for mode in ("reduce-overhead", "default-dynamic"):
        f = runs / f"anchor-cold-{mode}.json"
        if f.exists():
            cold[mode] = json.loads(f.read_text()).get("warm_s")
    result["anchor_cold_compile_s"] = cold
    first = {v: segpredict_round(runs, f"first-{v}") for v in ("dynamic", "classes", "graphs")}
    result["first_runs"] = first

    def ratio(a, b, key):
        x, y = result.get(a, {}).get("median", {}).get(key), result.get(b, {}).get("median", {}).get(key)
        return None if not x or not y else x / y

    best_alone = max((s["segments_per_s"] for s in speeds.values()), default=None)
    graphs_steady = result.get("graphs", {}).get("median", {}).get("steady")
    ttfb = {k: result.get(k, {}).get("median", {}).get("ttfb_s") for k in ("dynamic", "graphs")}
    criteria = {
        "graphs / anchor reduce-overhead, steady (>= 1.05)": ratio("graphs", "anchor-ro", "steady"),
        "graphs / fastest package alone, steady (>= 0.98)": (graphs_steady / best_alone
                                                              if graphs_steady and best_alone else None),
        "graphs / anchor reduce-overhead, whole wall (>= 1.3)": ratio("graphs", "anchor-ro", "whole"),
        "graphs / dynamic package, steady": ratio("graphs", "dynamic", "steady"),
        "per-class (no graphs) / dynamic package, steady": ratio("classes", "dynamic", "steady"),
        "graphs / anchor default-dynamic, steady": ratio("graphs", "anchor-dyn", "steady"),
        "time to first batch, graphs - dynamic (s, <= 0.5)": (ttfb["graphs"] - ttfb["dynamic"]
                                                               if None not in ttfb.values() else None),
    }
    result["criteria"] = criteria
    lines = [
        "| pipeline | steady segs/s, each round | whole wall segs/s (median) | time to first batch, each round (s) "
        "| compile s (anchors) | growth after warm-up (events; anchors MiB) | device ms median | peak reserved MiB |",
        "|---|---|---|---|---|---|---|---|",
        *table, "",
        "Package alone (`segpredict speed`, 16,384 segments, 400 rows, the input's segments): "
        + ", ".join(f"{k} {fmt(v['segments_per_s'])} segs/s ({v['batch_ms_median']:.2f} ms)" for k, v in speeds.items()),
        "",
        "Anchors' cold compile of every class (empty inductor caches, beside the package build): "
        + ", ".join(f"{k} {fmt(v, '.1f')} s" for k, v in cold.items()),
        "",
        "First (untimed, small) runs, time to first batch: "
        + ", ".join(f"{k} {fmt(v['ttfb_s'], '.3f')} s" for k, v in first.items() if v),
        "", "| criterion | value |", "|---|---|",
        *[f"| {k} | {fmt(v, '.3f')} |" for k, v in criteria.items()], "",
        "Model paths (graphs round 1): " + json.dumps((result.get("graphs", {}).get("rounds") or [{}])[0].get("model_paths")),
        "Model paths (classes round 1): " + json.dumps((result.get("classes", {}).get("rounds") or [{}])[0].get("model_paths")),
    ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(result, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
