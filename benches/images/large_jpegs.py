"""The sample's digits as large JPEGs, for a run whose CPU is the decoding's
(benches/images/decode_cpu.py): the raw sample's first --rows rows, each 8x8
segment upscaled (bilinear) to --side x --side and saved as a gray JPEG at
quality 90. Shrunk back to 8x8 by the JPEG pipeline, the model's share of
the run's CPU is small beside the decoding.

Usage: python benches/images/large_jpegs.py sample_data/digits.parquet OUT.parquet --rows 2000 --side 256
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_data"))
from make_image_samples import encoded_items, with_segments  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("input")
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--side", type=int, default=256)
    a = ap.parse_args()
    table = pq.read_table(a.input).slice(0, a.rows).combine_chunks()

    def large_jpeg(pixels: np.ndarray) -> bytes:
        big = Image.fromarray(pixels, mode="L").resize((a.side, a.side), Image.Resampling.BILINEAR)
        out = io.BytesIO()
        big.save(out, format="JPEG", quality=90)
        return out.getvalue()

    items, _ = encoded_items(table.column("segments").combine_chunks(), large_jpeg)
    pq.write_table(with_segments(table, pa.array(items, type=pa.binary())), a.out)


if __name__ == "__main__":
    main()
