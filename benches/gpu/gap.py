"""The gap account: where segpredict's wall time goes beyond what the model
alone needs for the same segments, term by term, from its own per-batch
records (timestamps from the run's start, device time by CUDA events).

    python benches/gpu/gap.py RUNS_DIR OUT_DIR

RUNS_DIR holds segpredict-N.json (segpredict's _report.json), careful-N.json
(plain_pytorch.py --careful), optionally other python-*.json baselines,
NAME.ext ("start end" process wall clock, seconds), NAME.ids.json and
ceiling.json (model_ceiling.py --streams 1 2 over segpredict's size classes;
where gap.sh measured it sustained, the sustained result at the budget shape,
the short ones in ceiling-short.json).

The ideal is the run's real segments at the ceiling's best rate at the budget
shape (best of one and two streams). The terms, which add up to the run's
measured wall time minus that ideal:

  process        outside the run's own clock: exec, loading libtorch,
                 writing the report (process wall minus report wall)
  start-up       run start to the first batch being queued (CUDA init, model
                 load, first row groups read, decoded and bucketed)
  tail           last batch's answers on the host to the run's end (writers
                 closing their files)
  device idle    between the first batch queued and the last answers, time
                 the device had no batch of ours queued (span minus the sum of
                 per-batch device times, which tile the timeline on one stream)
  per-batch excess  device time above the model alone at the same shape
  padding        the model alone's time for the padding segments
  below budget   the model alone at smaller shapes runs fewer segments a
                 second than at the budget (size classes, end-of-input flush)

A run with "aoti" in its name (segpredict-aoti-N: an AOTInductor package) is
accounted against the package alone (ceiling-aoti.json, layout "aoti") when
that was measured, else against the TorchScript ceiling; the table also gives
each pipeline's fraction of the TorchScript model alone. gpumem-NAME.json
(a run with --gpu-memory, NAME.target holding the target in bytes) are
checked against their target, not accounted.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def ceiling_curve(ceiling: dict, layout: str = "channels_last"):
    """shape -> (best segs/s over streams, 1-stream device ms median, p90, 2-stream segs/s)."""
    by_shape: dict[int, dict] = {}
    for r in ceiling["results"]:
        if r["layout"] != layout or r["cudnn_benchmark"]:
            continue
        d = by_shape.setdefault(r["segments"], {})
        d[f"sps_{r['streams']}"] = r["segments_per_s"]
        if r["streams"] == 1:
            d["device_ms"] = r["device_ms_median"]
            d["device_ms_p90"] = r["device_ms_p90"]
            d["queue_ms"] = r["queue_ms_median"]
    for d in by_shape.values():
        d["best_sps"] = max(v for k, v in d.items() if k.startswith("sps_"))
    return dict(sorted(by_shape.items()))


def ideal_seconds(curve, shape: int) -> float:
    """The model alone's time for one batch of `shape` segments at its best
    rate, interpolated linearly in time between measured shapes."""
    shapes = list(curve)
    t = {s: s / curve[s]["best_sps"] for s in shapes}
    if shape <= shapes[0]:
        return t[shapes[0]] * shape / shapes[0]
    if shape >= shapes[-1]:
        return shape / curve[shapes[-1]]["best_sps"]
    for lo, hi in zip(shapes, shapes[1:]):
        if lo <= shape <= hi:
            f = (shape - lo) / (hi - lo)
            return t[lo] + f * (t[hi] - t[lo])
    raise AssertionError


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1)))] if xs else None


def account(name: str, data: dict, ext: tuple[float, float] | None, curve, budget: int):
    records = data["batch_records"]
    segments = data["segments"]
    wall = data["wall_s"]
    process_wall = (ext[1] - ext[0]) if ext else wall
    ideal = segments / curve[budget]["best_sps"]
    first_queued = min(r["queued_at_ms"] for r in records) / 1e3
    last_done = max(r["done_at_ms"] for r in records) / 1e3
    device = sum(r["device_ms"] for r in records) / 1e3
    at_shape = sum(ideal_seconds(curve, r["padded_segments"]) for r in records)
    real_at_shape = sum(ideal_seconds(curve, r["padded_segments"]) * r["segments"] / r["padded_segments"] for r in records)
    terms = {
        "process": process_wall - wall,
        "start-up": first_queued,
        "tail": wall - last_done,
        "device idle": (last_done - first_queued) - device,
        "per-batch excess": device - at_shape,
        "padding": at_shape - real_at_shape,
        "below budget": real_at_shape - ideal,
    }
    end_flush = [r for r in records if r.get("flush_reason") == "end_of_input"]
    below_end = sum(
        ideal_seconds(curve, r["padded_segments"]) * r["segments"] / r["padded_segments"] - r["segments"] / curve[budget]["best_sps"]
        for r in end_flush
    )
    # Batches by the smallest measured ceiling shape that holds them (an
    # unpadded pipeline's batches fall between the shapes).
    shapes = {}
    for r in records:
        bin_ = next((s for s in curve if s >= r["padded_segments"]), r["padded_segments"])
        shapes.setdefault(bin_, []).append(r)
    per_shape = []
    for shape, rs in sorted(shapes.items(), key=lambda kv: -len(kv[1]))[:8]:
        dm = [r["device_ms"] for r in rs]
        over = [r["device_ms"] / (ideal_seconds(curve, r["padded_segments"]) * 1e3) for r in rs]
        c = curve.get(shape, {})
        per_shape.append({
            "shape": shape, "batches": len(rs),
            "exact_shape_batches": sum(r["padded_segments"] == shape for r in rs),
            "device_over_ceiling_median": round(statistics.median(over), 3),
            "device_over_ceiling_p90": round(pct(over, 0.9), 3),
            "device_ms_median": round(statistics.median(dm), 3), "device_ms_p90": round(pct(dm, 0.9), 3),
            "p90_over_median": round(pct(dm, 0.9) / statistics.median(dm), 3),
            "ceiling_device_ms": c.get("device_ms"), "ceiling_best_ms": round(ideal_seconds(curve, shape) * 1e3, 3),
            "launch_ms_median": round(statistics.median(r.get("launch_ms", 0) for r in rs), 3),
        })
    growth = growth_events(records, (data.get("memory") or {}).get("warmup_batches"))
    gaps = []
    ordered = sorted(records, key=lambda r: r["queued_at_ms"])
    for a, b in zip(ordered, ordered[1:]):
        gaps.append(b["queued_at_ms"] - a["queued_at_ms"])
    return {
        "run": name,
        "segments": segments,
        "rows": data.get("rows", data.get("rows_out")),
        "batches": len(records),
        "padded_segments": sum(r["padded_segments"] for r in records),
        "wall_s": round(wall, 3),
        "process_wall_s": round(process_wall, 3),
        "segments_per_s": round(segments / wall),
        "segments_per_s_process": round(segments / process_wall),
        "ideal_s": round(ideal, 3),
        "time_to_first_batch_s": round(first_queued, 3),
        "terms_s": {k: round(v, 3) for k, v in terms.items()},
        "terms_sum_s": round(sum(terms.values()), 3),
        "measured_gap_s": round(process_wall - ideal, 3),
        "below_budget_end_of_input_s": round(below_end, 3),
        "end_of_input_batches": len(end_flush),
        "device_busy_share": round(device / wall, 4),
        "batch_interval_ms_median": round(statistics.median(gaps), 3) if gaps else None,
        "launch_ms_median": round(statistics.median(r.get("launch_ms", 0) for r in records), 3),
        "per_shape": per_shape,
        "memory": data.get("memory"),
        "growth_events": growth,
    }


def growth_events(records, warmup):
    """The batches after the warm-up whose reserved peak passed every earlier
    batch's (the report's count), each with what it was: its shape, rows,
    flush reason, growth in MiB, and whether it was the first of its shape."""
    if warmup is None or not records or "memory" not in records[0]:
        return None
    seen, high, out = set(), 0, []
    for i, r in enumerate(records):
        m = r.get("memory") or {}
        first = r["padded_segments"] not in seen
        seen.add(r["padded_segments"])
        peak = m.get("reserved_peak", 0)
        if peak > high:
            if i >= warmup:
                out.append({"batch": i, "padded_segments": r["padded_segments"], "rows": r["rows"],
                            "flush_reason": r.get("flush_reason"), "growth_mib": round((peak - high) / 2**20, 1),
                            "first_of_its_shape": first})
            high = peak
    return out


def load_ext(path: Path):
    if not path.exists():
        return None
    a, b = path.read_text().split()[:2]
    return float(a), float(b)


def median_of(accounts, key):
    return statistics.median(a[key] for a in accounts)


def mib(b) -> str:
    return f"{b / 2**20:,.0f}" if b is not None else "-"


def memory_lines(gs: dict, budget: int) -> list[str]:
    """Per pipeline and round: growth events after warm-up, peak allocated and
    reserved, their ratio, and p90/median of per-batch device time at the budget shape."""
    lines = ["\nMemory and per-batch device time at the budget shape, each round:\n",
             "| pipeline | round | growth events after warm-up (warm-up batches) | peak allocated MiB | "
             "peak reserved MiB | reserved / allocated | p90 / median device ms at the budget shape |",
             "|---|---|---|---|---|---|---|"]
    notes = []
    for g, s in gs.items():
        for i, (m, a) in enumerate(zip(s["memory_rounds"], s["rounds"]), 1):
            p = s["budget_shape_p90_over_median"][i - 1]
            if not m:
                lines.append(f"| {g} | {i} | - | - | - | - | {p if p is not None else '-'} |")
                continue
            ratio = m["peak_reserved_bytes"] / max(m["peak_allocated_bytes"], 1)
            for e in a.get("growth_events") or []:
                notes.append(f"{g} round {i}: growth at batch {e['batch']} ({e['padded_segments']} segments padded, "
                             f"{e['rows']} rows, {e['flush_reason']}, +{e['growth_mib']} MiB, "
                             f"{'first' if e['first_of_its_shape'] else 'not the first'} batch of its shape)")
            lines.append(f"| {g} | {i} | {m.get('reserved_growth_events_after_warmup')} ({m.get('warmup_batches', '-')}) | "
                         f"{mib(m['peak_allocated_bytes'])} | {mib(m['peak_reserved_bytes'])} | {ratio:.3f} | "
                         f"{p if p is not None else '-'} |")
    return lines + ([""] + notes if notes else [])


def gpu_memory_lines(runs: Path, summary: dict) -> list[str]:
    """Runs with --gpu-memory: peak reserved against the target."""
    lines, checks = [], {}
    for path in sorted(runs.glob("gpumem-*.json")):
        data = json.loads(path.read_text())
        target_file = runs / f"{path.stem}.target"
        target = int(target_file.read_text()) if target_file.exists() else (data.get("calibration") or {}).get("target_bytes")
        m = data.get("memory") or {}
        peak = m.get("peak_reserved_bytes")
        if not target or peak is None:
            continue
        cal = data.get("calibration") or {}
        checks[path.stem] = {
            "target_bytes": target, "peak_reserved_bytes": peak, "peak_allocated_bytes": m.get("peak_allocated_bytes"),
            "off_target": round(peak / target - 1, 4), "max_segments": data.get("max_segments"),
            "calibrated_peak_reserved": cal.get("measured_peak_reserved"),
            "growth_events_after_warmup": m.get("reserved_growth_events_after_warmup"),
            "segments_per_s": round(data.get("segments_per_s", 0)),
        }
    if checks:
        summary["gpu_memory"] = checks
        lines += ["\n--gpu-memory runs: peak reserved over the whole run against the target:\n",
                  "| run | target MiB | budget (segments) | peak reserved MiB | off target | peak allocated MiB | "
                  "growth events after warm-up | segs/s |", "|---|---|---|---|---|---|---|---|"]
        for k, c in checks.items():
            lines.append(f"| {k} | {mib(c['target_bytes'])} | {c['max_segments']} | {mib(c['peak_reserved_bytes'])} | "
                         f"{c['off_target']:+.1%} | {mib(c['peak_allocated_bytes'])} | {c['growth_events_after_warmup']} | "
                         f"{c['segments_per_s']:,} |")
    return lines


def main() -> None:
    runs, out = Path(sys.argv[1]), Path(sys.argv[2])
    curve = ceiling_curve(json.loads((runs / "ceiling.json").read_text()))
    budget = max(curve)
    aoti_file = runs / "ceiling-aoti.json"
    aoti_curve = ceiling_curve(json.loads(aoti_file.read_text()), "aoti") if aoti_file.exists() else {}
    if budget not in aoti_curve:
        aoti_curve = {}
    curve_of = lambda group: aoti_curve if ("aoti" in group and aoti_curve) else curve  # noqa: E731
    groups: dict[str, list] = {}
    for path in sorted(runs.glob("*.json")):
        if path.stem.endswith(".ids") or path.stem.startswith(("ceiling", "gpumem-", "speed-")):
            continue
        data = json.loads(path.read_text())
        if not data.get("batch_records") or "queued_at_ms" not in data["batch_records"][0]:
            continue
        group = path.stem.rsplit("-", 1)[0] if path.stem[-1].isdigit() else path.stem
        acc = account(path.stem, data, load_ext(runs / f"{path.stem}.ext"), curve_of(group), budget)
        ids = runs / f"{path.stem}.ids.json"
        if ids.exists():
            acc["output_check"] = json.loads(ids.read_text())
        groups.setdefault(group, []).append(acc)
    best_ceiling = curve[budget]["best_sps"]
    summary = {"ceiling": {str(k): v for k, v in curve.items()}, "budget_shape": budget, "ceiling_best_sps": best_ceiling,
               "groups": {}}
    lines = []
    for name, c in [("TorchScript model alone (channels-last)", curve), ("AOTInductor package alone", aoti_curve)]:
        if c:
            lines.append(f"{name} at the budget shape {budget}: 1 stream {c[budget].get('sps_1'):,} / "
                         f"2 streams {c[budget].get('sps_2', 0):,} segs/s; device {c[budget]['device_ms']} ms per batch (1 stream)")
    for name, stem, layout in [("TorchScript", "ceiling", "channels_last"), ("package", "ceiling-aoti", "aoti")]:
        short_file = runs / f"{stem}-short.json"
        if short_file.exists() and (runs / f"{stem}.json").exists():
            short = ceiling_curve(json.loads(short_file.read_text()), layout).get(budget)
            sustained = ceiling_curve(json.loads((runs / f"{stem}.json").read_text()), layout).get(budget)
            if short and sustained:
                summary[f"{stem}_short_best_sps"] = short["best_sps"]
                batches = max((r.get("iters") or 0 for r in json.loads((runs / f"{stem}.json").read_text())["results"]
                               if r.get("sustained") and r["segments"] == budget), default=0)
                lines.append(f"{name} alone at {budget}, the ceiling used: {sustained['best_sps']:,} segs/s sustained ("
                             f"{batches:,} batches of the input's own segments); {short['best_sps']:,} over a short burst "
                             f"(x{sustained['best_sps'] / short['best_sps']:.3f})")
    for backend in ("torchscript", "aoti"):
        speed_file = runs / f"speed-ceiling-{backend}.json"
        if speed_file.exists():
            by_shape = {r["segments"]: r for r in json.loads(speed_file.read_text())["results"]}
            if budget in by_shape:
                r = by_shape[budget]
                summary[f"speed_{backend}"] = r
                lines.append(f"{backend} alone through `segpredict speed` at {budget}: {r['segments_per_s']:,} segs/s, "
                             f"device {r['device_ms_median']} ms per batch (p90 {r['device_ms_p90']})")
    if aoti_curve:
        summary["aoti_ceiling"] = {str(k): v for k, v in aoti_curve.items()}
        summary["aoti_ceiling_best_sps"] = aoti_curve[budget]["best_sps"]
    lines.append("")
    lines.append("| pipeline | rounds | segs/s (median, run clock) | segs/s (process) | of its model alone | "
                 "of the TorchScript model alone | time to first batch s |")
    lines.append("|---|---|---|---|---|---|---|")
    for g, accs in groups.items():
        med = median_of(accs, "segments_per_s")
        medp = median_of(accs, "segments_per_s_process")
        own = curve_of(g)[budget]["best_sps"]
        summary["groups"][g] = {
            "rounds": accs,
            "segments_per_s_median": med,
            "segments_per_s_process_median": medp,
            "ceiling": "aoti" if curve_of(g) is aoti_curve else "torchscript",
            "fraction_of_ceiling": round(med / own, 4),
            "fraction_of_ceiling_process": round(medp / own, 4),
            "fraction_of_torchscript_ceiling": round(med / best_ceiling, 4),
            "terms_median_s": {k: round(statistics.median(a["terms_s"][k] for a in accs), 3) for k in accs[0]["terms_s"]},
            "time_to_first_batch_s_median": median_of(accs, "time_to_first_batch_s"),
            "budget_shape_p90_over_median": [
                next((s["p90_over_median"] for s in a["per_shape"] if s["shape"] == budget), None) for a in accs],
            "memory_rounds": [a["memory"] for a in accs],
        }
        each = ", ".join(f"{a['segments_per_s']:,}" for a in accs)
        lines.append(f"| {g} | {len(accs)} | {med:,.0f} ({each}) | {medp:,.0f} | "
                     f"{med / own:.3f} | {med / best_ceiling:.3f} | {summary['groups'][g]['time_to_first_batch_s_median']:.2f} |")
    gs = summary["groups"]
    summary["ratios"] = {}
    pairs = [(a, "careful") for a in gs if a.startswith("segpredict")] + [("segpredict-aoti", "segpredict")]
    for a, b in pairs:
        if a in gs and b in gs:
            r = gs[a]["segments_per_s_median"] / gs[b]["segments_per_s_median"]
            rp = gs[a]["segments_per_s_process_median"] / gs[b]["segments_per_s_process_median"]
            summary["ratios"][f"{a}/{b}"] = {"run_clock": round(r, 4), "process_wall": round(rp, 4)}
            lines.append(f"\n{a} / {b}: {r:.3f}x (run clocks), {rp:.3f}x (process wall)")
    if "segpredict" in gs and "careful" in gs:
        summary["segpredict_over_careful"] = summary["ratios"]["segpredict/careful"]["run_clock"]
        summary["segpredict_over_careful_process"] = summary["ratios"]["segpredict/careful"]["process_wall"]
    lines += memory_lines(gs, budget)
    lines += gpu_memory_lines(runs, summary)
    lines.append("\nGap terms, seconds (median over rounds; they add up to process wall minus the ideal):\n")
    names = list(groups)
    lines.append("| term | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    first = groups[names[0]][0]["terms_s"]
    for term in list(first) + ["sum", "measured gap", "ideal", "process wall"]:
        cells = []
        for g in names:
            accs = groups[g]
            if term == "sum":
                v = statistics.median(a["terms_sum_s"] for a in accs)
            elif term == "measured gap":
                v = statistics.median(a["measured_gap_s"] for a in accs)
            elif term == "ideal":
                v = statistics.median(a["ideal_s"] for a in accs)
            elif term == "process wall":
                v = statistics.median(a["process_wall_s"] for a in accs)
            else:
                v = statistics.median(a["terms_s"][term] for a in accs)
            cells.append(f"{v:.3f}")
        lines.append(f"| {term} | " + " | ".join(cells) + " |")
    for g in names:
        a = groups[g][0]
        lines.append(f"\n{g} round 1 by size class (batches [at exactly that shape], device ms median / p90, "
                     "device / model alone at the batch's shape median / p90, ceiling 1-stream ms, launch ms):")
        for s in a["per_shape"]:
            lines.append(f"  <={s['shape']:>6}: {s['batches']:>5} [{s['exact_shape_batches']:>5}]  {s['device_ms_median']:7.2f} / "
                         f"{s['device_ms_p90']:7.2f} (p90/med {s['p90_over_median']:.3f})  x{s['device_over_ceiling_median']:.3f} / "
                         f"x{s['device_over_ceiling_p90']:.3f}  ceiling {s['ceiling_device_ms']}  launch {s['launch_ms_median']:.2f}")
        lines.append(f"  end-of-input batches {a['end_of_input_batches']} costing {a['below_budget_end_of_input_s']:.3f}s below budget; "
                     f"launch ms median {a['launch_ms_median']}; batch interval median {a['batch_interval_ms_median']} ms")
    md = "\n".join(lines)
    (out / "gap.json").write_text(json.dumps(summary, indent=1))
    (out / "gap.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
