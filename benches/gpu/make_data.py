"""Heavy-tailed nightly-like input for the GPU benchmark.

Rows draw their segment count from a lognormal (median 18, sigma 1.3, at most
2,525), and each segment is a real 8x8 digit taken from the committed sample,
so the data is the sample's kind at 100x its size. Deterministic (fixed seed).

    python benches/gpu/make_data.py --rows 200000 --out /tmp/bench/input.parquet
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]


def segment_pool() -> np.ndarray:
    table = pq.read_table(ROOT / "sample_data" / "digits.parquet", columns=["segments"])
    segments = table.column("segments").combine_chunks()
    values = segments.values  # fixed_size_binary(64)
    raw = np.frombuffer(values.buffers()[1], dtype=np.uint8)[values.offset * 64 : (values.offset + len(values)) * 64]
    return raw.reshape(-1, 64)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--row-group", type=int, default=8192)
    args = ap.parse_args()
    rng = np.random.default_rng(20261202)
    pool = segment_pool()
    counts = np.clip(np.rint(rng.lognormal(np.log(18), 1.3, args.rows)), 1, 2525).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    picks = rng.integers(0, len(pool), int(offsets[-1]))
    seg_bytes = pool[picks].reshape(-1)
    seg_values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(64), int(offsets[-1]), [None, pa.py_buffer(seg_bytes.tobytes())])
    segments = pa.ListArray.from_arrays(pa.array(offsets), seg_values)
    tag_counts = rng.integers(0, 7, args.rows)
    tag_offsets = np.concatenate([[0], np.cumsum(tag_counts)]).astype(np.int32)
    tags = pa.ListArray.from_arrays(pa.array(tag_offsets), pa.array(rng.integers(0, 100, int(tag_offsets[-1])).astype(np.int32)))
    ids = pa.array([f"night-{i:07d}" for i in range(args.rows)])
    table = pa.table({"id": ids, "segments": segments, "tags": tags})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, args.out, row_group_size=args.row_group, compression="zstd", use_dictionary=False)
    print(f"wrote {args.out}: {args.rows} rows, {int(offsets[-1])} segments, median {int(np.median(counts))}, max {int(counts.max())}")


if __name__ == "__main__":
    main()
