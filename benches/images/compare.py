"""Decode + resize throughput per core: segpredict's image decoder against
Pillow and torchvision on the same files (CPU, one thread each).

Usage: python benches/images/compare.py [--rounds 5] [--seconds 1.0] [--out benches/images]

The file sets (written under target/bench-images/, not committed):
  digits-jpeg  the image sample's distinct 32x32 gray JPEGs (q90) -> 1x8x8, stretch, box
  digits-png   the image sample's distinct 8x8 gray PNGs          -> 1x8x8 (copied)
  photo-jpeg   160 synthetic 640x480 RGB JPEGs (q90; smooth fields
               and noise)                                          -> 3x224x224, crop, bilinear
  photo-png    the same 160 as PNG                                 -> 3x224x224, crop, bilinear

Contenders, each on one thread, each giving 8-bit [C, H, W] arrays:
  segpredict   crates/reader/examples/decode_images.rs (the run's ImageDecoder)
  image-crate  the same example, `--variant image-crate`: image::load_from_memory +
               imageops::resize (Triangle), the alternative to zune-jpeg + segpredict's resize
  pillow       Image.open, convert, resize as tools/image_reference.py (segpredict's geometry),
               to a u8 [C, H, W] array
  torchvision  torchvision.io.decode_jpeg / decode_png, then v2 resize (bilinear, antialias;
               it has no box filter) and center_crop; torch.set_num_threads(1)

Rounds interleave the contenders; the medians of images/s and their ratios
go to results.json and results.md. torchvision is installed with --no-deps
into target/bench-python (the venv's torch is not touched).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from provenance import markdown as provenance_line, provenance  # noqa: E402  (commit and machine)
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "target" / "bench-python"))
from image_reference import MODES, resized  # noqa: E402

WORK = ROOT / "target" / "bench-images"
EXAMPLE = ROOT / "target" / "release" / "examples" / "decode_images"
SETS = {
    "digits-jpeg": ([1, 8, 8], {"resize": "stretch", "filter": "box"}),
    "digits-png": ([1, 8, 8], {"resize": "stretch", "filter": "box"}),
    "photo-jpeg": ([3, 224, 224], {"resize": "crop", "filter": "bilinear"}),
    "photo-png": ([3, 224, 224], {"resize": "crop", "filter": "bilinear"}),
}


def distinct_images(parquet: Path) -> list[bytes]:
    items = pq.read_table(parquet).column("segments").combine_chunks().flatten().to_pylist()
    return sorted(set(items))


def photos(n: int = 160) -> list[Image.Image]:
    rng = np.random.default_rng(2026)
    y, x = np.mgrid[0:480, 0:640] / 640.0
    out = []
    for _ in range(n):
        channels = []
        for _ in range(3):
            fx, fy, phase = rng.uniform(1, 8, 3)
            field = 0.5 + 0.35 * np.sin(2 * np.pi * (fx * x + fy * y) + phase)
            channels.append(field + rng.normal(0, 0.04, field.shape))
        pixels = np.clip(np.stack(channels, axis=-1) * 255, 0, 255).astype(np.uint8)
        out.append(Image.fromarray(pixels, mode="RGB"))
    return out


def encoded(img: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def write_sets() -> dict[str, list[bytes]]:
    pictures = photos()
    sets = {
        "digits-jpeg": distinct_images(ROOT / "sample_data" / "digits-jpeg.parquet"),
        "digits-png": distinct_images(ROOT / "sample_data" / "digits-png.parquet"),
        "photo-jpeg": [encoded(p, "JPEG") for p in pictures],
        "photo-png": [encoded(p, "PNG") for p in pictures],
    }
    for name, files in sets.items():
        folder = WORK / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for i, data in enumerate(files):
            (folder / f"{i:05d}").write_bytes(data)
    return sets


def timed_loop(files: list[bytes], one, seconds: float) -> float:
    """Images per second over whole passes, at least `seconds` long."""
    done, started = 0, time.perf_counter()
    while True:
        for data in files:
            one(data)
        done += len(files)
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return done / elapsed


def rust(name: str, variant: str, n_files: int, seconds: float) -> float:
    shape, spec = SETS[name]
    repeat = 1
    while True:
        cmd = [str(EXAMPLE), str(WORK / name), ",".join(map(str, shape)), spec["resize"], spec["filter"],
               "--repeat", str(repeat), "--variant", variant]
        result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        if result["seconds"] >= seconds:
            return result["images_per_s"]
        repeat = max(repeat * 2, int(repeat * seconds / max(result["seconds"], 1e-3)) + 1)


def pillow_one(shape: list[int], spec: dict):
    """Pillow to 8-bit [C, H, W], as tools/image_reference.py (without its
    float normalization, which segpredict's u8 output does not do either)."""
    channels, h, w = shape

    def one(data: bytes):
        img = Image.open(io.BytesIO(data))
        if img.mode != MODES[channels]:
            img = img.convert(MODES[channels])
        pixels = np.asarray(resized(img, w, h, spec), dtype=np.uint8).reshape(h, w, channels)
        return np.ascontiguousarray(pixels.transpose(2, 0, 1))

    return one


def torchvision_one(shape: list[int], spec: dict):
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg, decode_png
    from torchvision.transforms.v2 import functional as F

    torch.set_num_threads(1)
    mode = ImageReadMode.GRAY if shape[0] == 1 else ImageReadMode.RGB
    h, w = shape[1], shape[2]

    def one(data: bytes):
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        img = decode_jpeg(raw, mode=mode) if data[:2] == b"\xff\xd8" else decode_png(raw, mode=mode)
        if spec["resize"] == "crop":
            scale = max(w / img.shape[2], h / img.shape[1])
            size = [round(img.shape[1] * scale), round(img.shape[2] * scale)]
            img = F.center_crop(F.resize(img, size, antialias=True), [h, w])
        elif tuple(img.shape[1:]) != (h, w):
            img = F.resize(img, [h, w], antialias=True)
        return img.contiguous()

    return one


def measure(name: str, files: list[bytes], seconds: float) -> dict[str, float]:
    shape, spec = SETS[name]
    return {
        "segpredict": rust(name, "segpredict", len(files), seconds),
        "image-crate": rust(name, "image-crate", len(files), seconds),
        "pillow": timed_loop(files, pillow_one(shape, spec), seconds),
        "torchvision": timed_loop(files, torchvision_one(shape, spec), seconds),
    }


def parity(sets: dict[str, list[bytes]]) -> dict[str, dict]:
    """segpredict's u8 tensors against Pillow's on every file of each set:
    the share of values equal and the largest difference."""
    out = {}
    for name, files in sets.items():
        shape, spec = SETS[name]
        dump = WORK / f"{name}.u8"
        subprocess.run([str(EXAMPLE), str(WORK / name), ",".join(map(str, shape)), spec["resize"],
                        spec["filter"], "--dump", str(dump)], check=True, capture_output=True)
        ours = np.fromfile(dump, dtype=np.uint8).astype(np.int16)
        pillow = np.concatenate([pillow_one(shape, spec)(d).ravel() for d in files]).astype(np.int16)
        diff = np.abs(ours - pillow)
        out[name] = {"values": int(diff.size), "equal_share": float((diff == 0).mean()), "max_abs_diff": int(diff.max())}
    return out


# Every resize mode and filter, at odd target sizes and aspect ratios.
MODE_CASES = [
    ("fit", "bilinear", [3, 100, 224]),
    ("fit", "nearest", [3, 64, 64]),
    ("stretch", "bicubic", [3, 150, 200]),
    ("stretch", "box", [3, 120, 160]),
    ("crop", "lanczos", [1, 224, 160]),
    ("crop", "hamming", [3, 96, 96]),
]


def modes_parity(files: list[bytes]) -> list[dict]:
    """segpredict against Pillow for every resize mode and filter, on the
    photo PNGs (lossless, so only the geometry and the resampling differ)."""
    folder, out = WORK / "modes", WORK / "modes.u8"
    folder.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(files):
        (folder / f"{i:05d}").write_bytes(data)
    rows = []
    for resize, filt, shape in MODE_CASES:
        spec = {"resize": resize, "filter": filt}
        subprocess.run([str(EXAMPLE), str(folder), ",".join(map(str, shape)), resize, filt, "--dump", str(out)],
                       check=True, capture_output=True)
        ours = np.fromfile(out, dtype=np.uint8).astype(np.int16)
        pillow = np.concatenate([pillow_one(shape, spec)(d).ravel() for d in files]).astype(np.int16)
        diff = np.abs(ours - pillow)
        rows.append({"resize": resize, "filter": filt, "shape": shape,
                     "equal_share": float((diff == 0).mean()), "max_abs_diff": int(diff.max())})
    return rows


def summarize(rounds: list[dict[str, dict[str, float]]]) -> dict:
    out = {}
    for name in SETS:
        medians = {c: statistics.median(r[name][c] for r in rounds) for c in rounds[0][name]}
        out[name] = {
            "images_per_s_median": medians,
            "per_round": {c: [round(r[name][c], 1) for r in rounds] for c in medians},
            "segpredict_over": {c: medians["segpredict"] / medians[c] for c in medians if c != "segpredict"},
        }
    return out


def markdown(summary: dict, meta: dict) -> str:
    lines = [f"# Decode + resize per core ({meta['when']})", "", provenance_line(meta["provenance"]), "", f"`{meta['command']}` on {meta['machine']}; "
             f"load average before: {meta['loadavg_before']}, after: {meta['loadavg_after']}.", "",
             "| set | segpredict | image crate | Pillow | torchvision | segpredict / Pillow | segpredict / torchvision | segpredict / image crate |",
             "|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        m, r = s["images_per_s_median"], s["segpredict_over"]
        lines.append(f"| {name} | {m['segpredict']:,.0f} | {m['image-crate']:,.0f} | {m['pillow']:,.0f} | "
                     f"{m['torchvision']:,.0f} | {r['pillow']:.2f}x | {r['torchvision']:.2f}x | {r['image-crate']:.2f}x |")
    lines += ["", "Images per second on one thread, medians of the rounds; per round in results.json.", "",
              "Same pixels? segpredict's u8 tensors against Pillow's, every file:", ""]
    for name, p in meta["parity_with_pillow"].items():
        lines.append(f"- {name}: {p['equal_share']:.4%} of {p['values']:,} values equal, largest difference {p['max_abs_diff']}")
    lines += ["", "Every resize mode and filter against Pillow (40 photo PNGs):", ""]
    for m in meta["modes_parity_with_pillow"]:
        lines.append(f"- {m['resize']}, {m['filter']}, to {m['shape']}: {m['equal_share']:.2%} equal, largest difference {m['max_abs_diff']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--out", default=str(ROOT / "benches" / "images"))
    args = ap.parse_args()
    sets = write_sets()
    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python benches/images/compare.py " + " ".join(sys.argv[1:]),
        "provenance": provenance(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.platform()}",
        "loadavg_before": os.getloadavg(),
        "files": {name: len(files) for name, files in sets.items()},
    }
    rounds = []
    for k in range(args.rounds):
        rounds.append({name: measure(name, files, args.seconds) for name, files in sets.items()})
        print(f"round {k + 1}: " + json.dumps(rounds[-1]), flush=True)
    meta["loadavg_after"] = os.getloadavg()
    meta["parity_with_pillow"] = parity(sets)
    meta["modes_parity_with_pillow"] = modes_parity(sets["photo-png"][:40])
    print("parity: " + json.dumps(meta["parity_with_pillow"]))
    summary = summarize(rounds)
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=2) + "\n")
    (out / "results.md").write_text(markdown(summary, meta))
    print(markdown(summary, meta))


if __name__ == "__main__":
    main()
