"""Plain-PyTorch reference predictor: the ground truth the Rust program is tested against.

Usage:
  python tools/reference_predict.py --model models/digits-small.pt \
      --labels models/digits-small.labels.txt --input sample_data/digits.parquet \
      --output /tmp/ref.parquet [--batch-rows 64]

Loads the TorchScript model (torch.jit.load, eval, inference_mode, float32,
CPU, 2 threads), batches --batch-rows rows at a time with NO padding, and
calls forward(segments, segment_counts, tags, tag_counts) -> logits [R, 10]
(see models/README.md). Writes Parquet with columns
  id (string), label (string), label_id (int32),
  score (float32: softmax probability of the predicted class).
Prints the item accuracy if the input has a `true_label` column.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch


def _list_parts(arr: pa.Array):
    """(counts int64 [R], flattened child array) for a list / large_list array."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise TypeError(f"expected list or large_list, got {arr.type}")
    if arr.null_count:
        raise ValueError("null lists are not supported")
    offsets = arr.offsets.to_numpy().astype(np.int64)
    return np.diff(offsets), arr.flatten()


def decode_segments(arr: pa.Array):
    """list<fixed_size_binary(64)> or list<fixed_size_list<uint8>[64]> -> (uint8 [S,64], counts [R])."""
    counts, child = _list_parts(arr)
    n = len(child)
    t = child.type
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 64:
        buf = child.buffers()[1]
        data = np.frombuffer(buf, dtype=np.uint8)[child.offset * 64 : (child.offset + n) * 64]
    elif pa.types.is_fixed_size_list(t) and t.list_size == 64 and pa.types.is_uint8(t.value_type):
        data = child.flatten().to_numpy(zero_copy_only=False)
    else:
        raise TypeError(f"unsupported segment type {t}")
    return data.reshape(n, 64), counts


def decode_tags(arr: pa.Array):
    counts, child = _list_parts(arr)
    return child.to_numpy(zero_copy_only=False).astype(np.int64), counts


def load_input(path: str):
    table = pq.read_table(path)
    cols = {name: table.column(name).combine_chunks() for name in table.column_names}
    return cols


def batch_tensors(seg_col, tag_col, start: int, stop: int):
    """Float32 [S,1,8,8] segments, int64 segment_counts, int64 tags, int64 tag_counts for rows [start, stop)."""
    seg_u8, seg_counts = decode_segments(seg_col.slice(start, stop - start))
    if (seg_counts < 1).any():
        raise ValueError("every row needs at least one segment")
    tags, tag_counts = decode_tags(tag_col.slice(start, stop - start))
    segments = torch.from_numpy(seg_u8.astype(np.float32)).reshape(-1, 1, 8, 8)
    return (
        segments,
        torch.from_numpy(seg_counts.astype(np.int64)),
        torch.from_numpy(tags),
        torch.from_numpy(tag_counts.astype(np.int64)),
    )


def predict_probs(module, cols, batch_rows: int = 64) -> np.ndarray:
    """Softmax probabilities [N, C] (float32) for every row, N rows at a time."""
    n = len(cols["id"])
    out = []
    with torch.inference_mode():
        for start in range(0, n, batch_rows):
            stop = min(n, start + batch_rows)
            logits = module(*batch_tensors(cols["segments"], cols["tags"], start, stop))
            out.append(torch.softmax(logits.float(), dim=1).numpy())
    return np.concatenate(out, axis=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--batch-rows", type=int, default=64)
    args = ap.parse_args()

    torch.set_num_threads(2)
    t0 = time.perf_counter()
    labels = open(args.labels, encoding="utf-8").read().splitlines()
    module = torch.jit.load(args.model, map_location="cpu")
    module.eval()
    module.float()
    cols = load_input(args.input)
    probs = predict_probs(module, cols, args.batch_rows)
    if probs.shape[1] != len(labels):
        raise ValueError(f"model has {probs.shape[1]} classes, label map has {len(labels)}")
    label_id = probs.argmax(axis=1).astype(np.int32)
    score = probs[np.arange(len(probs)), label_id].astype(np.float32)
    pred = [labels[i] for i in label_id]
    out = pa.table(
        {
            "id": cols["id"].cast(pa.string()),
            "label": pa.array(pred, type=pa.string()),
            "label_id": pa.array(label_id, type=pa.int32()),
            "score": pa.array(score, type=pa.float32()),
        }
    )
    pq.write_table(out, args.output)
    dt = time.perf_counter() - t0
    print(f"wrote {args.output}: {len(pred)} rows in {dt:.2f}s")
    if "true_label" in cols:
        truth = cols["true_label"].to_pylist()
        acc = float(np.mean([p == t for p, t in zip(pred, truth)]))
        print(f"item accuracy: {acc:.4f} ({sum(p == t for p, t in zip(pred, truth))}/{len(pred)})")


if __name__ == "__main__":
    main()
