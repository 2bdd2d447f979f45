"""The baseline: the same job done the plain-PyTorch way.

pyarrow reads the Parquet file in record batches, rows are batched either by
row count in input order (the seed's way) or in log2 buckets under a segment
budget, the same TorchScript model runs eagerly under inference_mode, and
predictions are written to Parquet with pyarrow. Per batch it records what
segpredict's report records (segments, peak allocated and reserved), so the
two are summarised by the same code.

Two loops:
- the simple one (default): read, batch, upload, predict, write, one after
  the other on one thread;
- `--careful` (budget policy): what a PyTorch user who knows the habits
  writes. A reader thread reads with pyarrow, gathers each log2 bucket's rows
  with numpy (unpadded) and pins the batch; the main thread uploads with
  non-blocking copies, queues the model on batch k+1 before reading batch
  k's answers (copied into pinned memory, a CUDA event marks them), and a
  writer thread turns answers into Parquet. Weights channels-last in bf16
  (pass --channels-last). Memory statistics are read every 64th batch only.

    python benches/gpu/plain_pytorch.py --model models/digits-seed.pt --input in.parquet \
        --output out.parquet --policy rows --rows 32 --dtype bf16 --json result.json
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
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



# ---------------------------------------------------------------- careful loop

READ_COLUMNS = ["id", "segments", "tags"]
STATS_EVERY = 64


class BucketGatherer:
    """log2 buckets under a segment budget, filled from whole record batches
    with numpy gathers (no per-row Python objects). Emits batches as dicts of
    numpy arrays: segs [S, 64] u8, counts [R], tags [T], tag_counts [R], ids."""

    def __init__(self, budget: int):
        self.budget = budget
        self.pending: dict[int, list] = {}  # class -> list of pieces
        self.totals: dict[int, int] = {}

    def add_record_batch(self, rb: pa.RecordBatch):
        seg = rb.column("segments")
        seg_off = np.asarray(seg.offsets).astype(np.int64)
        vals = seg.values
        raw = np.frombuffer(vals.buffers()[1], dtype=np.uint8)[vals.offset * 64 : (vals.offset + len(vals)) * 64].reshape(-1, 64)
        raw = raw[seg_off[0] :]
        seg_off = seg_off - seg_off[0]
        tags = rb.column("tags")
        tag_off = np.asarray(tags.offsets).astype(np.int64)
        tag_vals = np.asarray(tags.values).astype(np.int64)[tag_off[0] :]
        tag_off = tag_off - tag_off[0]
        ids = np.asarray(rb.column("id").to_pylist(), dtype=object)
        counts = np.diff(seg_off)
        tag_counts = np.diff(tag_off)
        classes = np.zeros(len(counts), dtype=np.int64)
        nz = counts > 0
        classes[nz] = np.floor(np.log2(counts[nz])).astype(np.int64) + 1
        for k in np.unique(classes):
            rows = np.flatnonzero(classes == k)  # input order within the class
            yield from self._add_rows(int(k), rows, counts, seg_off, raw, tag_off, tag_vals, tag_counts, ids)

    def _add_rows(self, k, rows, counts, seg_off, raw, tag_off, tag_vals, tag_counts, ids):
        c = counts[rows]
        start = 0
        while start < len(rows):
            room = self.budget - self.totals.get(k, 0)
            cum = np.cumsum(c[start:])
            take = int(np.searchsorted(cum, room, side="right"))
            if take == 0 and self.totals.get(k, 0) == 0:
                take = 1  # a row over the budget goes alone
            if take > 0:
                sel = rows[start : start + take]
                self.pending.setdefault(k, []).append(
                    (gather(raw, seg_off, sel), counts[sel], gather(tag_vals, tag_off, sel), tag_counts[sel], ids[sel])
                )
                self.totals[k] = self.totals.get(k, 0) + int(cum[take - 1])
                start += take
            if start < len(rows) or self.totals[k] >= self.budget:
                yield self._flush(k)

    def _flush(self, k):
        pieces = self.pending.pop(k)
        self.totals[k] = 0
        return {
            "segs": np.concatenate([p[0] for p in pieces]),
            "counts": np.concatenate([p[1] for p in pieces]),
            "tags": np.concatenate([p[2] for p in pieces]),
            "tag_counts": np.concatenate([p[3] for p in pieces]),
            "ids": np.concatenate([p[4] for p in pieces]),
        }

    def finish(self):
        for k in sorted(self.pending):
            if self.pending[k]:
                yield self._flush(k)


def gather(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """values[offsets[r]:offsets[r+1]] for r in rows, concatenated, vectorised."""
    starts, ends = offsets[rows], offsets[rows + 1]
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return values[:0]
    # Position i of the output reads values[starts[row(i)] + (i - first(row(i)))].
    firsts = np.cumsum(lens) - lens
    idx = np.arange(total, dtype=np.int64) + np.repeat(starts - firsts, lens)
    return values[idx]


def reader_thread(path, budget, out_q, pin):
    try:
        pf = pq.ParquetFile(path)
        buckets = BucketGatherer(budget)

        def put(b):
            t = {
                "segs": torch.from_numpy(b["segs"]),
                "counts": torch.from_numpy(b["counts"].astype(np.int64)),
                "tags": torch.from_numpy(b["tags"]),
                "tag_counts": torch.from_numpy(b["tag_counts"].astype(np.int64)),
            }
            if pin:
                t = {k: v.pin_memory() for k, v in t.items()}
            t["ids"] = b["ids"]
            out_q.put(t)

        for rb in pf.iter_batches(batch_size=8192, columns=READ_COLUMNS):
            for b in buckets.add_record_batch(rb):
                put(b)
        for b in buckets.finish():
            put(b)
        out_q.put(None)
    except BaseException as e:  # surface in the main thread
        out_q.put(e)
        raise


def writer_thread(path, labels, in_q, schema):
    writer = pq.ParquetWriter(path, schema, compression="zstd")
    label_arr = np.asarray(labels, dtype=object)
    while True:
        item = in_q.get()
        if item is None:
            break
        ids, score, pred = item
        writer.write_table(
            pa.table(
                {"id": pa.array(ids, pa.string()), "label": pa.array(label_arr[pred], pa.string()),
                 "label_id": pa.array(pred.astype(np.int32)), "score": pa.array(score.astype(np.float32))},
                schema=schema,
            )
        )
    writer.close()


def run_careful(args, model, dev, dtype, labels, started):
    cuda = dev.type == "cuda"
    batch_q: queue.Queue = queue.Queue(maxsize=8)
    write_q: queue.Queue = queue.Queue(maxsize=16)
    schema = pa.schema([("id", pa.string()), ("label", pa.string()), ("label_id", pa.int32()), ("score", pa.float32())])
    reader = threading.Thread(target=reader_thread, args=(args.input, args.budget, batch_q, cuda), daemon=True)
    writer = threading.Thread(target=writer_thread, args=(args.output, labels, write_q, schema), daemon=True)
    reader.start()
    writer.start()
    records, n_rows, n_segments = [], 0, 0
    pending = None
    first_queued = None
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)

    def collect(p):
        nonlocal n_rows
        done_ev = p["done"]
        done_ev.synchronize()
        rec = p["record"]
        if cuda:
            rec["device_ms"] = p["start"].elapsed_time(done_ev)
        rec["done_at_ms"] = (time.perf_counter() - started) * 1e3
        rec["wall_ms"] = rec["done_at_ms"] - rec["queued_at_ms"]
        records.append(rec)
        write_q.put((p["ids"], p["score"].numpy(), p["pred"].numpy()))
        n_rows += len(p["ids"])

    with torch.inference_mode():
        while True:
            b = batch_q.get()
            if isinstance(b, BaseException):
                raise b
            if b is None:
                break
            t0 = time.perf_counter()
            if first_queued is None:
                first_queued = t0
            start = done = None
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                start.record()
            x = b["segs"].to(dev, non_blocking=True).view(-1, 1, 8, 8).to(dtype)
            counts = b["counts"].to(dev, non_blocking=True)
            tags = b["tags"].to(dev, non_blocking=True)
            tag_counts = b["tag_counts"].to(dev, non_blocking=True)
            logits = model(x, counts, tags, tag_counts)
            score, pred = torch.softmax(logits.float(), dim=-1).max(dim=-1)
            if cuda:
                score_h = torch.empty(score.shape, dtype=score.dtype, pin_memory=True)
                pred_h = torch.empty(pred.shape, dtype=pred.dtype, pin_memory=True)
                score_h.copy_(score, non_blocking=True)
                pred_h.copy_(pred, non_blocking=True)
                done = torch.cuda.Event(enable_timing=True)
                done.record()
            else:
                score_h, pred_h = score, pred
                done = _Done()
            seg_n = int(b["segs"].shape[0])
            record = {"rows": len(b["ids"]), "segments": seg_n, "padded_segments": seg_n,
                      "queued_at_ms": (t0 - started) * 1e3, "launch_ms": (time.perf_counter() - t0) * 1e3}
            if cuda and len(records) % STATS_EVERY == 0:
                stats = torch.cuda.memory_stats(dev)
                record["memory"] = {
                    "allocated_peak": stats["allocated_bytes.all.peak"],
                    "reserved_peak": stats["reserved_bytes.all.peak"],
                    "reserved": stats["reserved_bytes.all.current"],
                }
            n_segments += seg_n
            nxt = {"start": start, "done": done, "score": score_h, "pred": pred_h, "ids": b["ids"], "record": record}
            if pending is not None:
                collect(pending)
            pending = nxt
        if pending is not None:
            collect(pending)
    write_q.put(None)
    writer.join()
    reader.join()
    last_memory = None
    if cuda:
        stats = torch.cuda.memory_stats(dev)
        last_memory = {
            "allocated_peak": stats["allocated_bytes.all.peak"],
            "reserved_peak": stats["reserved_bytes.all.peak"],
            "reserved": stats["reserved_bytes.all.current"],
        }
        if records:
            records[-1]["memory"] = last_memory
    gpu_ms = sum(r.get("device_ms", r["wall_ms"]) for r in records)
    return records, n_rows, n_segments, gpu_ms, first_queued


class _Done:
    def synchronize(self):
        pass


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
    ap.add_argument("--careful", action="store_true", help="threaded, pinned, one batch in flight (budget policy)")
    args = ap.parse_args()
    if args.careful and args.policy != "budget":
        ap.error("--careful batches by segment budget: use --policy budget")
    started = time.perf_counter()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    dtype = DTYPES[args.dtype]
    labels = Path(args.labels).read_text(encoding="utf-8").splitlines()
    model = torch.jit.load(args.model, map_location=dev).to(dtype).eval()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if args.careful:
        records, n_rows, n_segments, gpu_ms, first_queued = run_careful(args, model, dev, dtype, labels, started)
        write_result(args, started, records, n_rows, n_segments, gpu_ms, first_queued)
        return
    first_queued = None
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
            if first_queued is None:
                first_queued = t0
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
            now = time.perf_counter()
            wall_ms = (now - t0) * 1e3
            record = {"rows": len(batch), "segments": int(len(segs)), "padded_segments": int(len(segs)), "wall_ms": wall_ms,
                      "queued_at_ms": (t0 - started) * 1e3, "launch_ms": wall_ms, "done_at_ms": (now - started) * 1e3}
            if cuda:
                record["device_ms"] = start.elapsed_time(end)
                gpu_ms += record["device_ms"]
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
    write_result(args, started, records, n_rows, n_segments, gpu_ms, first_queued)


def write_result(args, started, records, n_rows, n_segments, gpu_ms, first_queued):
    wall = time.perf_counter() - started
    result = {
        "tool": "plain-pytorch",
        "careful": args.careful,
        "policy": args.policy,
        "dtype": args.dtype,
        "channels_last": args.channels_last,
        "rows": n_rows,
        "segments": n_segments,
        "wall_s": wall,
        "segments_per_s": n_segments / wall,
        "model_busy_share": gpu_ms / 1e3 / wall,
        "torch_threads": torch.get_num_threads(),
        "time_to_first_batch_s": None if first_queued is None else first_queued - started,
        "batch_records": records,
    }
    Path(args.json).write_text(json.dumps(result))
    kind = "careful" if args.careful else args.policy
    print(f"{kind}: {n_rows} rows, {n_segments} segments in {wall:.1f}s = {n_segments / wall:,.0f} segs/s")


if __name__ == "__main__":
    main()
