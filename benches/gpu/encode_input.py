"""The GPU benchmark's input (benches/gpu/make_data.py) with every 8x8 segment
written as a 32x32 gray JPEG (quality 90), as the image sample's JPEGs are
(sample_data/make_image_samples.py): the encoded side of benches/gpu/images.sh.

    python benches/gpu/encode_input.py --input /tmp/bench/input.parquet --out /tmp/bench/input-jpeg.parquet
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_data"))
from make_image_samples import encoded_items, jpeg_bytes, with_segments  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--row-group", type=int, default=8192)
    args = ap.parse_args()
    table = pq.read_table(args.input)
    items, _ = encoded_items(table.column("segments").combine_chunks(), jpeg_bytes)
    # large_binary: the JPEGs of a large input pass 2 GiB, past binary offsets.
    encoded = with_segments(table, pa.array(items, type=pa.large_binary()))
    pq.write_table(encoded, args.out, compression="zstd", row_group_size=args.row_group, use_dictionary=True)
    print(f"wrote {args.out}: {len(items):,} JPEG segments, {args.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
