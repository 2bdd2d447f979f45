"""The baseline: the same job done the plain-PyTorch way.

pyarrow reads the Parquet file in record batches, rows are batched either by
row count in input order (the seed's way) or in log2 buckets under a segment
budget, the same TorchScript model runs eagerly under inference_mode, and
predictions are written to Parquet with pyarrow. Per batch it records what
segpredict's report records (segments, peak allocated and reserved), so the
two are summarised by the same code.

    python benches/gpu/plain_pytorch.py --model models/digits-seed.pt --input in.parquet \
        --output out.parquet --policy rows --rows 32 --dtype bf16 --json result.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def decode(rb: pa.RecordBatch):
    seg = rb.column("segments")
    seg_off = np.asarray(seg.offsets)
    vals = seg.values
    raw = np.frombuffer(vals.buffers()[1], dtype=np.uint8)[vals.offset * 64 : (vals.offset + len(vals)) * 64].reshape(-1, 64)
    raw = raw[seg_off[0] :]
    seg_off = seg_off - seg_off[0]
    tags = rb.column("tags")
    tag_off = np.asarray(tags.offsets)
    tag_vals = np.asarray(tags.values).astype(np.int64)[tag_off[0] :]
    tag_off = tag_off - tag_off[0]
    ids = rb.column("id").to_pylist()
    return [(ids[i], raw[seg_off[i] : seg_off[i + 1]], tag_vals[tag_off[i] : tag_off[i + 1]]) for i in range(len(ids))]


def batches_by_rows(rows_iter, n_rows):
    batch = []
    for row in rows_iter:
        batch.append(row)
        if len(batch) == n_rows:
            yield batch
            batch = []
    if batch:
        yield batch


def batches_by_budget(rows_iter, budget):
    buckets: dict[int, list] = {}
    totals: dict[int, int] = {}
    for row in rows_iter:
        n = len(row[1])
        if n > budget:
            yield [row]
            continue
        k = n.bit_length()
        if totals.get(k, 0) + n > budget:
            yield buckets.pop(k)
            totals[k] = 0
        buckets.setdefault(k, []).append(row)
        totals[k] = totals.get(k, 0) + n
    for k in sorted(buckets):
        if buckets[k]:
            yield buckets[k]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--policy", choices=["rows", "budget"], required=True)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--budget", type=int, default=16384)
    ap.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    ap.add_argument("--json", required=True)
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke test)")
    ap.add_argument("--channels-last", action="store_true", help="weights in channels-last memory format")
    args = ap.parse_args()
    started = time.perf_counter()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    dtype = DTYPES[args.dtype]
    labels = Path(args.labels).read_text(encoding="utf-8").splitlines()
    model = torch.jit.load(args.model, map_location=dev).to(dtype).eval()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    pf = pq.ParquetFile(args.input)
    rows_iter = (row for rb in pf.iter_batches(batch_size=8192, columns=["id", "segments", "tags"]) for row in decode(rb))
    batches = batches_by_rows(rows_iter, args.rows) if args.policy == "rows" else batches_by_budget(rows_iter, args.budget)
    schema = pa.schema([("id", pa.string()), ("label", pa.string()), ("label_id", pa.int32()), ("score", pa.float32())])
    writer = pq.ParquetWriter(args.output, schema, compression="zstd")
    records, gpu_ms, n_rows, n_segments = [], 0.0, 0, 0
    with torch.inference_mode():
        for batch in batches:
            if cuda:
                torch.cuda.reset_peak_memory_stats(dev)
            segs = np.concatenate([r[1] for r in batch])
            counts = torch.tensor([len(r[1]) for r in batch], dtype=torch.int64)
            tags = np.concatenate([r[2] for r in batch]) if batch else np.zeros(0, np.int64)
            tag_counts = torch.tensor([len(r[2]) for r in batch], dtype=torch.int64)
            t0 = time.perf_counter()
            x = torch.from_numpy(segs).to(dev).view(-1, 1, 8, 8).to(dtype)
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            logits = model(x, counts.to(dev), torch.from_numpy(tags).to(dev), tag_counts.to(dev))
            if cuda:
                end.record()
            probs = torch.softmax(logits.float(), dim=-1)
            score, pred = probs.max(dim=-1)
            score, pred = score.cpu().numpy(), pred.cpu().numpy()
            wall_ms = (time.perf_counter() - t0) * 1e3
            record = {"rows": len(batch), "segments": int(len(segs)), "padded_segments": int(len(segs)), "wall_ms": wall_ms}
            if cuda:
                gpu_ms += start.elapsed_time(end)
                stats = torch.cuda.memory_stats(dev)
                record["memory"] = {
                    "allocated_peak": stats["allocated_bytes.all.peak"],
                    "reserved_peak": stats["reserved_bytes.all.peak"],
                    "reserved": stats["reserved_bytes.all.current"],
                }
            else:
                gpu_ms += wall_ms
            records.append(record)
            writer.write_table(
                pa.table(
                    {
                        "id": [r[0] for r in batch],
                        "label": [labels[p] for p in pred],
                        "label_id": pa.array(pred.astype(np.int32)),
                        "score": pa.array(score.astype(np.float32)),
                    },
                    schema=schema,
                )
            )
            n_rows += len(batch)
            n_segments += len(segs)
    writer.close()
    wall = time.perf_counter() - started
    result = {
        "tool": "plain-pytorch",
        "policy": args.policy,
        "dtype": args.dtype,
        "channels_last": args.channels_last,
        "rows": n_rows,
        "segments": n_segments,
        "wall_s": wall,
        "segments_per_s": n_segments / wall,
        "model_busy_share": gpu_ms / 1e3 / wall,
        "batch_records": records,
    }
    Path(args.json).write_text(json.dumps(result))
    print(f"{args.policy}: {n_rows} rows, {n_segments} segments in {wall:.1f}s = {n_segments / wall:,.0f} segs/s")


if __name__ == "__main__":
    main()
