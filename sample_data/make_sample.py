"""Write sample_data/digits.parquet: 2,000 items composed from real digits.

Each item is a variable-length list of 8x8 "segments" (UCI hand-written
digits, via scikit-learn; licence CC BY 4.0), drawn from the SAMPLE half of a
fixed stratified split (see tools/digits_data.py; the TRAIN half is used only
for training models). Byte-identical on rebuild.

Columns:
  id          string                      "item-00000" .. "item-01999"
  segments    list<fixed_size_binary(64)> 8x8 image, row-major u8, round(v*255/16)
  tags        list<int32>                 0..6 tag ids in [0, 100)
  true_label  string                      Chinese numeral of the most frequent
                                          segment digit (ties -> smallest digit)

Usage: python sample_data/make_sample.py [--output PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from digits_data import LABELS, compose_items, load_split  # noqa: E402

N_ITEMS = 2000
SAMPLE_SEED = 1797


def build_table() -> pa.Table:
    _, (images, y) = load_split()
    it = compose_items(images, y, N_ITEMS, seed=SAMPLE_SEED)
    n_seg = len(it["seg_images"])
    seg_values = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(64), n_seg, [None, pa.py_buffer(np.ascontiguousarray(it["seg_images"]).tobytes())]
    )
    segments = pa.ListArray.from_arrays(pa.array(it["seg_offsets"].astype(np.int32)), seg_values)
    tags = pa.ListArray.from_arrays(
        pa.array(it["tag_offsets"].astype(np.int32)), pa.array(it["tags"], type=pa.int32())
    )
    ids = pa.array([f"item-{i:05d}" for i in range(N_ITEMS)], type=pa.string())
    labels = pa.array([LABELS[int(k)] for k in it["label"]], type=pa.string())
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("segments", pa.list_(pa.binary(64))),
            ("tags", pa.list_(pa.int32())),
            ("true_label", pa.string()),
        ]
    )
    return pa.Table.from_arrays([ids, segments, tags, labels], schema=schema)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", default=str(ROOT / "sample_data" / "digits.parquet"))
    args = ap.parse_args()
    table = build_table()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        table,
        out,
        compression="zstd",
        row_group_size=500,
        use_dictionary=["true_label"],
        write_statistics=True,
    )
    counts = np.diff(table.column("segments").combine_chunks().offsets.to_numpy())
    tag_counts = np.diff(table.column("tags").combine_chunks().offsets.to_numpy())
    labels = table.column("true_label").to_pylist()
    print(f"wrote {out} ({out.stat().st_size:,} bytes, sha256 {hashlib.sha256(out.read_bytes()).hexdigest()})")
    print(
        f"items {len(counts)}, total segments {int(counts.sum()):,}, "
        f"median {int(np.median(counts))}, max {int(counts.max())}, "
        f"items >1000 segments {int((counts > 1000).sum())}, items with 1 segment {int((counts == 1).sum())}"
    )
    print(f"tags: total {int(tag_counts.sum())}, items with no tags {int((tag_counts == 0).sum())}")
    print("labels: " + " ".join(f"{l}={labels.count(l)}" for l in LABELS))


if __name__ == "__main__":
    main()
