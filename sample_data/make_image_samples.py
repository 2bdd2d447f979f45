"""Write the sample's digits as encoded images: the image sample.

From sample_data/digits.parquet (same rows, ids, tags and true labels;
each 8x8 u8 segment becomes one image):

  digits-png.parquet       segments list<binary>: 8x8 gray PNG, lossless,
                           so a run must predict exactly what the raw run does.
  digits-jpeg.parquet      segments list<binary>: the digit upscaled 4x
                           (nearest) to 32x32 gray, JPEG quality 90; the
                           pipeline resizes it back to 8x8 (box filter).
  digits-datasets.parquet  segments list<struct<bytes: binary, path: string>>,
                           Hugging Face `datasets`' Image layout, PNG bytes.

The sample has 95,266 segments but fewer than 900 distinct digit images, so
the segments column is dictionary-encoded: each file is a few hundred KB.
Byte-identical on rebuild with the pinned Pillow (tools/requirements.txt).

Usage: python sample_data/make_image_samples.py [--dir sample_data]
"""

from __future__ import annotations

import argparse
import hashlib
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
JPEG_SIDE = 32
JPEG_QUALITY = 90


def png_bytes(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(out, format="PNG", optimize=True)
    return out.getvalue()


def jpeg_bytes(pixels: np.ndarray) -> bytes:
    big = Image.fromarray(pixels, mode="L").resize((JPEG_SIDE, JPEG_SIDE), Image.Resampling.NEAREST)
    out = io.BytesIO()
    big.save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def encoded_items(segments: pa.Array, encode) -> tuple[list[bytes], list[int]]:
    """Each segment of the flattened list encoded (each distinct image
    once), and the index of its distinct image."""
    raw = segments.flatten().to_pylist()
    cache: dict[bytes, tuple[bytes, int]] = {}
    for segment in raw:
        if segment not in cache:
            pixels = np.frombuffer(segment, dtype=np.uint8).reshape(8, 8)
            cache[segment] = (encode(pixels), len(cache))
    return [cache[s][0] for s in raw], [cache[s][1] for s in raw]


def with_segments(table: pa.Table, values: pa.Array) -> pa.Table:
    offsets = table.column("segments").combine_chunks().offsets
    segments = pa.ListArray.from_arrays(offsets, values)
    index = table.schema.get_field_index("segments")
    return table.set_column(index, pa.field("segments", segments.type), segments)


def build(table: pa.Table) -> dict[str, pa.Table]:
    segments = table.column("segments").combine_chunks()
    png_items, distinct = encoded_items(segments, png_bytes)
    png = pa.array(png_items, type=pa.binary())
    jpeg = pa.array(encoded_items(segments, jpeg_bytes)[0], type=pa.binary())
    paths = pa.array([f"digit-{k:04d}.png" for k in distinct], type=pa.string())
    images = pa.StructArray.from_arrays([png, paths], names=["bytes", "path"])
    return {
        "digits-png.parquet": with_segments(table, png),
        "digits-jpeg.parquet": with_segments(table, jpeg),
        "digits-datasets.parquet": with_segments(table, images),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=str(ROOT / "sample_data"))
    args = ap.parse_args()
    table = pq.read_table(ROOT / "sample_data" / "digits.parquet")
    for name, out_table in build(table).items():
        out = Path(args.dir) / name
        pq.write_table(
            out_table,
            out,
            compression="zstd",
            # One row group: one dictionary of the distinct images.
            row_group_size=len(out_table),
            use_dictionary=True,
            write_statistics=False,
        )
        digest = hashlib.sha256(out.read_bytes()).hexdigest()
        print(f"wrote {out} ({out.stat().st_size:,} bytes, sha256 {digest})")


if __name__ == "__main__":
    main()
