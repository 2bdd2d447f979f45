"""Python reference for encoded image segments: Pillow decodes, converts,
resizes and normalizes each image as a pipeline's
`[readers.columns.segments.image]` says, then plain PyTorch predicts as
tools/reference_predict.py does. segpredict's image sample is compared
against it (tests/images.rs).

Usage:
  python tools/image_reference.py --pipeline pipelines/sample-jpeg.toml --output /tmp/ref.parquet

The geometry is segpredict's (crates/reader/src/image/fit.rs): `stretch`,
`fit` (scaled to fit, sides rounded, centered on `pad_value`), `crop`
(scaled to cover, the centered source box given to Image.resize(box=...)).
Pillow's filters by name; gray is Pillow's convert("L"), alpha dropped.
Rows whose images Pillow cannot decode are left out and counted.
"""

from __future__ import annotations

import argparse
import io
import sys
import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_predict import decode_tags  # noqa: E402

FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "box": Image.Resampling.BOX,
    "bilinear": Image.Resampling.BILINEAR,
    "hamming": Image.Resampling.HAMMING,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def resized(img: Image.Image, width: int, height: int, spec: dict) -> Image.Image:
    """The image at width x height, as segpredict's `Geometry` places it."""
    w, h = img.size
    mode = spec.get("resize", "stretch")
    resample = FILTERS[spec.get("filter", "bilinear")]
    if (w, h) == (width, height):
        return img
    if mode == "stretch":
        return img.resize((width, height), resample)
    if mode == "crop":
        scale = max(width / w, height / h)
        bw, bh = width / scale, height / scale
        box = ((w - bw) / 2, (h - bh) / 2, (w - bw) / 2 + bw, (h - bh) / 2 + bh)
        return img.resize((width, height), resample, box=box)
    scale = min(width / w, height / h)
    dw = min(max(round(w * scale), 1), width)
    dh = min(max(round(h * scale), 1), height)
    canvas = Image.new(img.mode, (width, height), (spec.get("pad_value", 0),) * len(img.getbands()))
    canvas.paste(img.resize((dw, dh), resample), ((width - dw) // 2, (height - dh) // 2))
    return canvas


def image_tensor(data: bytes, shape: list[int], spec: dict) -> np.ndarray:
    """float32 [C, H, W] of one encoded image."""
    channels, height, width = shape
    img = Image.open(io.BytesIO(data))
    img.load()
    if img.mode != MODES[channels]:
        # RGBA -> RGB drops alpha; RGB -> L is ITU-R 601-2 luma (as segpredict).
        img = img.convert(MODES[channels])
    pixels = np.asarray(resized(img, width, height, spec), dtype=np.uint8).reshape(height, width, channels)
    chw = pixels.transpose(2, 0, 1).astype(np.float32)
    if spec.get("channel_order", "rgb") == "bgr" and channels >= 3:
        chw[:3] = chw[2::-1]
    mean = np.asarray(spec.get("mean", [0.0]), dtype=np.float32).reshape(-1, 1, 1)
    std = np.asarray(spec.get("std", [1.0]), dtype=np.float32).reshape(-1, 1, 1)
    return (chw * np.float32(spec.get("scale", 1.0)) - mean) / std


def row_images(value) -> list[bytes]:
    """A row's encoded images, from the column's Python value (a list of
    bytes or of {bytes, path}, or one of them)."""
    items = value if isinstance(value, list) else [value]
    return [item["bytes"] if isinstance(item, dict) else item for item in items]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--batch-rows", type=int, default=64)
    args = ap.parse_args()
    pipeline_path = Path(args.pipeline)
    config = tomllib.loads(pipeline_path.read_text())
    here = pipeline_path.parent
    seg = config["readers"]["columns"]["segments"]
    spec, shape = seg.get("image", {}), seg["shape"]
    table = pq.read_table(here / config["readers"]["path"])
    ids, segments = table.column("id").combine_chunks(), table.column(seg["name"]).to_pylist()
    tags = table.column("tags").combine_chunks()
    labels = (here / config["model"]["labels"]).read_text(encoding="utf-8").splitlines()
    torch.set_num_threads(2)
    module = torch.jit.load(str(here / config["model"]["path"]), map_location="cpu").eval().float()
    kept, probs, failed = [], [], 0
    # The same bytes decode the same way: each distinct image once (the
    # sample repeats fewer than 900 digits over 95,266 segments).
    cache: dict[bytes, np.ndarray] = {}

    def tensor(data: bytes) -> np.ndarray:
        if data not in cache:
            cache[data] = image_tensor(data, shape, spec)
        return cache[data]

    for start in range(0, len(table), args.batch_rows):
        rows, tensors, counts = [], [], []
        for row in range(start, min(start + args.batch_rows, len(table))):
            try:
                images = [tensor(b) for b in row_images(segments[row])]
            except Exception:  # noqa: BLE001 - a row Pillow cannot decode is left out, as segpredict rejects it
                failed += 1
                continue
            rows.append(row)
            tensors.extend(images)
            counts.append(len(images))
        if not rows:
            continue
        tag_values, tag_counts = decode_tags(pa.concat_arrays([tags.slice(r, 1) for r in rows]))
        with torch.inference_mode():
            logits = module(
                torch.from_numpy(np.stack(tensors)),
                torch.tensor(counts, dtype=torch.int64),
                torch.from_numpy(tag_values),
                torch.from_numpy(tag_counts.astype(np.int64)),
            )
        probs.append(torch.softmax(logits.float(), dim=1).numpy())
        kept.extend(rows)
    p = np.concatenate(probs)
    label_id = p.argmax(axis=1).astype(np.int32)
    out = pa.table(
        {
            "id": ids.take(pa.array(kept)).cast(pa.string()),
            "label": pa.array([labels[i] for i in label_id], type=pa.string()),
            "label_id": pa.array(label_id, type=pa.int32()),
            "score": pa.array(p[np.arange(len(p)), label_id].astype(np.float32)),
        }
    )
    pq.write_table(out, args.output)
    print(f"wrote {args.output}: {len(kept)} rows predicted, {failed} rows Pillow could not decode")


if __name__ == "__main__":
    main()
