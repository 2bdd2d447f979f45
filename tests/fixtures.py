"""Input variants for segpredict's integration tests, written by the real
writers users have (pyarrow, DuckDB, Polars).

Usage: python tests/fixtures.py COMMAND IN OUT [options]

Every command reads IN (the sample, or any file of its schema), keeps its first
--rows rows (default: all) and writes OUT (a file, or a directory for `codecs`
and `split`). Row order is kept, so row k of OUT is row k of the subset.
`wrapper-model` instead reads a TorchScript model and writes another;
`aoti-metadata` reads an AOTInductor package (.pt2) and writes another.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def load(path: str, rows: int | None) -> pa.Table:
    table = pq.read_table(path)
    if rows is not None:
        table = table.slice(0, rows)
    return table.combine_chunks()


def replace(table: pa.Table, name: str, array: pa.Array) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, pa.field(name, array.type), array)


def segments_flat(table: pa.Table):
    """(offsets int64 [R+1], uint8 [S, 64]) of the sample's segments column."""
    col = table.column("segments").combine_chunks()
    offsets = col.offsets.to_numpy().astype(np.int64)
    child = col.values
    width = child.type.byte_width
    data = np.frombuffer(child.buffers()[1], dtype=np.uint8)
    data = data[child.offset * width : (child.offset + len(child)) * width]
    start, stop = offsets[0], offsets[-1]
    return offsets - start, data.reshape(-1, width)[start:stop]


def carried_columns(n: int) -> dict[str, pa.Array]:
    """Columns beside the sample's for `[writers] carry`, a pure function of
    the row index, each with nulls: string, float64, timestamp (UTC, us),
    list of int32 (some empty), and a mostly-null string."""
    cities = ["Lyon", "Kyiv", "Oslo", "Lima", None, "Nara"]
    return {
        "city": pa.array([cities[i % len(cities)] for i in range(n)], pa.string()),
        "weight": pa.array([None if i % 11 == 3 else i * 0.25 - 7.5 for i in range(n)], pa.float64()),
        "seen_at": pa.array(
            [None if i % 13 == 5 else 1_796_000_000_000_000 + i * 1_000_003 for i in range(n)],
            pa.timestamp("us", tz="UTC"),
        ),
        "codes": pa.array(
            [None if i % 9 == 4 else list(range(i % 4)) for i in range(n)], pa.list_(pa.int32())
        ),
        "note": pa.array([f"n{i}" if i % 17 == 0 else None for i in range(n)], pa.string()),
    }


def cmd_carry(a, t):
    """The sample with `carried_columns` appended, in row groups of
    --row-group-size."""
    for name, array in carried_columns(t.num_rows).items():
        t = t.append_column(name, array)
    pq.write_table(t, a.out, row_group_size=a.row_group_size)


def cmd_hive(a, t):
    """The sample split into Hive partitions under OUT (a folder):
    `dt=2026-12-0K/part-J.parquet`, rows dealt in order (part k of the
    sample's rows, so the concatenation in path order is the sample), and
    beside them what a reader must skip: `_SUCCESS`, `_tmp/`, `.hidden/`,
    `dt=2026-12-01/.part-9.parquet.crc`."""
    out = Path(a.out)
    cuts = [0, 500, 900, 1400, t.num_rows]
    for k, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
        folder = out / f"dt=2026-12-0{1 + k // 2}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(t.slice(lo, hi - lo), folder / f"part-{k % 2}.parquet", row_group_size=a.row_group_size)
    (out / "_SUCCESS").write_bytes(b"")
    for skipped in ["_tmp", ".hidden"]:
        (out / skipped).mkdir(exist_ok=True)
        pq.write_table(t.slice(0, 3), out / skipped / "part-0.parquet")
    (out / "dt=2026-12-01" / ".part-9.parquet.crc").write_bytes(b"x")


def cmd_subset(a, t):
    pq.write_table(t, a.out)


def cmd_rowgroups(a, t):
    pq.write_table(t, a.out, row_group_size=a.row_group_size, use_dictionary=True)


def cmd_dict_id(a, t):
    t = replace(t, "id", pc.dictionary_encode(t.column("id").combine_chunks()))
    pq.write_table(t, a.out, use_dictionary=True)


def cmd_duckdb(a, t):
    import duckdb

    staged = Path(a.out).with_suffix(".staged.parquet")
    pq.write_table(t, staged)
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT * FROM read_parquet('{staged}')) TO '{a.out}' (FORMAT parquet)"
    )
    con.close()
    staged.unlink()


def cmd_polars(a, t):
    import polars as pl

    pl.from_arrow(t).write_parquet(a.out)


def cmd_codecs(a, t):
    """Four files, one per codec, in one directory."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    codecs = ["snappy", "zstd", "gzip", "none"]
    bounds = np.linspace(0, t.num_rows, len(codecs) + 1).astype(int)
    for k, codec in enumerate(codecs):
        part = t.slice(bounds[k], bounds[k + 1] - bounds[k])
        pq.write_table(part, out / f"part-{k}-{codec}.parquet", compression=codec)


def cmd_split(a, t):
    """Consecutive slices of --sizes rows into files named file-<k>.parquet."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    start = 0
    for k, size in enumerate(int(s) for s in a.sizes.split(",")):
        pq.write_table(t.slice(start, size), out / f"file-{k}.parquet")
        start += size


def cmd_large_list(a, t):
    col = t.column("segments").combine_chunks()
    t = replace(t, "segments", col.cast(pa.large_list(col.type.value_type)))
    pq.write_table(t, a.out)


def cmd_fixed_list(a, t):
    offsets, data = segments_flat(t)
    values = pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1), pa.uint8()), 64)
    segments = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    pq.write_table(replace(t, "segments", segments), a.out)


def cmd_float_list(a, t):
    """Segments as list<fixed_size_list<--dtype, 64>>: the pixel values as floats."""
    offsets, data = segments_flat(t)
    np_type, pa_type = {"float32": (np.float32, pa.float32()), "float16": (np.float16, pa.float16())}[a.dtype]
    values = pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1).astype(np_type), pa_type), 64)
    segments = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    pq.write_table(replace(t, "segments", segments), a.out)


def cmd_extras(a, t):
    """Adds `vec` = [k, 1, 2] (fixed_size_list<float32, 3>), `f` = k + 0.5 (float64)
    and `i` = k (int32), k = the row's position. With --short-vec-row N, `vec` is a
    plain list<float32> column instead, and row N's list loses its last value."""
    n = t.num_rows
    k = np.arange(n)
    flat = np.stack([k, np.ones(n), np.full(n, 2.0)], axis=1).astype(np.float32)
    if a.short_vec_row is None:
        vec = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1), pa.float32()), 3)
    else:
        rows = [list(map(float, r)) for r in flat]
        rows[a.short_vec_row] = rows[a.short_vec_row][:2]
        vec = pa.array(rows, pa.list_(pa.float32()))
    t = t.append_column("vec", vec)
    t = t.append_column("f", pa.array(k + 0.5, pa.float64()))
    t = t.append_column("i", pa.array(k, pa.int32()))
    pq.write_table(t, a.out)


def cmd_wrapper_model(a, _t):
    """IN is a TorchScript model of the models/README.md contract; OUT is a model
    taking three more inputs, forward(segments, segment_counts, tags, tag_counts,
    vec [R, 3] float, f [R] float, i [R] int64). It returns the inner model's logits
    where a row's vec == [i, 1, 2] and f == i + 0.5, and otherwise adds 1000 to
    class 0's logit; inputs of the wrong type or shape raise."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, segments, segment_counts, tags, tag_counts, vec, f, i):
            rows = segment_counts.size(0)
            if vec.dim() != 2 or vec.size(0) != rows or vec.size(1) != 3:
                raise RuntimeError("vec must be [R, 3]")
            if f.dim() != 1 or f.size(0) != rows or i.dim() != 1 or i.size(0) != rows:
                raise RuntimeError("f and i must be [R]")
            if not vec.is_floating_point() or not f.is_floating_point():
                raise RuntimeError("vec and f must be floating point")
            if i.dtype != torch.int64:
                raise RuntimeError("i must be int64")
            logits = self.inner(segments, segment_counts, tags, tag_counts)
            fi = i.to(torch.float64)
            ok = (
                (vec[:, 0].to(torch.float64) == fi)
                & (vec[:, 1] == 1.0)
                & (vec[:, 2] == 2.0)
                & (f.to(torch.float64) == fi + 0.5)
            )
            bump = torch.zeros_like(logits)
            bump[:, 0] = 1000.0
            return logits + (~ok).to(logits.dtype).unsqueeze(1) * bump

    wrapper = torch.jit.script(Wrapper(torch.jit.load(a.input)))
    wrapper.save(a.out)


def cmd_other_model(a, _t):
    """IN is a TorchScript model; OUT is another file that predicts the same
    (the inner model behind a pass-through wrapper): a different model by
    content, for the resume tests' "model differs"."""
    import torch

    class PassThrough(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, segments, segment_counts, tags, tag_counts):
            return self.inner(segments, segment_counts, tags, tag_counts)

    torch.jit.script(PassThrough(torch.jit.load(a.input))).save(a.out)


def cmd_bad_tag(a, t):
    """The rows at --indices get the tag id --tag (outside the model's
    embedding when large or negative); every other row is unchanged."""
    tags = t.column("tags").combine_chunks()
    rows = tags.to_pylist()
    for r in (int(i) for i in a.indices.split(",")):
        rows[r] = [a.tag]
    pq.write_table(replace(t, "tags", pa.array(rows, type=tags.type)), a.out)


def cmd_flip_byte(a, t):
    """Written with page checksums (dictionary-encoded ids, no compression,
    --row-group-size rows a group); then one bit of the last data page of
    row group 1's id column is flipped, as a bad disk or network would."""
    pq.write_table(t, a.out, use_dictionary=["id"], compression="none",
                   row_group_size=a.row_group_size, write_page_checksum=True)
    col = pq.ParquetFile(a.out).metadata.row_group(1).column(0)
    end = (col.dictionary_page_offset or col.data_page_offset) + col.total_compressed_size
    data = bytearray(Path(a.out).read_bytes())
    data[end - 5] ^= 0x01
    Path(a.out).write_bytes(bytes(data))


def column_chunk(path, name):
    """(start, end) byte range of the first row group's chunk of column `name`."""
    meta = pq.ParquetFile(path).metadata.row_group(0)
    for i in range(meta.num_columns):
        c = meta.column(i)
        if c.path_in_schema == name:
            start = c.dictionary_page_offset or c.data_page_offset
            return start, start + c.total_compressed_size
    raise SystemExit(f"no column {name}")


def overwrite(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def cmd_corrupt_dict(a, t):
    """The segments (fixed_len_byte_array(64)) dictionary-encoded, uncompressed,
    in row groups of 100; the last 16 bytes of row group 0's segments data page
    (dictionary indices) become 0xFF: indices past the dictionary's end."""
    pq.write_table(t, a.out, row_group_size=100, compression="none",
                   use_dictionary=["segments.list.element"], data_page_version="1.0")
    meta = pq.ParquetFile(a.out).metadata.row_group(0)
    encodings = [meta.column(i).encodings for i in range(meta.num_columns)
                 if meta.column(i).path_in_schema == "segments.list.element"][0]
    assert "RLE_DICTIONARY" in encodings, encodings
    _, end = column_chunk(a.out, "segments.list.element")
    overwrite(a.out, end - 16, b"\xff" * 16)


def cmd_many_rejects(a, t):
    """The rows of IN, then --extra rows whose segments are null (each is
    rejected as null_segments), ids `reject-NNNNNNN`; row groups of 65,536."""
    n = a.extra
    extra = pa.table(
        {
            "id": pa.array([f"reject-{k:07d}" for k in range(n)], t.schema.field("id").type),
            "segments": pa.nulls(n, t.schema.field("segments").type),
            "tags": pa.nulls(n, t.schema.field("tags").type),
            "true_label": pa.nulls(n, t.schema.field("true_label").type),
        },
        schema=t.schema,
    )
    pq.write_table(pa.concat_tables([t, extra]), a.out, row_group_size=65536)


def cmd_truncated(a, t):
    """The file cut in half, as an interrupted copy leaves it."""
    pq.write_table(t, a.out)
    data = Path(a.out).read_bytes()
    Path(a.out).write_bytes(data[: len(data) // 2])


def cmd_aoti_metadata(a, _t):
    """IN is an AOTInductor package; OUT is the same package with the metadata entries given
    as --set KEY=VALUE (comma-separated) changed in its `*_metadata.json` records, which are
    what a loader reads (AOTI_DEVICE_KEY, AOTI_CPU_ISA, ...) before it opens the compiled code.
    Every other record is copied byte for byte."""
    import zipfile

    changes = dict(pair.split("=", 1) for pair in a.set.split(",") if pair)
    changed = 0
    with zipfile.ZipFile(a.input) as src, zipfile.ZipFile(a.out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("_metadata.json"):
                metadata = json.loads(data)
                metadata.update(changes)
                data = json.dumps(metadata).encode()
                changed += 1
            dst.writestr(info, data)
    if changed == 0:
        raise SystemExit(f"{a.input} holds no *_metadata.json record")


def cmd_binary_list(a, t):
    pq.write_table(replace(t, "segments", binary_segments(t)), a.out)


def binary_segments(t: pa.Table, short=None, null_rows=(), empty_rows=()):
    """list<binary> segments; `short` = (row, k): that row's k-th segment loses a byte."""
    offsets, data = segments_flat(t)
    values, new_offsets, mask = [], [0], []
    for r in range(t.num_rows):
        segs = [] if r in empty_rows else [data[j].tobytes() for j in range(offsets[r], offsets[r + 1])]
        if short is not None and short[0] == r:
            segs[short[1]] = segs[short[1]][:63]
        if r in null_rows:
            segs = []
        values.extend(segs)
        new_offsets.append(len(values))
        mask.append(r in null_rows)
    return pa.ListArray.from_arrays(
        pa.array(new_offsets, pa.int32()),
        pa.array(values, pa.binary()),
        mask=pa.array(mask, pa.bool_()),
    )


def cmd_bad_values(a, t):
    """Row 150: a 63-byte segment; row 40: null segments; row 250: no segments."""
    bad = {"bad_segment_size": 150, "null_segments": 40, "no_segments": 250}
    segments = binary_segments(
        t, short=(bad["bad_segment_size"], 1), null_rows={bad["null_segments"]},
        empty_rows={bad["no_segments"]},
    )
    pq.write_table(replace(t, "segments", segments), a.out)
    print(json.dumps(bad))


def cmd_int_ids(a, t):
    """The id column as int64 (1000 + 7 * row), as an integer-keyed table has it."""
    ids = pa.array([1000 + 7 * r for r in range(t.num_rows)], pa.int64())
    pq.write_table(replace(t, "id", ids), a.out)


def cmd_tags(a, t):
    """Every --every-th row's tags become null (or, with --empty, an empty list)."""
    tags = t.column("tags").combine_chunks()
    rows = tags.to_pylist()
    for r in range(0, len(rows), a.every):
        rows[r] = [] if a.empty else None
    pq.write_table(replace(t, "tags", pa.array(rows, type=tags.type)), a.out)


def cmd_take(a, t):
    """The rows at --indices (comma-separated), in that order."""
    pq.write_table(t.take([int(i) for i in a.indices.split(",")]), a.out)


def cmd_empty(a, t):
    pq.write_table(t.slice(0, 0), a.out)


def forged_png(side: int) -> bytes:
    """A PNG whose header says side x side (a valid CRC) over a tiny image:
    a decompression bomb's header, for the max_pixels check."""
    import struct
    import zlib

    ihdr = b"IHDR" + struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    chunk = struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))
    idat = b"IDAT" + zlib.compress(b"\0" * 9)
    tail = struct.pack(">I", len(idat) - 4) + idat + struct.pack(">I", zlib.crc32(idat))
    return b"\x89PNG\r\n\x1a\n" + chunk + tail + struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


# Row -> (segment, what): each damages one image of an image sample
# (sample_data/digits-png.parquet), as tests/images.rs expects.
BAD_IMAGES = {
    3: (1, "corrupt"),
    10: (0, "truncated"),
    20: (2, "zero-byte"),
    30: (0, "gif"),
    40: (1, "oversized"),
}


def damaged(data: bytes, what: str) -> bytes:
    if what == "corrupt":
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
    return {
        "truncated": data[: len(data) // 2],
        "zero-byte": b"",
        "gif": b"GIF89a\x08\x00\x08\x00\x80\x00\x00",
        "oversized": forged_png(100_000),
    }[what]


def cmd_bad_images(a, t):
    col = t.column("segments").combine_chunks()
    offsets = col.offsets.to_numpy()
    items = col.values.to_pylist()
    for row, (segment, what) in BAD_IMAGES.items():
        k = offsets[row] + segment
        items[k] = damaged(items[k], what)
    segments = pa.ListArray.from_arrays(col.offsets, pa.array(items, type=pa.binary()))
    pq.write_table(replace(t, "segments", segments), a.out)


def cmd_webp(a, t):
    """The sample's digits as 32x32 lossy WebP (quality 80), made as the
    JPEG sample's are: the JPEG pipeline reads them, the format found by
    content."""
    import io
    import sys

    from PIL import Image

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_data"))
    from make_image_samples import JPEG_SIDE, encoded_items, with_segments

    def lossy_webp(pixels: np.ndarray) -> bytes:
        side = (JPEG_SIDE, JPEG_SIDE)
        big = Image.fromarray(pixels, mode="L").resize(side, Image.Resampling.NEAREST)
        out = io.BytesIO()
        big.save(out, format="WEBP", quality=80, lossless=False)
        return out.getvalue()

    items, _ = encoded_items(t.column("segments").combine_chunks(), lossy_webp)
    pq.write_table(with_segments(t, pa.array(items, type=pa.binary())), a.out)


def sixteen_bit_png() -> bytes:
    """An 8x8 16-bit gray PNG (which a run rejects: only 8-bit is decoded)."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000).save(out, format="PNG")
    return out.getvalue()


def forged_webp(side: int) -> bytes:
    """A lossless 8x8 WebP whose VP8L header says side x side (14 bits a
    side: up to 16384): a decompression bomb's header."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (8, 8), 128).save(out, format="WEBP", lossless=True)
    data = bytearray(out.getvalue())
    at = data.index(b"VP8L") + 8  # the chunk's payload: signature 0x2f, then the size bits
    bits = int.from_bytes(data[at + 1 : at + 5], "little")
    bits = (bits & ~((1 << 28) - 1)) | (side - 1) | ((side - 1) << 14)
    data[at + 1 : at + 5] = bits.to_bytes(4, "little")
    return bytes(data)


def cmyk_jpeg(png: bytes) -> bytes:
    """The PNG's digit as a CMYK JPEG (Adobe), which Pillow and a run decode."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").convert("CMYK").save(out, format="JPEG", quality=100)
    return out.getvalue()


def jpeg_without_end(png: bytes) -> bytes:
    """The PNG's digit as a JPEG whose end marker (FF D9) is cut off."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).save(out, format="JPEG", quality=100)
    data = out.getvalue()
    assert data.endswith(b"\xff\xd9")
    return data[:-2]


def crc_broken(png: bytes) -> bytes:
    """The PNG with its IDAT chunk's CRC wrong."""
    at = png.index(b"IDAT")
    length = int.from_bytes(png[at - 4 : at], "big")
    crc = at + 4 + length
    return png[:crc] + bytes(b ^ 0xFF for b in png[crc : crc + 4]) + png[crc + 4 :]


# Row -> (segment, what) of `odd-images` (tests/images.rs): what a run
# rejects (16-bit, a forged size, a broken CRC) and what it decodes (CMYK, no
# end marker), on the PNG image sample.
ODD_IMAGES = {
    5: (0, "16-bit"),
    15: (1, "forged-webp"),
    25: (0, "crc"),
    35: (1, "cmyk"),
    45: (0, "no-end-marker"),
}


def cmd_odd_images(a, t):
    col = t.column("segments").combine_chunks()
    offsets = col.offsets.to_numpy()
    items = col.values.to_pylist()
    for row, (segment, what) in ODD_IMAGES.items():
        k = offsets[row] + segment
        items[k] = {
            "16-bit": lambda png: sixteen_bit_png(),
            "forged-webp": lambda png: forged_webp(16384),
            "crc": crc_broken,
            "cmyk": cmyk_jpeg,
            "no-end-marker": jpeg_without_end,
        }[what](items[k])
    segments = pa.ListArray.from_arrays(col.offsets, pa.array(items, type=pa.binary()))
    pq.write_table(replace(t, "segments", segments), a.out)


COMMANDS = {
    "bad-images": cmd_bad_images,
    "odd-images": cmd_odd_images,
    "webp": cmd_webp,
    "subset": cmd_subset,
    "rowgroups": cmd_rowgroups,
    "dict-id": cmd_dict_id,
    "duckdb": cmd_duckdb,
    "polars": cmd_polars,
    "codecs": cmd_codecs,
    "split": cmd_split,
    "large-list": cmd_large_list,
    "fixed-list": cmd_fixed_list,
    "binary-list": cmd_binary_list,
    "float-list": cmd_float_list,
    "extras": cmd_extras,
    "wrapper-model": cmd_wrapper_model,
    "other-model": cmd_other_model,
    "bad-tag": cmd_bad_tag,
    "flip-byte": cmd_flip_byte,
    "truncated": cmd_truncated,
    "corrupt-dict": cmd_corrupt_dict,
    "many-rejects": cmd_many_rejects,
    "aoti-metadata": cmd_aoti_metadata,
    "bad-values": cmd_bad_values,
    "tags": cmd_tags,
    "int-ids": cmd_int_ids,
    "empty": cmd_empty,
    "take": cmd_take,
    "carry": cmd_carry,
    "hive": cmd_hive,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("command", choices=sorted(COMMANDS))
    ap.add_argument("input")
    ap.add_argument("out")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--row-group-size", type=int, default=40)
    ap.add_argument("--sizes", default="")
    ap.add_argument("--every", type=int, default=7)
    ap.add_argument("--empty", action="store_true")
    ap.add_argument("--indices", default="")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--short-vec-row", type=int)
    ap.add_argument("--tag", type=int, default=100000)
    ap.add_argument("--extra", type=int, default=0, help="many-rejects: rows to add")
    ap.add_argument("--set", default="", help="aoti-metadata: KEY=VALUE[,KEY=VALUE...]")
    a = ap.parse_args()
    models = ("wrapper-model", "other-model", "aoti-metadata")
    table = None if a.command in models else load(a.input, a.rows)
    COMMANDS[a.command](a, table)


if __name__ == "__main__":
    main()
