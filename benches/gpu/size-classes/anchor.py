"""The Python anchor for issue 33: the strongest plain PyTorch a careful engineer writes for
size-classed batches, on the same model as segpredict's packages.

The careful pipeline of benches/gpu/plain_pytorch.py (reader thread with numpy gathers into log2
buckets under a 16,384-segment budget, pinned host tensors, non-blocking uploads, the next batch
queued before the last one's answers are read, a writer thread), with the sync-free digits-seed
(tools/make_models.py's ExportableDigitsSeed, scan pooling, bf16, weights channels-last: what the
packages are exported from), compiled by torch.compile:

  --mode reduce-overhead  dynamic=False, CUDA graphs per shape. Every batch is padded as segpredict
                          pads it for a graph: segments up to its size class (the same classes),
                          rows up to the class plus one spare row, the tags up to the class (or
                          the power of two above, for a batch with more) with their padding
                          spread over the padding rows; so a run sees one shape per class, which
                          --warm compiles (and records) before the first batch, as segpredict
                          warms its classes.
  --mode default-dynamic  torch.compile's default mode with dynamic=True, on the unpadded batches.

Compile time is reported apart: the host time of every call that compiled (dynamo's unique graph
count rose) or, in reduce-overhead mode, recorded a CUDA graph (a shape's second call). The steady
rate is segments / (wall - compile). Memory: reserved bytes when the last shape was compiled and at
the end (growth after warm-up).

    python anchor.py --mode reduce-overhead --input in.parquet --output out.parquet --json r.json
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import torch  # noqa: E402

from plain_pytorch import READ_COLUMNS, BucketGatherer, writer_thread  # noqa: E402

# bucketing's default ladder for a 16,384 budget: B/16, B/8, B/4, B/2, 3B/4, B.
CLASSES = [1024, 2048, 4096, 8192, 12288, 16384]
MIN_TAGS = 16


def size_class(n: int) -> int:
    return next((c for c in CLASSES if c >= n), n)


def pad_batch(b: dict) -> dict:
    """Segments to the class, rows to class + 1, tags to a power of two spread over padding rows."""
    n, r, t = len(b["segs"]), len(b["counts"]), len(b["tags"])
    s_cap = size_class(n)
    r_cap = s_cap + 1
    t_cap = max(s_cap, 1 << (max(MIN_TAGS, t) - 1).bit_length())
    segs = np.zeros((s_cap, 64), np.uint8)
    segs[:n] = b["segs"]
    counts = np.zeros(r_cap, np.int64)
    counts[:r] = b["counts"]
    tags = np.zeros(t_cap, np.int64)
    tags[:t] = b["tags"]
    tag_counts = np.zeros(r_cap, np.int64)
    tag_counts[:r] = b["tag_counts"]
    pad_rows, pad_tags = r_cap - r, t_cap - t
    each, more = divmod(pad_tags, pad_rows)
    tag_counts[r:] = each
    tag_counts[r : r + more] += 1
    return {"segs": segs, "counts": counts, "tags": tags, "tag_counts": tag_counts, "ids": b["ids"], "rows": r,
            "n_segments": n}


def reader(path: str, budget: int, pad: bool, out_q: queue.Queue) -> None:
    import pyarrow.parquet as pq

    try:
        buckets = BucketGatherer(budget)

        def put(b):
            b = pad_batch(b) if pad else {**b, "rows": len(b["counts"]), "n_segments": len(b["segs"])}
            t = {"segs": torch.from_numpy(np.ascontiguousarray(b["segs"])).pin_memory()}
            for k in ("counts", "tags", "tag_counts"):
                t[k] = torch.from_numpy(np.ascontiguousarray(b[k], dtype=np.int64)).pin_memory()
            t.update(ids=b["ids"], rows=b["rows"], n_segments=b["n_segments"])
            out_q.put(t)

        for rb in pq.ParquetFile(path).iter_batches(batch_size=8192, columns=READ_COLUMNS):
            for b in buckets.add_record_batch(rb):
                put(b)
        for b in buckets.finish():
            put(b)
        out_q.put(None)
    except BaseException as e:  # surfaced in the main thread
        out_q.put(e)
        raise


def compiled_model(mode: str):
    from make_models import eager_models

    model, _ = eager_models("digits-seed", "cuda", torch.bfloat16, "scan")
    model = model.to(memory_format=torch.channels_last).eval()

    def forward(segs, counts, tags, tag_counts):
        return model(segs.view(-1, 1, 8, 8).to(torch.bfloat16), counts, tags, tag_counts)

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 1024)
    if mode == "reduce-overhead":
        return torch.compile(forward, mode="reduce-overhead", dynamic=False)
    return torch.compile(forward, dynamic=True)


def warm_batches(static: bool) -> list[dict]:
    """One synthetic batch per class (rows of 18 segments and 3 tags), padded as the run pads."""
    batches = []
    for c in CLASSES if static else CLASSES[-1:]:
        rows = c // 18
        b = {"segs": np.zeros((rows * 18, 64), np.uint8), "counts": np.full(rows, 18), "tags": np.zeros(rows * 3),
             "tag_counts": np.full(rows, 3), "ids": np.zeros(rows)}
        b = pad_batch(b) if static else {**b, "rows": rows, "n_segments": rows * 18}
        batches.append(b)
    return batches


def warm(fn, static: bool, dev) -> tuple[float, set]:
    """Compiles (and in reduce-overhead mode records) every class's shape; returns the seconds and
    the shapes."""
    t0 = time.perf_counter()
    keys = set()
    with torch.inference_mode():
        for b in warm_batches(static):
            x = [torch.from_numpy(np.ascontiguousarray(b[k], dtype=np.uint8 if k == "segs" else np.int64)).to(dev)
                 for k in ("segs", "counts", "tags", "tag_counts")]
            keys.add(tuple(t.shape[0] for t in x))
            for _ in range(3 if static else 1):
                if static:
                    torch.compiler.cudagraph_mark_step_begin()
                torch.softmax(fn(*x)[: b["rows"]].float(), dim=-1).max(dim=-1)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, keys


def unique_graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def run(args, started: float) -> dict:
    dev = torch.device("cuda")
    static = args.mode == "reduce-overhead"
    fn = compiled_model(args.mode)
    warm_s, warmed = warm(fn, static, dev) if args.warm else (0.0, set())
    model_ready = time.perf_counter() - started
    if args.warm_only:
        return {"tool": "anchor", "mode": args.mode, "warm_only": True, "warm_s": warm_s, "model_ready_s": model_ready,
                "unique_graphs": unique_graphs()}
    batch_q: queue.Queue = queue.Queue(maxsize=8)
    write_q: queue.Queue = queue.Queue(maxsize=16)
    schema = pa.schema([("id", pa.string()), ("label", pa.string()), ("label_id", pa.int32()), ("score", pa.float32())])
    labels = Path(args.labels).read_text(encoding="utf-8").splitlines()
    threads = [threading.Thread(target=reader, args=(args.input, args.budget, static, batch_q), daemon=True),
               threading.Thread(target=writer_thread, args=(args.output, labels, write_q, schema), daemon=True)]
    for t in threads:
        t.start()
    seen: dict[tuple, int] = {key: 3 for key in warmed}
    compile_s, compiles, n_rows, n_segments, padded = warm_s, 0, 0, 0, 0
    first_queued = reserved_after_warm = None
    pending = None
    device_ms = []

    def collect(p):
        nonlocal n_rows
        p["done"].synchronize()
        device_ms.append(p["start"].elapsed_time(p["done"]))
        write_q.put((p["ids"], p["score"].numpy(), p["pred"].numpy()))
        n_rows += len(p["ids"])

    with torch.inference_mode():
        while True:
            b = batch_q.get()
            if isinstance(b, BaseException):
                raise b
            if b is None:
                break
            if first_queued is None:
                first_queued = time.perf_counter() - started
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            x = [b[k].to(dev, non_blocking=True) for k in ("segs", "counts", "tags", "tag_counts")]
            key = tuple(t.shape[0] for t in x)
            graphs, t0 = unique_graphs(), time.perf_counter()
            if static:
                torch.compiler.cudagraph_mark_step_begin()
            logits = fn(*x)[: b["rows"]]
            score, pred = torch.softmax(logits.float(), dim=-1).max(dim=-1)
            calls = seen[key] = seen.get(key, 0) + 1
            if unique_graphs() != graphs or (static and calls == 2):
                compile_s += time.perf_counter() - t0
                compiles += 1
                reserved_after_warm = None
            score_h = torch.empty(score.shape, dtype=score.dtype, pin_memory=True)
            pred_h = torch.empty(pred.shape, dtype=pred.dtype, pin_memory=True)
            score_h.copy_(score, non_blocking=True)
            pred_h.copy_(pred, non_blocking=True)
            done = torch.cuda.Event(enable_timing=True)
            done.record()
            n_segments += b["n_segments"]
            padded += key[0]
            if pending is not None:
                collect(pending)
            if reserved_after_warm is None:
                reserved_after_warm = torch.cuda.memory_reserved(dev)
            pending = {"start": start, "done": done, "score": score_h, "pred": pred_h, "ids": b["ids"]}
        if pending is not None:
            collect(pending)
    write_q.put(None)
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    reserved_end = torch.cuda.memory_reserved(dev)
    device_ms.sort()
    return {
        "tool": "anchor", "mode": args.mode, "rows": n_rows, "segments": n_segments, "padded_segments": padded,
        "wall_s": wall, "segments_per_s": n_segments / wall, "compile_s": compile_s, "compiles": compiles,
        "warm_s": warm_s,
        "steady_segments_per_s": n_segments / max(wall - first_queued - (compile_s - warm_s), 1e-9),
        "shapes": len(seen),
        "model_ready_s": model_ready, "time_to_first_batch_s": first_queued,
        "reserved_after_warm_up": reserved_after_warm, "reserved_end": reserved_end,
        "reserved_growth_after_warm_up": None if reserved_after_warm is None else reserved_end - reserved_after_warm,
        "peak_reserved": torch.cuda.max_memory_reserved(dev),
        "device_ms_median": device_ms[len(device_ms) // 2] if device_ms else None,
        "batches": len(device_ms),
    }


def main() -> None:
    started = time.perf_counter()
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["reduce-overhead", "default-dynamic"], required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--labels", default=str(ROOT / "models" / "digits-seed.labels.txt"))
    ap.add_argument("--budget", type=int, default=16384)
    ap.add_argument("--json", required=True)
    ap.add_argument("--warm", action="store_true", help="compile every class's shape before the first batch")
    ap.add_argument("--warm-only", action="store_true", help="--warm, then stop (fills inductor's caches)")
    args = ap.parse_args()
    args.warm = args.warm or args.warm_only
    result = run(args, started)
    Path(args.json).write_text(json.dumps(result, indent=1))
    if args.warm_only:
        print(f"anchor {args.mode}: warmed in {result['warm_s']:.1f}s ({result['unique_graphs']} graphs)", flush=True)
        return
    print(f"anchor {args.mode}: {result['rows']} rows, {result['segments']:,} segments in {result['wall_s']:.1f}s = "
          f"{result['segments_per_s']:,.0f} segs/s; compile {result['compile_s']:.1f}s ({result['compiles']} calls, "
          f"{result['shapes']} shapes); steady {result['steady_segments_per_s']:,.0f} segs/s; "
          f"growth after warm-up {result['reserved_growth_after_warm_up']}", flush=True)


if __name__ == "__main__":
    main()
