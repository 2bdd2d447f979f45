"""The model's ceiling on this GPU: forward passes only, inputs already on
the device, fixed batch shapes, timed with CUDA events. What an end-to-end
pipeline is measured against ("fraction of the model's compute limit").

    python benches/gpu/model_ceiling.py --model models/digits-seed.pt [--segments 16384] [--json out.json]
    python benches/gpu/model_ceiling.py --model models/digits-seed.pt --layouts channels_last \
        --benchmark off --streams 1 2 --segments 1024 2048 4096 8192 12288 16384
    python benches/gpu/model_ceiling.py --aoti digits-seed.cuda.bf16.pt2 --streams 1 2 --segments 16384

With --aoti the model is an AOTInductor package (tools/make_models.py --aoti
--device cuda --dtype bf16), loaded with torch._inductor.aoti_load_package and
called as segpredict calls it, (segments, counts, tags, tag_counts) at the
package's dtype; its layouts were fixed when it was compiled, so its results
carry layout "aoti" and cuDNN benchmark off.

For each layout (NCHW weights, channels-last weights), cuDNN benchmark mode
(off, on) and number of CUDA streams it reports segments/s over a run of
back-to-back batches (wall time from the first launch to the last answer,
as a pipeline would see it: the model's own `int(segment_counts.sum())`
sync included), the median device time of one batch (CUDA events; one
stream only, where events tile the timeline), and the host time to queue one
batch (TorchScript interpreter and kernel launches). With two streams,
batches alternate between them, so one batch's convolutions can be queued
while the other's still run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def inputs(segments: int, rows: int, seed: int):
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randint(0, 256, (segments, 1, 8, 8), generator=g, dtype=torch.uint8).to(dev).to(torch.bfloat16)
    counts = torch.full((rows,), segments // rows, dtype=torch.int64)
    counts[-1] += segments - int(counts.sum())
    counts = counts.to(dev)
    tags = torch.zeros(0, dtype=torch.int64, device=dev)
    tag_counts = torch.zeros(rows, dtype=torch.int64, device=dev)
    return x, counts, tags, tag_counts


def measure(model, segments: int, rows: int, iters: int, n_streams: int = 1):
    streams = [torch.cuda.current_stream()] + [torch.cuda.Stream() for _ in range(n_streams - 1)]
    # One input set per stream (random, not zeros; two sets so no cache reuse across streams).
    sets = [inputs(segments, rows, seed) for seed in range(n_streams)]
    torch.cuda.synchronize()
    for i in range(5 * n_streams):
        with torch.cuda.stream(streams[i % n_streams]):
            model(*sets[i % n_streams])
    torch.cuda.synchronize()
    events, queue_ms = [], []
    t_start = time.perf_counter()
    for i in range(iters):
        s = streams[i % n_streams]
        with torch.cuda.stream(s):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record(s)
            model(*sets[i % n_streams])
            end.record(s)
            queue_ms.append((time.perf_counter() - t0) * 1e3)
            events.append((start, end))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t_start
    device_ms = [a.elapsed_time(b) for a, b in events]
    med = statistics.median(device_ms)
    p90 = sorted(device_ms)[int(0.9 * (len(device_ms) - 1))]
    return {"segments": segments, "rows": rows, "streams": n_streams, "iters": iters,
            "device_ms_median": round(med, 3), "device_ms_p90": round(p90, 3),
            "queue_ms_median": round(statistics.median(queue_ms), 3),
            "segments_per_s": round(segments * iters / wall)}


def report(r: dict) -> None:
    print(f"{r['layout']:>13} benchmark={str(r['cudnn_benchmark']):5} {r['segments']:>6} segs, {r['streams']} stream(s): "
          f"device {r['device_ms_median']:7.2f} ms (p90 {r['device_ms_p90']:6.2f}), "
          f"queue {r['queue_ms_median']:6.2f} ms, {r['segments_per_s']:>9,} segs/s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="TorchScript model (.pt)")
    ap.add_argument("--aoti", help="AOTInductor package (.pt2) instead of --model")
    ap.add_argument("--segments", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--layouts", nargs="+", choices=["nchw", "channels_last"], default=["nchw", "channels_last"])
    ap.add_argument("--benchmark", nargs="+", choices=["off", "on"], default=["off", "on"])
    ap.add_argument("--streams", type=int, nargs="+", default=[1])
    ap.add_argument("--json")
    args = ap.parse_args()
    if bool(args.model) == bool(args.aoti):
        ap.error("give one of --model and --aoti")
    results = []
    if args.aoti:
        torch.backends.cudnn.benchmark = False
        # The device index, not the default -1: see load_package in tools/make_models.py.
        model = torch._inductor.aoti_load_package(args.aoti, device_index=torch.cuda.current_device())
        with torch.inference_mode():
            for segments in args.segments:
                for n_streams in args.streams:
                    r = measure(model, segments, min(args.rows, segments), args.iters, n_streams)
                    r.update(layout="aoti", cudnn_benchmark=False)
                    results.append(r)
                    report(r)
    with torch.inference_mode():
        for channels_last in [layout == "channels_last" for layout in args.layouts] if args.model else []:
            for benchmark in [b == "on" for b in args.benchmark]:
                torch.backends.cudnn.benchmark = benchmark
                model = torch.jit.load(args.model, map_location="cuda").to(torch.bfloat16).eval()
                if channels_last:
                    model = model.to(memory_format=torch.channels_last)
                for segments in args.segments:
                    for n_streams in args.streams:
                        r = measure(model, segments, min(args.rows, segments), args.iters, n_streams)
                        r.update(layout="channels_last" if channels_last else "nchw", cudnn_benchmark=benchmark)
                        results.append(r)
                        report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
