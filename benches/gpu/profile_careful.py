"""A PyTorch-profiler trace of the careful plain-PyTorch pipeline on a small
input, and the device's busy and idle time read from it: what the GPU did
between batches when the model is fed well. (No nsys on the device machine;
segpredict's own account comes from its per-batch records.)

    python benches/gpu/profile_careful.py --model M --labels L --input in.parquet --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plain_pytorch  # noqa: E402


def device_timeline(trace_path: Path):
    events = json.loads(trace_path.read_text())["traceEvents"]
    spans = sorted(
        (e["ts"], e["ts"] + e.get("dur", 0), e.get("cat", ""), e.get("name", ""))
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    if not spans:
        return {}
    busy, gaps, end = 0.0, [], spans[0][0]
    kernel_time: dict[str, float] = {}
    for s, e, cat, name in spans:
        if s > end:
            gaps.append(s - end)
        busy += max(0.0, e - max(s, end))
        end = max(end, e)
        kernel_time[name[:60]] = kernel_time.get(name[:60], 0.0) + (e - s)
    span = end - spans[0][0]
    gaps.sort()
    top = sorted(kernel_time.items(), key=lambda kv: -kv[1])[:12]
    return {
        "span_ms": round(span / 1e3, 3),
        "busy_ms": round(busy / 1e3, 3),
        "busy_share": round(busy / span, 4),
        "gaps": len(gaps),
        "gap_ms_total": round(sum(gaps) / 1e3, 3),
        "gaps_over_50us": sum(g > 50 for g in gaps),
        "gap_ms_over_50us_total": round(sum(g for g in gaps if g > 50) / 1e3, 3),
        "gap_us_p50": round(gaps[len(gaps) // 2], 1) if gaps else 0,
        "gap_us_p99": round(gaps[int(len(gaps) * 0.99)], 1) if gaps else 0,
        "top_device_ops_ms": [(n, round(t / 1e3, 3)) for n, t in top],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    labels = Path(args.labels).read_text(encoding="utf-8").splitlines()
    model = torch.jit.load(args.model, map_location=dev).to(torch.bfloat16).eval()
    model = model.to(memory_format=torch.channels_last)
    ns = argparse.Namespace(input=args.input, output=str(args.out / "profile-out.parquet"), budget=16384)
    # Warm once (cuDNN heuristics, allocator), then profile a second pass.
    plain_pytorch.run_careful(ns, model, dev, torch.bfloat16, labels, time.perf_counter())
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        records, *_ = plain_pytorch.run_careful(ns, model, dev, torch.bfloat16, labels, time.perf_counter())
    trace = args.out / "careful-trace.json"
    prof.export_chrome_trace(str(trace))
    summary = device_timeline(trace)
    summary["batches"] = len(records)
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=15)
    (args.out / "careful-profile.txt").write_text(table + "\n" + json.dumps(summary, indent=1) + "\n")
    with open(trace, "rb") as f, gzip.open(str(trace) + ".gz", "wb") as g:
        g.write(f.read())
    trace.unlink()
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
