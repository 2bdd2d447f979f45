"""The model's ceiling on this GPU: forward passes only, inputs already on
the device, fixed batch shapes, timed with CUDA events. What an end-to-end
pipeline is measured against ("fraction of the model's compute limit").

    python benches/gpu/model_ceiling.py --model models/digits-seed.pt [--segments 16384] [--json out.json]

For each layout (NCHW weights, channels-last weights) and cuDNN benchmark
mode (off, on) it reports segments/s of the device time, and the host time
to queue one batch (TorchScript interpreter and kernel launches).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def measure(model, segments: int, rows: int, iters: int):
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randint(0, 256, (segments, 1, 8, 8), generator=g, dtype=torch.uint8).to(dev).to(torch.bfloat16)
    counts = torch.full((rows,), segments // rows, dtype=torch.int64)
    counts[-1] += segments - int(counts.sum())
    counts = counts.to(dev)
    tags = torch.zeros(0, dtype=torch.int64, device=dev)
    tag_counts = torch.zeros(rows, dtype=torch.int64, device=dev)
    for _ in range(5):
        model(x, counts, tags, tag_counts)
    torch.cuda.synchronize()
    device_ms, queue_ms = [], []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        model(x, counts, tags, tag_counts)
        end.record()
        queue_ms.append((time.perf_counter() - t0) * 1e3)
        end.synchronize()
        device_ms.append(start.elapsed_time(end))
    med = statistics.median(device_ms)
    return {"segments": segments, "device_ms_median": round(med, 3), "queue_ms_median": round(statistics.median(queue_ms), 3),
            "segments_per_s": round(segments / med * 1e3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--segments", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = []
    with torch.inference_mode():
        for channels_last in (False, True):
            for benchmark in (False, True):
                torch.backends.cudnn.benchmark = benchmark
                model = torch.jit.load(args.model, map_location="cuda").to(torch.bfloat16).eval()
                if channels_last:
                    model = model.to(memory_format=torch.channels_last)
                for segments in args.segments:
                    r = measure(model, segments, min(args.rows, segments), args.iters)
                    r.update(layout="channels_last" if channels_last else "nchw", cudnn_benchmark=benchmark)
                    results.append(r)
                    print(f"{r['layout']:>13} benchmark={str(benchmark):5} {segments:>6} segs: "
                          f"device {r['device_ms_median']:7.2f} ms, queue {r['queue_ms_median']:6.2f} ms, "
                          f"{r['segments_per_s']:>9,} segs/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
