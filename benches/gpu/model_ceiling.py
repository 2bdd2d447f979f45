"""The model's ceiling on this GPU: forward passes only, inputs already on
the device, fixed batch shapes, timed with CUDA events. What an end-to-end
pipeline is measured against ("fraction of the model's compute limit").

    python benches/gpu/model_ceiling.py --model models/digits-seed.pt [--segments 16384] [--json out.json]
    python benches/gpu/model_ceiling.py --model models/digits-seed.pt --layouts channels_last \
        --benchmark off --streams 1 2 --segments 1024 2048 4096 8192 12288 16384
    python benches/gpu/model_ceiling.py --aoti digits-seed.cuda.bf16.pt2 --streams 1 2 --segments 16384

    # The sync-free eager model and the package, each alone and captured in a CUDA graph:
    python benches/gpu/model_ceiling.py --model models/digits-seed.pt --layouts channels_last \
        --benchmark off --sync-free digits-seed --cuda-graph --segments 16384 --json eager.json
    python benches/gpu/model_ceiling.py --aoti digits-seed.cuda.bf16.pt2 --cuda-graph --segments 16384 \
        --json aoti.json
    python benches/gpu/model_ceiling.py --summarize eager.json aoti.json   # ratios, one JSON line

With --aoti the model is an AOTInductor package (tools/make_models.py --aoti
--device cuda --dtype bf16), loaded with torch._inductor.aoti_load_package and
called as segpredict calls it, (segments, counts, tags, tag_counts) at the
package's dtype, through the loader's boxed_run (AOTICompiledModel's
__call__ parses the call spec again on every call); its layouts were fixed
when it was compiled, so its results carry layout "aoti" and cuDNN benchmark
off. It is measured loaded as segpredict loads it (run_single_threaded false:
each call first waits on the device for the previous call of the same model
instance to finish, AOTInductor's bookkeeping for its pool of model
instances) and loaded with run_single_threaded true (no such wait; what
torch documents for CUDA graphs); layouts "aoti" and "aoti-single-threaded".

--sync-free NAME also measures tools/make_models.py's Exportable model of
that name (the sync-free form the packages are exported from: no
`.item()`, no shape that depends on the data) in eager PyTorch, with the
weights of --model, in each layout; layout "sync-free-nchw" or
"sync-free-channels_last".

--cuda-graph also captures each sync-free model (the package, the sync-free
eager model; the TorchScript model syncs on `int(segment_counts.sum())` and
cannot be captured) at each fixed shape (segments, rows, tags) with
torch.cuda.graph and times replays of the graph; layout "<layout>+graph".
It first checks that a replay gives the direct call's logits.

For each layout (NCHW weights, channels-last weights), cuDNN benchmark mode
(off, on) and number of CUDA streams it reports segments/s over a run of
back-to-back batches (wall time from the first launch to the last answer,
as a pipeline would see it: the TorchScript model's own
`int(segment_counts.sum())` sync included), segments/s by the median device
time of one batch (CUDA events; one stream only, where events tile the
timeline), and the host time to queue one batch (TorchScript interpreter
and kernel launches). With two streams, batches alternate between them, so
one batch's convolutions can be queued while the other's still run.

Each measurement that fails (a model that does not load, a capture that is
refused) prints its error and the script goes on; the JSON records it. A
crash of the process itself (the SIGSEGV seen in aoti_load_package) loses
the rest of that process: run the package and the eager models in separate
processes, as aoti-check.sh does.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

MAKE_MODELS = Path(__file__).resolve().parent.parent.parent / "tools" / "make_models.py"
N_TAG_IDS = 100


# --input: real segments (uint8 [n, 1, 8, 8]) used instead of random bytes.
REAL_SEGMENTS: torch.Tensor | None = None


def inputs(segments: int, rows: int, seed: int, tags_per_row: int = 0):
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randint(0, 256, (segments, 1, 8, 8), generator=g, dtype=torch.uint8)
    if REAL_SEGMENTS is not None:
        # Each seed (stream) its own stretch of the input, repeated as needed.
        at = (torch.arange(segments) + seed * segments) % len(REAL_SEGMENTS)
        x = REAL_SEGMENTS[at]
    x = x.to(dev).to(torch.bfloat16)
    counts = torch.full((rows,), segments // rows, dtype=torch.int64)
    counts[-1] += segments - int(counts.sum())
    counts = counts.to(dev)
    tags = torch.randint(0, N_TAG_IDS, (rows * tags_per_row,), generator=g, dtype=torch.int64).to(dev)
    tag_counts = torch.full((rows,), tags_per_row, dtype=torch.int64, device=dev)
    return x, counts, tags, tag_counts


def summarize_times(segments: int, rows: int, iters: int, n_streams: int, device_ms: list, queue_ms: list,
                    wall: float) -> dict:
    med = statistics.median(device_ms)
    p90 = sorted(device_ms)[int(0.9 * (len(device_ms) - 1))]
    return {"segments": segments, "rows": rows, "streams": n_streams, "iters": iters,
            "device_ms_median": round(med, 3), "device_ms_p90": round(p90, 3),
            "queue_ms_median": round(statistics.median(queue_ms), 3),
            "segments_per_s": round(segments * iters / wall),
            "segments_per_s_median_batch": round(segments / (med / 1e3))}


def measure(model, segments: int, rows: int, iters: int, n_streams: int = 1, tags_per_row: int = 0):
    streams = [torch.cuda.current_stream()] + [torch.cuda.Stream() for _ in range(n_streams - 1)]
    # One input set per stream (random, not zeros; two sets so no cache reuse across streams).
    sets = [inputs(segments, rows, seed, tags_per_row) for seed in range(n_streams)]
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
    return summarize_times(segments, rows, iters, n_streams, [a.elapsed_time(b) for a, b in events], queue_ms, wall)


def measure_graph(model, segments: int, rows: int, iters: int, tags_per_row: int = 0):
    """The model captured in a CUDA graph at one fixed shape, timed by replays (one stream).

    Warm-up on a side stream before the capture, as torch.cuda.graphs asks; the replay's
    logits are checked against a direct call on the same inputs first.
    """
    static = inputs(segments, rows, 0, tags_per_row)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            direct = model(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(*static)
    graph.replay()
    torch.cuda.synchronize()
    diff = (out.float() - direct.float()).abs().max().item()
    scale = direct.float().abs().max().item()
    # Same kernels, same inputs: only the order of atomic adds differs (bf16 sums).
    if not diff <= 0.05 * scale:
        raise RuntimeError(f"the graph's replay differs from a direct call by {diff:.3g} (largest logit {scale:.3g})")
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    events, queue_ms = [], []
    t_start = time.perf_counter()
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record(stream)
        graph.replay()
        end.record(stream)
        queue_ms.append((time.perf_counter() - t0) * 1e3)
        events.append((start, end))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t_start
    r = summarize_times(segments, rows, iters, 1, [a.elapsed_time(b) for a, b in events], queue_ms, wall)
    r["graph_vs_direct_max_diff"] = diff
    return r


def report(r: dict) -> None:
    if "error" in r:
        print(f"{r['layout']:>24} {r['segments']:>6} segs: FAILED: {r['error']}", flush=True)
        return
    print(f"{r['layout']:>24} benchmark={str(r['cudnn_benchmark']):5} {r['segments']:>6} segs, {r['streams']} stream(s): "
          f"device {r['device_ms_median']:7.2f} ms (p90 {r['device_ms_p90']:6.2f}), "
          f"queue {r['queue_ms_median']:6.2f} ms, {r['segments_per_s']:>9,} segs/s "
          f"({r['segments_per_s_median_batch']:>9,} by the median batch)", flush=True)


def failed(results: list, what: dict, e: BaseException) -> None:
    """Records and prints a failed measurement."""
    r = dict(what, error=(f"{type(e).__name__}: {e}".splitlines() or [""])[0][:500])
    results.append(r)
    report(r)


def attempt(results: list, what: dict, fn) -> None:
    """Runs one measurement; a failure is printed and recorded, and the script goes on."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - each part of the check stands alone
        traceback.print_exc()
        failed(results, what, e)
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a sticky CUDA error fails the next parts on their own
            traceback.print_exc()
        return
    r.update(what)
    results.append(r)
    report(r)


def load_make_models(path: Path):
    spec = importlib.util.spec_from_file_location("make_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_callable(package):
    """Calls the package the way segpredict does, one list of tensors in, logits out."""
    loader = getattr(package, "loader", None)
    if loader is None or not hasattr(loader, "boxed_run"):
        return package
    return lambda *xs: loader.boxed_run(list(xs))[0]


def measure_package(args, results: list) -> None:
    torch.backends.cudnn.benchmark = False
    for single_threaded in [False, True]:
        layout = "aoti-single-threaded" if single_threaded else "aoti"
        try:
            # The device index, not the default -1: see load_package in tools/make_models.py.
            package = torch._inductor.aoti_load_package(args.aoti, run_single_threaded=single_threaded,
                                                        device_index=torch.cuda.current_device())
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            failed(results, dict(layout=layout, cudnn_benchmark=False, segments=0), e)
            continue
        model = package_callable(package)
        for segments in args.segments:
            rows = min(args.rows, segments)
            what = dict(layout=layout, cudnn_benchmark=False, segments=segments, rows=rows,
                        tags_per_row=args.tags_per_row)
            for n_streams in args.streams:
                attempt(results, dict(what, streams=n_streams),
                        lambda: measure(model, segments, rows, args.iters, n_streams, args.tags_per_row))
            # AOTInductor's bookkeeping (an event query between calls) is not allowed in a
            # capture; torch documents run_single_threaded for CUDA graphs.
            if args.cuda_graph and single_threaded:
                attempt(results, dict(what, layout=layout + "+graph", streams=1),
                        lambda: measure_graph(model, segments, rows, args.iters, args.tags_per_row))
        del package, model
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def measure_torchscript(args, results: list, channels_last: bool, benchmark: bool) -> None:
    layout = "channels_last" if channels_last else "nchw"
    try:
        model = torch.jit.load(args.model, map_location="cuda").to(torch.bfloat16).eval()
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        failed(results, dict(layout=layout, cudnn_benchmark=benchmark, segments=0), e)
        return
    for segments in args.segments:
        rows = min(args.rows, segments)
        for n_streams in args.streams:
            attempt(results, dict(layout=layout, cudnn_benchmark=benchmark, segments=segments, rows=rows,
                                  tags_per_row=args.tags_per_row, streams=n_streams),
                    lambda: measure(model, segments, rows, args.iters, n_streams, args.tags_per_row))


def measure_sync_free(args, results: list, channels_last: bool, benchmark: bool) -> None:
    layout = "sync-free-" + ("channels_last" if channels_last else "nchw")

    def build():
        mm = load_make_models(args.make_models)
        model = mm.EXPORTABLE[args.sync_free]()
        weights = (torch.jit.load(args.model, map_location="cpu").state_dict() if args.model
                   else mm.eager_weights(args.sync_free))
        model.load_state_dict(weights)
        model = model.eval().to(device="cuda", dtype=torch.bfloat16)
        return model.to(memory_format=torch.channels_last) if channels_last else model

    try:
        model = build()
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        failed(results, dict(layout=layout, cudnn_benchmark=benchmark, segments=0), e)
        return
    for segments in args.segments:
        rows = min(args.rows, segments)
        what = dict(layout=layout, cudnn_benchmark=benchmark, segments=segments, rows=rows,
                    tags_per_row=args.tags_per_row)
        for n_streams in args.streams:
            attempt(results, dict(what, streams=n_streams),
                    lambda: measure(model, segments, rows, args.iters, n_streams, args.tags_per_row))
        if args.cuda_graph:
            attempt(results, dict(what, layout=layout + "+graph", streams=1),
                    lambda: measure_graph(model, segments, rows, args.iters, args.tags_per_row))


def summarize(paths: list[str]) -> dict:
    """One-stream results of several JSON files, keyed by layout and segments, with ratios."""
    rows, errors = {}, {}
    for p in paths:
        try:
            with open(p) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            errors[p] = f"{type(e).__name__}: {e}"
            continue
        for r in data["results"]:
            if r.get("streams", 1) != 1:
                continue
            key = f"{r['layout']}@{r['segments']}"
            if "error" in r:
                errors[key] = r["error"]
            elif not r.get("cudnn_benchmark"):
                rows[key] = {"segs_per_s": r["segments_per_s"], "segs_per_s_median_batch": r["segments_per_s_median_batch"],
                             "device_ms_median": r["device_ms_median"], "queue_ms_median": r["queue_ms_median"]}

    def ratio(a: str, b: str, field: str):
        if a in rows and b in rows:
            return round(rows[a][field] / rows[b][field], 3)
        return None

    pairs = {
        "aoti / torchscript": ("aoti", "channels_last"),
        "aoti-single-threaded / torchscript": ("aoti-single-threaded", "channels_last"),
        "aoti-single-threaded / aoti": ("aoti-single-threaded", "aoti"),
        "aoti-single-threaded / sync-free eager": ("aoti-single-threaded", "sync-free-channels_last"),
        "aoti-single-threaded graph / aoti-single-threaded": ("aoti-single-threaded+graph", "aoti-single-threaded"),
        "aoti-single-threaded graph / torchscript": ("aoti-single-threaded+graph", "channels_last"),
        "sync-free eager / torchscript": ("sync-free-channels_last", "channels_last"),
        "sync-free eager graph / sync-free eager": ("sync-free-channels_last+graph", "sync-free-channels_last"),
        "sync-free eager graph / torchscript": ("sync-free-channels_last+graph", "channels_last"),
    }
    ratios = {}
    for segments in sorted({key.rsplit("@", 1)[1] for key in rows}, key=int):
        for name, (a, b) in pairs.items():
            wall = ratio(f"{a}@{segments}", f"{b}@{segments}", "segs_per_s")
            if wall is not None:
                med = ratio(f"{a}@{segments}", f"{b}@{segments}", "segs_per_s_median_batch")
                ratios[f"{name} @{segments}"] = {"wall": wall, "median_batch": med}
    return {"segs_per_s": rows, "ratios": ratios, "errors": errors}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="TorchScript model (.pt); with --sync-free, also the weights")
    ap.add_argument("--aoti", help="AOTInductor package (.pt2) instead of --model")
    ap.add_argument("--sync-free", choices=["digits-small", "digits-seed"],
                    help="also the sync-free eager model of this name from tools/make_models.py")
    ap.add_argument("--make-models", type=Path, default=MAKE_MODELS, help="tools/make_models.py (for --sync-free)")
    ap.add_argument("--cuda-graph", action="store_true", help="also the sync-free models captured in a CUDA graph")
    ap.add_argument("--segments", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--tags-per-row", type=int, default=0, help="tags per row (0: no tags, as the earlier ceilings)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--input", help="time on this Parquet file's first segments (ceiling_data.py's reader), "
                                    "not random bytes")
    ap.add_argument("--layouts", nargs="+", choices=["nchw", "channels_last"], default=["nchw", "channels_last"])
    ap.add_argument("--benchmark", nargs="+", choices=["off", "on"], default=["off", "on"])
    ap.add_argument("--streams", type=int, nargs="+", default=[1])
    ap.add_argument("--json")
    ap.add_argument("--summarize", nargs="+", metavar="JSON",
                    help="print one JSON line of one-stream segs/s and ratios from these result files")
    args = ap.parse_args()
    if args.summarize:
        print(json.dumps(summarize(args.summarize)), flush=True)
        return
    if bool(args.model or args.sync_free) == bool(args.aoti):
        ap.error("give one of --aoti and --model (or --sync-free)")
    if args.input:
        global REAL_SEGMENTS
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from ceiling_data import real_segments

        REAL_SEGMENTS = real_segments(args.input, 2 * max(args.segments))
    if not torch.cuda.is_available():
        sys.exit("model_ceiling.py: CUDA is not available here (it times models on a GPU; "
                 "--summarize runs anywhere)")
    results: list = []
    if args.aoti:
        with torch.inference_mode():
            measure_package(args, results)
    with torch.inference_mode():
        for channels_last in [layout == "channels_last" for layout in args.layouts] if not args.aoti else []:
            for benchmark in [b == "on" for b in args.benchmark]:
                torch.backends.cudnn.benchmark = benchmark
                if args.model:
                    measure_torchscript(args, results, channels_last, benchmark)
                if args.sync_free:
                    measure_sync_free(args, results, channels_last, benchmark)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
