"""Build the TorchScript models under models/ (deterministic), and AOTInductor packages of them.

Usage: python tools/make_models.py [--only digits-small|digits-seed]   (default: both)
       python tools/make_models.py --aoti [--only NAME] [--device cpu|cuda] [--dtype f32|bf16|f16]
                                   [--max-autotune] [--inductor-config KEY=VALUE ...] [--out PATH]
       python tools/make_models.py --check-package PATH --only NAME [--device ...] [--dtype ...]

--aoti exports the model(s) with torch.export (the sync-free Exportable subclasses; dynamic segment,
row and tag dimensions) and compiles them with AOTInductor into a package, models/<name>.pt2 on CPU
in f32, else models/<name>.<device>[.<dtype>].pt2 (e.g. digits-seed.cuda.bf16.pt2). The weights are
those of models/<name>.pt (digits-seed's are rebuilt from its seed when the .pt is absent). A
package is compiled for one device type and, on CPU, for the instruction set of the machine that
builds it: build it on the kind of machine that runs it. CPU: about 45 s per model on 2 cores (gcc).

Model contract (what segpredict calls; also in models/README.md):

    forward(segments: Tensor, segment_counts: Tensor, tags: Tensor, tag_counts: Tensor) -> Tensor

      segments:       float [S_padded, 1, 8, 8], raw pixel values 0..255 (the model divides by 255).
                      S_padded >= sum(segment_counts): the rows' segments concatenated in row
                      order, followed by zero PADDING segments at the end, which the model ignores
                      (per-segment features are computed for all S_padded segments; only the
                      first sum(segment_counts) are pooled).
      segment_counts: int64 [R], segments per row, each >= 1.
      tags:           int64 [T], all rows' tag ids (0..99) concatenated in row order (T may be 0).
      tag_counts:     int64 [R], tags per row (may be 0).
      returns:        float logits [R, 10] (dtype and device of `segments`).

    The module may be cast with module.to(torch.bfloat16) / moved with module.to("cuda") by the
    caller; segments must then be given in that dtype/device (the integer inputs stay int64, on the
    same device). Internal tensors follow segments.dtype / segments.device.

Models:
  digits-small  trained (UCI digits TRAIN half only): per-segment CNN -> softmax -> per-row MEAN of
                class probabilities -> log -> linear head, plus a per-row sum of tag embeddings.
  digits-seed   untrained, random but deterministic weights; the shape of the GPU memory problem:
                conv 1->512 k2 (8x8->7x7) + ReLU, conv 512->512 3x3 p1 + ReLU,
                conv 512->256 3x3 p1 + ReLU, adaptive avg pool -> [S,256], per-row SUM over the
                row's segments, plus tag embedding (256), linear 256->10.

Each model is written as models/<name>.pt with its label map models/<name>.labels.txt
(line i = label of class i).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import struct
import subprocess
import sys
import time
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from digits_data import LABELS, N_TAG_IDS, compose_items, load_split  # noqa: E402

MODELS = ROOT / "models"
SAMPLE = ROOT / "sample_data" / "digits.parquet"
N_CLASSES = 10


# ----------------------------------------------------------------------------- models


class SegmentCNN(nn.Module):
    """8x8 digit -> 10 class logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 4 * 4, 64)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(64, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [S,1,8,8] in 0..1
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


class DigitsSmall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.segment = SegmentCNN()
        self.head = nn.Linear(N_CLASSES, N_CLASSES)
        self.tag_emb = nn.Embedding(N_TAG_IDS, N_CLASSES)
        with torch.no_grad():
            self.head.weight.copy_(torch.eye(N_CLASSES))
            self.head.bias.zero_()
            self.tag_emb.weight.zero_()

    def pool_features(self, pooled: torch.Tensor, tags: torch.Tensor, tag_counts: torch.Tensor) -> torch.Tensor:
        """pooled: mean class probabilities [R,10] -> logits [R,10]."""
        r = pooled.size(0)
        x = self.head(torch.log(pooled + 1e-4))
        tag_row = torch.repeat_interleave(
            torch.arange(r, dtype=torch.int64, device=pooled.device), tag_counts, output_size=tags.size(0)
        )
        t = torch.zeros(r, x.size(1), dtype=x.dtype, device=x.device)
        t.index_add_(0, tag_row, self.tag_emb(tags))
        return x + t

    def forward(
        self, segments: torch.Tensor, segment_counts: torch.Tensor, tags: torch.Tensor, tag_counts: torch.Tensor
    ) -> torch.Tensor:
        r = segment_counts.size(0)
        n = int(segment_counts.sum())
        if n > segments.size(0):
            raise ValueError("sum(segment_counts) exceeds the number of segments")
        probs = torch.softmax(self.segment(segments / 255.0), dim=1)[:n]
        row = torch.repeat_interleave(
            torch.arange(r, dtype=torch.int64, device=segments.device), segment_counts, output_size=n
        )
        sums = torch.zeros(r, probs.size(1), dtype=segments.dtype, device=segments.device)
        sums.index_add_(0, row, probs)
        pooled = sums / segment_counts.to(segments.dtype).unsqueeze(1)
        return self.pool_features(pooled, tags, tag_counts)


class DigitsSeed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 512, 2)
        self.conv2 = nn.Conv2d(512, 512, 3, padding=1)
        self.conv3 = nn.Conv2d(512, 256, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.tag_emb = nn.Embedding(N_TAG_IDS, 256)
        self.head = nn.Linear(256, N_CLASSES)

    def forward(
        self, segments: torch.Tensor, segment_counts: torch.Tensor, tags: torch.Tensor, tag_counts: torch.Tensor
    ) -> torch.Tensor:
        r = segment_counts.size(0)
        n = int(segment_counts.sum())
        if n > segments.size(0):
            raise ValueError("sum(segment_counts) exceeds the number of segments")
        x = F.relu(self.stem(segments / 255.0))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        f = self.pool(x).flatten(1)[:n]
        row = torch.repeat_interleave(
            torch.arange(r, dtype=torch.int64, device=segments.device), segment_counts, output_size=n
        )
        pooled = torch.zeros(r, 256, dtype=f.dtype, device=f.device)
        pooled.index_add_(0, row, f)
        tag_row = torch.repeat_interleave(
            torch.arange(r, dtype=torch.int64, device=segments.device), tag_counts, output_size=tags.size(0)
        )
        pooled.index_add_(0, tag_row, self.tag_emb(tags))
        return self.head(pooled)


# ----------------------------------------------------------------------------- exportable models


def row_of_each(counts: torch.Tensor, n: int) -> torch.Tensor:
    """The row of each of n items laid out row after row, counts[r] items for row r: int64 [n].

    `repeat_interleave(arange(R), counts, output_size=n)` without a host sync or a shape that
    depends on the data: item i belongs to the first row whose running total exceeds i
    (`searchsorted(..., right=True)`), so rows with count 0 get no item, and items past
    sum(counts) (padding) get row R, which the callers pool into a spare row they drop. The
    TorchScript models take `int(segment_counts.sum())` instead, a host sync, and raise when it
    exceeds the segments; a sync-free model cannot raise on data, so sum(counts) <= n is the
    caller's to keep: segpredict builds the counts and pads the segments itself.
    """
    ends = torch.cumsum(counts, 0)
    items = torch.arange(n, dtype=ends.dtype, device=counts.device)
    return torch.searchsorted(ends, items, right=True)


def sum_per_row(values: torch.Tensor, row: torch.Tensor, rows: int) -> torch.Tensor:
    """values [n, C] summed per row -> [rows, C]; items of row `rows` (padding) are dropped.

    `index_put_(..., accumulate=True)`, which is `index_add_` along dim 0 with the same result:
    inductor compiles it (an atomic-add kernel), whereas `index_add` has no AOTInductor C shim
    and would run through the package's proxy executor ("missing a c-shim implementation").
    """
    sums = torch.zeros(rows + 1, values.size(1), dtype=values.dtype, device=values.device)
    sums.index_put_((row,), values, accumulate=True)
    return sums[:rows]


def sums_by_row_matmul(values: torch.Tensor, row: torch.Tensor, rows: int) -> torch.Tensor:
    """values [n, C] summed per row -> [rows + 1, C] (row `rows` takes the padding), as one matrix
    product with the 0/1 matrix saying which row each item is in.

    ATen's index_put with accumulate sorts the rows and then adds each row's items one after
    another, so a batch of a few long rows waits on a few long serial loops; a matrix product
    takes the same time however the items are spread over the rows, and adds in f32. The 0/1
    matrix is (rows + 1) x n: 134 MB in bf16 at 4,096 rows of a 16,384-segment batch.
    """
    member = torch.arange(rows + 1, dtype=row.dtype, device=row.device).unsqueeze(1) == row.unsqueeze(0)
    return member.to(values.dtype) @ values


def sums_by_row_scan(values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """values [n, C] summed per row (counts[r] items each, row after row) -> [rows, C], as the
    differences of a running total in f32 taken at each row's start and end.

    Like `sums_by_row_matmul`, its time does not depend on how the items are spread over the
    rows; unlike it, nor on the number of rows. The running total is taken along the inner
    dimension (values transposed), where ATen's scan is parallel; along the outer one each
    thread would walk all n items. In f32 over 16,384 items its rounding stays far below bf16's.
    """
    ends = torch.cumsum(counts, 0)
    totals = F.pad(torch.cumsum(values.t().float(), 1), (1, 0))
    return (totals[:, ends] - totals[:, ends - counts]).t().to(values.dtype)


class ExportableDigitsSmall(DigitsSmall):
    """DigitsSmall as torch.export traces it, without a host sync (same weights, same outputs).

    A subclass, so the TorchScript model (and its .pt file) stays exactly as it was. Every
    shape follows the inputs' sizes alone (no `.item()`, no data-dependent shape), so a batch
    never waits for the device and a fixed batch shape can be captured in a CUDA graph.
    """

    def pool_features(self, pooled: torch.Tensor, tags: torch.Tensor, tag_counts: torch.Tensor) -> torch.Tensor:
        r = pooled.size(0)
        x = self.head(torch.log(pooled + 1e-4))
        return x + sum_per_row(self.tag_emb(tags), row_of_each(tag_counts, tags.size(0)), r)

    def forward(
        self, segments: torch.Tensor, segment_counts: torch.Tensor, tags: torch.Tensor, tag_counts: torch.Tensor
    ) -> torch.Tensor:
        r = segment_counts.size(0)
        probs = torch.softmax(self.segment(segments / 255.0), dim=1)
        sums = sum_per_row(probs, row_of_each(segment_counts, segments.size(0)), r)
        # A row with no segment is 0 / 0, as in the TorchScript model.
        pooled = sums / segment_counts.to(segments.dtype).unsqueeze(1)
        return self.pool_features(pooled, tags, tag_counts)


class ExportableDigitsSeed(DigitsSeed):
    """DigitsSeed as torch.export traces it, without a host sync (see ExportableDigitsSmall).

    `pooling`: how the segments are summed per row, one of POOLINGS."""

    pooling = "index_put"

    def forward(
        self, segments: torch.Tensor, segment_counts: torch.Tensor, tags: torch.Tensor, tag_counts: torch.Tensor
    ) -> torch.Tensor:
        r = segment_counts.size(0)
        x = F.relu(self.stem(segments / 255.0))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        f = self.pool(x).flatten(1)
        # Segments and tags summed into one buffer, in the TorchScript model's order; its spare
        # last row takes the padding segments.
        if self.pooling == "scan":
            pooled = F.pad(sums_by_row_scan(f, segment_counts), (0, 0, 0, 1))
        elif self.pooling == "matmul":
            pooled = sums_by_row_matmul(f, row_of_each(segment_counts, segments.size(0)), r)
        else:
            pooled = torch.zeros(r + 1, f.size(1), dtype=f.dtype, device=f.device)
            pooled.index_put_((row_of_each(segment_counts, segments.size(0)),), f, accumulate=True)
        pooled.index_put_((row_of_each(tag_counts, tags.size(0)),), self.tag_emb(tags), accumulate=True)
        return self.head(pooled[:r])


EXPORTABLE = {"digits-small": ExportableDigitsSmall, "digits-seed": ExportableDigitsSeed}
POOLINGS = ("index_put", "matmul", "scan")
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


# ----------------------------------------------------------------------------- helpers


def setup_determinism(seed: int) -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(2)
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)


def write_labels(name: str) -> None:
    (MODELS / f"{name}.labels.txt").write_text("".join(l + "\n" for l in LABELS), encoding="utf-8")


def make_reproducible(path: Path) -> None:
    """Replace the random `.data/serialization_id` record of a TorchScript archive in place.

    torch.jit.save writes a random 40-digit serialization id; everything else is a function
    of the weights and code. Derive the id from the rest of the archive instead (same
    length, stored uncompressed) and patch its CRC-32 in the local header, data descriptor
    and central directory, so that rebuilding gives a byte-identical file.
    """
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(".data/serialization_id"))
        old = zf.read(info)
    assert info.compress_type == zipfile.ZIP_STORED
    h = info.header_offset
    assert data[h : h + 4] == b"PK\x03\x04"
    nlen, elen = struct.unpack_from("<HH", data, h + 26)
    start = h + 30 + nlen + elen
    assert bytes(data[start : start + len(old)]) == old
    data[start : start + len(old)] = b"0" * len(old)
    digest = int.from_bytes(hashlib.sha256(bytes(data)).digest(), "big")
    new = str(digest).rjust(len(old), "0")[-len(old) :].encode()
    data[start : start + len(old)] = new
    old_crc, new_crc = struct.pack("<I", zlib.crc32(old)), struct.pack("<I", zlib.crc32(new))
    patched = 0
    if data[h + 14 : h + 18] == old_crc:  # local header
        data[h + 14 : h + 18] = new_crc
        patched += 1
    end = start + len(old)
    dd = end + 4 if data[end : end + 4] == b"PK\x07\x08" else end
    if info.flag_bits & 0x08 and data[dd : dd + 4] == old_crc:  # data descriptor
        data[dd : dd + 4] = new_crc
        patched += 1
    name = info.filename.encode()
    pos = data.find(name)
    central = 0
    while pos != -1:
        c = pos - 46
        if c >= 0 and data[c : c + 4] == b"PK\x01\x02" and struct.unpack_from("<I", data, c + 42)[0] == h:
            assert data[c + 16 : c + 20] == old_crc
            data[c + 16 : c + 20] = new_crc
            central += 1
        pos = data.find(name, pos + 1)
    assert central == 1 and patched >= 1, (central, patched)
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None and zf.read(info.filename) == new


def save_script(module: nn.Module, name: str) -> Path:
    module.eval()
    scripted = torch.jit.script(module)
    path = MODELS / f"{name}.pt"
    scripted.save(str(path))
    make_reproducible(path)
    write_labels(name)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    print(f"[{name}] wrote {path.relative_to(ROOT)} ({path.stat().st_size:,} bytes, sha256 {digest}...)")
    return path


def smoke_inputs():
    """7 segments in 3 rows (2, 1, 4), 3 tags all in the middle row."""
    g = torch.Generator().manual_seed(0)
    seg = torch.randint(0, 256, (7, 1, 8, 8), generator=g).float()
    counts = torch.tensor([2, 1, 4], dtype=torch.int64)
    tags = torch.tensor([3, 55, 99], dtype=torch.int64)
    tcounts = torch.tensor([0, 3, 0], dtype=torch.int64)
    return seg, counts, tags, tcounts


def smoke_test(path: Path) -> None:
    """Padding is ignored, T == 0 works, bfloat16 cast works."""
    m = torch.jit.load(str(path))
    m.eval()
    seg, counts, tags, tcounts = smoke_inputs()
    with torch.inference_mode():
        a = m(seg, counts, tags, tcounts)
        padded = torch.cat([seg, torch.zeros(5, 1, 8, 8)])
        b = m(padded, counts, tags, tcounts)
        c = m(seg, counts, torch.zeros(0, dtype=torch.int64), torch.zeros(3, dtype=torch.int64))
        single = torch.cat([m(seg[:2], counts[:1], tags[:0], tcounts[:1]), m(seg[2:3], counts[1:2], tags, tcounts[1:2])])
        assert a.shape == (3, N_CLASSES) and c.shape == (3, N_CLASSES)
        assert torch.allclose(a, b, atol=1e-5), "padding changed the result"
        assert torch.allclose(a[:2], single, atol=1e-5), "batching changed the result"
        mb = torch.jit.load(str(path))
        mb.eval()
        mb.to(torch.bfloat16)
        d = mb(padded.to(torch.bfloat16), counts, tags, tcounts)
        assert d.dtype == torch.bfloat16 and d.shape == (3, N_CLASSES)
    print(f"[{path.stem}] smoke test ok (padding, empty tags, batching, bfloat16)")


def augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Random +-1 pixel shifts and mild intensity scaling. x: [B,1,8,8] in 0..1."""
    b = x.size(0)
    xp = F.pad(x, (1, 1, 1, 1))
    dx = torch.randint(0, 3, (b,), generator=g)
    dy = torch.randint(0, 3, (b,), generator=g)
    out = torch.empty_like(x)
    for i in range(3):
        for j in range(3):
            m = (dy == i) & (dx == j)
            if m.any():
                out[m] = xp[m, :, i : i + 8, j : j + 8]
    scale = 0.8 + 0.4 * torch.rand(b, 1, 1, 1, generator=g)
    return (out * scale).clamp(0, 1)


def train_cnn(x: torch.Tensor, y: torch.Tensor, seed: int, epochs: int = 40) -> SegmentCNN:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = SegmentCNN()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-4)
    steps_per_epoch = (len(x) + 63) // 64
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=epochs * steps_per_epoch)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for s in range(steps_per_epoch):
            idx = perm[s * 64 : (s + 1) * 64]
            loss = F.cross_entropy(net(augment(x[idx], g)), y[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    net.eval()
    return net


@torch.no_grad()
def cnn_probs(net: SegmentCNN, x: torch.Tensor) -> torch.Tensor:
    net.eval()
    return torch.softmax(net(x), dim=1)


def item_accuracy_on_sample(model) -> float:
    """Of a TorchScript file's model (a Path), or of any callable model."""
    import pyarrow.parquet  # noqa: F401

    from reference_predict import load_input, predict_probs

    if isinstance(model, Path):
        model = torch.jit.load(str(model))
        model.eval()
    cols = load_input(str(SAMPLE))
    probs = predict_probs(model, cols, 64)
    pred = probs.argmax(axis=1)
    truth = np.array([LABELS.index(t) for t in cols["true_label"].to_pylist()])
    return float((pred == truth).mean())


# ----------------------------------------------------------------------------- builders


def build_digits_small() -> None:
    t0 = time.perf_counter()
    setup_determinism(1234)
    (train_u8, train_y), (sample_u8, sample_y) = load_split()
    x = torch.from_numpy(train_u8.astype(np.float32) / 255.0).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(train_y)
    xs = torch.from_numpy(sample_u8.astype(np.float32) / 255.0).reshape(-1, 1, 8, 8)

    # 1. Out-of-fold per-image probabilities (2 folds) for training the item head on
    #    realistically calibrated probabilities.
    n = len(x)
    fold = torch.from_numpy((np.arange(n) % 2).astype(np.int64))[torch.randperm(n, generator=torch.Generator().manual_seed(7))]
    oof = torch.zeros(n, N_CLASSES)
    for k in range(2):
        tr, te = fold != k, fold == k
        net = train_cnn(x[tr], y[tr], seed=100 + k)
        oof[te] = cnn_probs(net, x[te])
    oof_acc = (oof.argmax(1) == y).float().mean().item()
    print(f"[digits-small] out-of-fold segment accuracy (TRAIN half, 2 folds): {oof_acc:.4f}")

    # 2. Final segment CNN on the whole TRAIN half.
    net = train_cnn(x, y, seed=200)
    seg_acc = (cnn_probs(net, xs).argmax(1).numpy() == sample_y).mean()
    print(f"[digits-small] segment accuracy on the SAMPLE half images: {seg_acc:.4f} ({time.perf_counter() - t0:.1f}s)")

    # 3. Item head (log of mean probabilities -> linear) + tag embeddings, trained on items
    #    composed from the TRAIN half with the out-of-fold probabilities.
    model = DigitsSmall()
    model.segment.load_state_dict(net.state_dict())
    it = compose_items(train_u8, train_y, 20000, seed=4242)
    offs = it["seg_offsets"]
    counts = np.diff(offs)
    seg_p = oof.numpy()[it["seg_img_idx"]].astype(np.float64)
    pooled = torch.from_numpy((np.add.reduceat(seg_p, offs[:-1], axis=0) / counts[:, None]).astype(np.float32))
    tags = torch.from_numpy(it["tags"].astype(np.int64))
    tcounts = torch.from_numpy(np.diff(it["tag_offsets"]).astype(np.int64))
    labels = torch.from_numpy(it["label"])
    head_params = list(model.head.parameters()) + list(model.tag_emb.parameters())
    opt = torch.optim.Adam(head_params, lr=0.05)
    for step in range(400):
        logits = model.pool_features(pooled, tags, tcounts)
        loss = F.cross_entropy(logits, labels) + 1e-4 * model.tag_emb.weight.pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model.pool_features(pooled, tags, tcounts).argmax(1) == labels).float().mean().item()
        base = (pooled.argmax(1) == labels).float().mean().item()
    print(f"[digits-small] train items: argmax(mean probs) {base:.4f}, with head+tags {acc:.4f}")

    path = save_script(model, "digits-small")
    train_s = time.perf_counter() - t0
    smoke_test(path)
    acc = item_accuracy_on_sample(path)
    print(f"[digits-small] trained in {train_s:.1f}s; item accuracy on {SAMPLE.relative_to(ROOT)}: {acc:.4f}")


def build_digits_seed() -> None:
    t0 = time.perf_counter()
    setup_determinism(5150)
    model = DigitsSeed()
    path = save_script(model, "digits-seed")
    smoke_test(path)
    print(f"[digits-seed] built in {time.perf_counter() - t0:.1f}s")


# ----------------------------------------------------------------------------- AOTInductor packages


def aoti_package_path(name: str, device: str, dtype: str) -> Path:
    suffix = "" if (device, dtype) == ("cpu", "f32") else f".{device}" + ("" if dtype == "f32" else f".{dtype}")
    return MODELS / f"{name}{suffix}.pt2"


def eager_weights(name: str) -> dict:
    """The weights of models/<name>.pt, so the package computes what the TorchScript model does."""
    path = MODELS / f"{name}.pt"
    if path.exists():
        return torch.jit.load(str(path), map_location="cpu").state_dict()
    if name == "digits-seed":
        # As build_digits_seed makes them, without its global deterministic mode, under which
        # CUDA's index_add_ refuses to run (the package check runs the eager model).
        torch.manual_seed(5150)
        return DigitsSeed().state_dict()
    raise SystemExit(f"{path.relative_to(ROOT)} is missing: build it first (just models)")


# The most segments (and rows) a batch of a CUDA package may hold. Without an upper bound,
# AOTInductor sizes its kernels' indices by the export example's sizes: 32-bit, which overflow
# past 2**31 elements, i.e. past ~85,600 segments in digits-seed's [segments, 512, 7, 7]; its
# `--gpu-memory 6GiB` calibration then died on an illegal memory access (H200, session 5). With
# this bound every index provably fits in 32 bits; the package records it in its metadata
# (segpredict.max_segments) and segpredict keeps every batch within it.
CUDA_MAX_SEGMENTS = 65536


def export_model(model: nn.Module, device: str, dtype: torch.dtype, max_segments: int | None = None,
                 size_class: int | None = None):
    """torch.export with dynamic segment, row and tag dimensions (segments and rows at most
    `max_segments` when given); with `size_class`, the segment dimension is static at that size
    (the padded batches of one size class) and rows and tags stay dynamic, so every batch of the
    class runs on this program whatever its rows and tags.

    The example's sizes are all different and at least 2: export specialises a dimension whose
    example size is 0 or 1, or equals another's.
    """
    seg, counts, tags, tcounts = (t.to(device) for t in smoke_inputs())
    bound = {"max": max_segments} if max_segments else {}
    rows = torch.export.Dim("rows", min=1, **bound)
    n_tags = torch.export.Dim("tags", min=0)
    if size_class is None:
        segments = {0: torch.export.Dim("segments", min=1, **bound)}
    else:
        if size_class < seg.size(0):
            raise SystemExit(f"--size-classes: {size_class} is below the export example's {seg.size(0)} segments")
        seg = torch.cat([seg, torch.zeros(size_class - seg.size(0), *seg.shape[1:], device=device)])
        segments = None
    example = (seg.to(dtype), counts, tags, tcounts)
    dynamic = (segments, {0: rows}, {0: n_tags}, {0: rows})
    return torch.export.export(model, example, dynamic_shapes=dynamic)


def load_package(path: Path, device: str, model_name: str = "model"):
    """torch._inductor.aoti_load_package, on CUDA with the current device's index, as
    segpredict passes it (index 0). Loading the CUDA digits-seed package of the `.item()` export
    crashed with SIGSEGV inside the loader's constructor (H200, torch 2.11) with the default
    index -1 and again with the index given, while segpredict loaded the same package; the
    cause is not known, and the sync-free package has not been loaded in Python on a GPU yet."""
    from torch._inductor.package import load_package as load

    if device == "cuda":
        return load(str(path), model_name, device_index=torch.cuda.current_device())
    return load(str(path), model_name)


def batch_like_the_benchmark(device: str, dtype: torch.dtype):
    """About 400 rows, 1..80 segments and 0..6 tags each, padded to a multiple of 1,024: the
    shape of the GPU benchmark's batches (the smoke cases' 3 rows reach no size-dependent code
    path of the compiled kernels, e.g. a reduction over the rows)."""
    g = torch.Generator().manual_seed(1)
    counts = torch.randint(1, 81, (397,), generator=g)
    tcounts = torch.randint(0, 7, (397,), generator=g)
    n = int(counts.sum())
    seg = torch.randint(0, 256, (-(-n // 1024) * 1024, 1, 8, 8), generator=g).to(dtype)
    tags = torch.randint(0, N_TAG_IDS, (int(tcounts.sum()),), generator=g)
    return tuple(t.to(device) for t in (seg, counts, tags, tcounts))


def eager_models(name: str, device: str, dtype: torch.dtype, pooling: str = "index_put") -> tuple[nn.Module, nn.Module]:
    """The exportable (sync-free) model and the TorchScript model's class, eager, same weights."""
    weights = eager_weights(name)
    models = []
    for cls in (EXPORTABLE[name], EXPORTABLE[name].__bases__[0]):
        model = cls()
        if pooling != "index_put":
            model.pooling = pooling
        model.load_state_dict(weights)
        models.append(model.eval().to(device=device, dtype=dtype))
    return models[0], models[1]


def check_package(path: Path, model: nn.Module, original: nn.Module, device: str, dtype: torch.dtype) -> None:
    """The package against the eager exportable model, and that against the TorchScript model's
    class (`original`): padding, one row, no tags, a row with no segments, a benchmark-sized
    batch; in f32 within 1e-4, else within 5% of the largest logit."""
    package = load_package(path, device)
    seg, counts, tags, tcounts = (t.to(device) for t in smoke_inputs())
    seg = seg.to(dtype)
    padded = torch.cat([seg, torch.zeros(5, 1, 8, 8, dtype=dtype, device=device)])
    no_tags = torch.zeros(0, dtype=torch.int64, device=device)
    cases = {
        "as exported": (seg, counts, tags, tcounts),
        "padded": (padded, counts, tags, tcounts),
        "one row": (seg[:2], counts[:1], tags[:0], tcounts[:1]),
        "no tags": (seg, counts, no_tags, torch.zeros_like(tcounts)),
        # Outside the contract (counts >= 1), but it must not fault: digits-small gives NaN (0 / 0)
        # for such a row, as its TorchScript model does; digits-seed pools its tags alone.
        "a row with no segments": (seg, torch.tensor([2, 0, 5], device=device), tags, tcounts),
        "a benchmark-sized batch": batch_like_the_benchmark(device, dtype),
    }
    worst, worst_original, scale = 0.0, 0.0, 0.0

    def differ(got: torch.Tensor, want: torch.Tensor, case: str) -> float:
        assert got.shape == want.shape, (case, got.shape, want.shape)
        assert torch.equal(got.isnan(), want.isnan()), f"{case}: NaN in one and not in the other"
        return (got.nan_to_num() - want.nan_to_num()).abs().max().item()

    with torch.inference_mode():
        for case, inputs in cases.items():
            want, got = model(*inputs).float(), package(*inputs).float()
            worst = max(worst, differ(got, want, case))
            worst_original = max(worst_original, differ(want, original(*inputs).float(), case))
            scale = max(scale, want.nan_to_num().abs().max().item())
    print(f"[{path.name}] the package differs from the eager sync-free model by {worst:.3g}, that from the "
          f"TorchScript model's class by {worst_original:.3g}; largest logit {scale:.3g} (padding, one row, "
          "no tags, a row with no segments, a benchmark-sized batch)", flush=True)
    # Two bf16 computations summing in different orders: on CPU, eager bf16 differs from
    # eager f32 by 1.4% of the largest logit on the benchmark-sized batch. A row pooled
    # wrongly (a lost or misplaced segment) shows as much more.
    bound = 1e-4 if dtype == torch.float32 else 0.05 * scale
    assert worst <= bound, f"the package differs from the eager model by {worst:.3g} (bound {bound:.3g})"
    assert worst_original <= bound, f"the sync-free model differs from the original by {worst_original:.3g}"


ATEN_OPS = ("cumsum", "searchsorted", "index_put")
# Always ATen calls in a package. cumsum: in a CUDA package (H200, torch 2.11) inductor's own scan
# kernel gave wrong running totals for real batch sizes after tuning on the export example's 3
# rows, so segments were pooled into the wrong rows and 49.5% of the benchmark's labels matched
# the TorchScript model's; with cumsum as an ATen call 99.6% match, as the TorchScript model's own
# bf16 runs do (benches/gpu/RESULTS.md, session 4). torch.compile of the same model is right.
ATEN_ALWAYS = ("cumsum",)
# ATen calls in a CUDA package. index_put (accumulate=True, the pooling): inductor's kernel adds
# with atomics, which contend on a long row's sums; on the benchmark's heavy-tailed rows the
# package ran 12.4 ms median / 23.5 ms p90 a 16,384-segment batch, against 9.3-10.0 ms alone on
# even rows, and 1,066,939 segs/s end to end; with ATen's index_put 1,589,166 (session 4, calls
# 5 and 6).
ATEN_ON_CUDA = ("index_put",)


def compile_as_aten(ops: list[str]) -> None:
    """Make inductor call ATen's own kernels for `ops` instead of generating its own (for this
    process): cumsum and searchsorted through their fallbacks, index_put with accumulate through
    the fallback inductor takes where atomic adds of the dtype are not supported (which also sends
    scatter_add and scatter_reduce(sum) to ATen; the digits models have none). It patches inductor's
    internals, so build_aoti checks the CUDA package's kernel names afterwards."""
    from torch._inductor import lowering

    for op in ops:
        if op == "index_put":
            lowering.needs_fallback_due_to_atomic_add_limitations = lambda dtype: True
        else:
            lowering.make_fallback(getattr(torch.ops.aten, op), warn=False)


def triton_kernels_computing(path: Path, ops: list[str]) -> list[str]:
    """The Triton kernels of a CUDA package whose names say they fuse one of `ops` (inductor names
    a kernel after the operators it fuses, e.g. triton_per_fused_cumsum_0)."""
    import re

    with zipfile.ZipFile(path) as package:
        sources = [package.read(n).decode() for n in package.namelist() if n.endswith(".wrapper.cpp")]
    if not sources:
        raise SystemExit(f"{path}: no generated wrapper source in the package to check")
    names = {k for src in sources for k in re.findall(r"\btriton_\w+", src)}
    return sorted(k for k in names if any(f"_{op}_" in f"{k}_" for op in ops))


def check_aten_calls(name: str, path: Path, aten_ops: list[str]) -> None:
    """A CUDA package that still has a generated cumsum is removed (it computes wrong labels); one
    that still has another op meant for ATen is only slower, and is warned of."""
    generated = triton_kernels_computing(path, aten_ops)
    scans = [k for k in generated if "_cumsum_" in f"{k}_"]
    if scans:
        path.unlink()
        raise SystemExit(f"{path}: inductor generated {', '.join(scans)} although cumsum was to be an ATen call "
                         "(its scan kernels computed wrong totals on the H200); package removed")
    if generated:
        print(f"[{name}] warning: inductor still generated {', '.join(generated)} for ops meant to be ATen calls",
              flush=True)


def build_aoti(name: str, device: str, dtype_name: str, max_autotune: bool, out: Path | None,
               extra_configs: dict | None = None, check: bool = True, aten_ops: list[str] | None = None,
               channels_last: bool | None = None, pooling: str | None = None) -> None:
    t0 = time.perf_counter()
    if pooling is None:
        # Scan on CUDA: index_put's time grew on batches of few long rows (10.8 ms at 16 rows
        # against 9.7 ms at 256, a 16,384-segment batch on the H200), the matrix product's on
        # batches of many rows (10.2 ms at 4,096); the scan's stays flat (session 5).
        pooling = "scan" if device == "cuda" and name == "digits-seed" else "index_put"
    aten_ops = list(dict.fromkeys([*ATEN_ALWAYS, *(ATEN_ON_CUDA if device == "cuda" else ()), *(aten_ops or [])]))
    if channels_last is None:
        channels_last = device == "cuda"
    compile_as_aten(aten_ops)
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available here")
    torch.set_num_threads(min(os.cpu_count() or 1, 16))
    dtype = DTYPES[dtype_name]
    model, original = eager_models(name, device, dtype, pooling)
    if channels_last:
        # Inductor lays convolutions out channels-last itself only for static shapes; with the
        # weights channels-last, cuDNN's convolutions of the package run channels-last too:
        # digits-seed's CUDA package alone, 16.1 ms -> 10.0 ms a 16,384-segment batch (H200).
        model = model.to(memory_format=torch.channels_last)
    max_segments = CUDA_MAX_SEGMENTS if device == "cuda" else None
    program = export_model(model, device, dtype, max_segments)
    path = out or aoti_package_path(name, device, dtype_name)
    bound = {"segpredict.max_segments": str(max_segments)} if max_segments else {}
    configs = {
        # segpredict reads the dtype the package takes, and its bound, from its metadata.
        "aot_inductor.metadata": {"segpredict.dtype": dtype_name, **bound},
        "max_autotune": max_autotune,
        **(extra_configs or {}),
    }
    print(f"[{name}] compiled as calls to ATen: {', '.join(aten_ops)}"
          + f"; segments summed per row by {pooling}", flush=True)
    torch._inductor.aoti_compile_and_package(program, package_path=str(path), inductor_configs=configs)
    if not (MODELS / f"{name}.labels.txt").exists():
        write_labels(name)
    print(f"[{name}] wrote {path} ({path.stat().st_size:,} bytes) in {time.perf_counter() - t0:.1f}s", flush=True)
    if device == "cuda":
        check_aten_calls(name, path, aten_ops)
    if not check:
        print(f"[{name}] not checked against eager (--no-check)")
        return
    if device == "cuda":
        # Loading the CUDA package in Python crashed (SIGSEGV inside aoti_load_package, H200,
        # torch 2.11, in the compiling process and in a fresh one): checking it in a child
        # process keeps such a crash from losing the package just built.
        child = [sys.executable, "-X", "faulthandler", __file__, "--check-package", str(path), "--only", name,
                 "--device", device, "--dtype", dtype_name] + (["--pooling", pooling] if name == "digits-seed" else [])
        subprocess.run(child, check=True)
    else:
        check_package(path, model, original, device, dtype)
    if name == "digits-small" and (device, dtype_name) == ("cpu", "f32"):
        acc = item_accuracy_on_sample(load_package(path, device))
        print(f"[{name}] package's item accuracy on {SAMPLE.relative_to(ROOT)}: {acc:.4f}")


# ----------------------------------------------------------------------------- size-class bundles
#
# One .pt2 archive holding several AOTInductor models (torch._inductor.package.package_aoti with a
# dict of model name -> files; AOTIModelPackageLoader(path, model_name) loads one): `model`, the
# dynamic program (what any loader takes by default, so the bundle is also a plain package), and
# `class_<N>` for each size class N, exported with the segment dimension static at N (rows and tags
# stay dynamic) and recording `segpredict.size_class` = N in its metadata. segpredict dispatches
# each padded batch to its class's model (README: "Size-class packages").

CLASS_PREFIX = "class_"


def classes_package_path(name: str, device: str, dtype: str) -> Path:
    return aoti_package_path(name, device, dtype).with_suffix(".classes.pt2")


def compile_program(name: str, device: str, dtype_name: str, pooling: str, channels_last: bool,
                    aten_ops: list[str], size_class: int | None, configs: dict) -> list[str]:
    """One program of a bundle exported and compiled (aot_compile with aot_inductor.package): the
    files package_aoti takes. Runs in a child process when the bundle's programs compile in
    parallel (each is mostly one Python thread), so it rebuilds the model itself."""
    import warnings as _warnings

    _warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    compile_as_aten(aten_ops)
    torch.set_num_threads(min(os.cpu_count() or 1, 16))
    model, _ = eager_models(name, device, DTYPES[dtype_name], pooling)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    bound = CUDA_MAX_SEGMENTS if device == "cuda" else None
    program = export_model(model, device, DTYPES[dtype_name], bound, size_class)
    metadata = dict(configs.get("aot_inductor.metadata", {}))
    if size_class is not None:
        metadata["segpredict.size_class"] = str(size_class)
    options = {**configs, "aot_inductor.metadata": metadata, "aot_inductor.package": True}
    gm = program.module(check_guards=False)
    args, kwargs = program.example_inputs
    files = torch._inductor.aot_compile(gm, args, kwargs, options=options)
    if not all(isinstance(f, str) for f in files):
        raise SystemExit("aot_compile returned weights outside its files (aot_inductor.package_constants_in_so off?)")
    return list(files)


def _compile_program_child(job: tuple) -> tuple[str, list[str], float]:
    t0 = time.perf_counter()
    model_name, args = job
    return model_name, compile_program(*args), time.perf_counter() - t0


def build_aoti_classes(name: str, device: str, dtype_name: str, max_autotune: bool, out: Path | None,
                       size_classes: list[int], extra_configs: dict | None = None, check: bool = True,
                       aten_ops: list[str] | None = None, channels_last: bool | None = None,
                       pooling: str | None = None, dynamic: bool = True, jobs: int = 0) -> Path:
    """A bundle: the dynamic program (unless `dynamic` is off) and one static program per size
    class, compiled `jobs` at a time (0: a quarter of the cores, at least 1), in one archive."""
    t0 = time.perf_counter()
    if pooling is None:
        pooling = "scan" if device == "cuda" and name == "digits-seed" else "index_put"
    aten_ops = list(dict.fromkeys([*ATEN_ALWAYS, *(ATEN_ON_CUDA if device == "cuda" else ()), *(aten_ops or [])]))
    if channels_last is None:
        channels_last = device == "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available here")
    if sorted(set(size_classes)) != size_classes or size_classes[0] < 8:
        raise SystemExit(f"--size-classes {size_classes}: strictly ascending, each at least 8")
    if device == "cuda" and size_classes[-1] > CUDA_MAX_SEGMENTS:
        raise SystemExit(f"--size-classes: at most {CUDA_MAX_SEGMENTS} segments a class on CUDA")
    bound = {"segpredict.max_segments": str(CUDA_MAX_SEGMENTS)} if device == "cuda" else {}
    configs = {"aot_inductor.metadata": {"segpredict.dtype": dtype_name, **bound}, "max_autotune": max_autotune,
               **(extra_configs or {})}
    programs = ([("model", None)] if dynamic else []) + [(f"{CLASS_PREFIX}{n}", n) for n in size_classes]
    job_args = [(model_name, (name, device, dtype_name, pooling, channels_last, aten_ops, size_class, configs))
                for model_name, size_class in programs]
    jobs = jobs or max(1, (os.cpu_count() or 1) // 4)
    jobs = min(jobs, len(job_args))
    print(f"[{name}] bundle of {', '.join(m for m, _ in programs)}: compiled as calls to ATen: {', '.join(aten_ops)}"
          f"; segments summed per row by {pooling}; {jobs} at a time", flush=True)
    if jobs == 1:
        results = [_compile_program_child(job) for job in job_args]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # Each child's inductor starts its own pool of compile workers: share the cores out.
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_compile_program_child, job_args))
    for model_name, _, seconds in results:
        print(f"[{name}] {model_name} compiled in {seconds:.1f}s", flush=True)
    from torch._inductor.package import package_aoti

    path = out or classes_package_path(name, device, dtype_name)
    package_aoti(str(path), {model_name: files for model_name, files, _ in results})
    if not (MODELS / f"{name}.labels.txt").exists():
        write_labels(name)
    print(f"[{name}] wrote {path} ({path.stat().st_size:,} bytes) in {time.perf_counter() - t0:.1f}s", flush=True)
    if device == "cuda":
        check_aten_calls(name, path, aten_ops)
    if not check:
        print(f"[{name}] not checked against eager (--no-check)")
        return path
    if device == "cuda":
        child = [sys.executable, "-X", "faulthandler", __file__, "--check-package", str(path), "--only", name,
                 "--device", device, "--dtype", dtype_name] + (["--pooling", pooling] if name == "digits-seed" else [])
        subprocess.run(child, check=True)
    else:
        model, original = eager_models(name, device, DTYPES[dtype_name], pooling)
        check_bundle(path, model, original, device, DTYPES[dtype_name])
    return path


def bundle_models(path: Path) -> dict[str, int | None]:
    """The models a .pt2 archive holds: name -> its size class (None: the dynamic `model`)."""
    names = set()
    with zipfile.ZipFile(path) as archive:
        for entry in archive.namelist():
            parts = entry.split("/")
            if len(parts) > 3 and parts[1:3] == ["data", "aotinductor"]:
                names.add(parts[3])
    return {n: (int(n[len(CLASS_PREFIX):]) if n.startswith(CLASS_PREFIX) else None) for n in sorted(names)}


def class_cases(size: int, device: str, dtype: torch.dtype) -> dict:
    """Batches padded to `size` segments: the smoke rows, one row, no tags, and rows of 1..80
    segments and 0..6 tags filling the class."""
    g = torch.Generator().manual_seed(size)
    seg, counts, tags, tcounts = smoke_inputs()

    def pad(s: torch.Tensor) -> torch.Tensor:
        return torch.cat([s, torch.zeros(size - s.size(0), *s.shape[1:])])

    fill = []
    while sum(fill) < size:
        fill.append(int(torch.randint(1, 81, (1,), generator=g)))
    fill = torch.tensor(fill[:-1] or [size])
    ftags = torch.randint(0, 7, (fill.numel(),), generator=g)
    cases = {
        "smoke rows": (pad(seg), counts, tags, tcounts),
        "one row": (pad(seg[:2]), counts[:1], tags[:0], tcounts[:1]),
        "no tags": (pad(seg), counts, tags[:0], torch.zeros_like(tcounts)),
        "full": (torch.randint(0, 256, (size, 1, 8, 8), generator=g).float(), fill,
                 torch.randint(0, N_TAG_IDS, (int(ftags.sum()),), generator=g), ftags),
    }
    return {k: tuple(t.to(device) for t in (v[0].to(dtype), *v[1:])) for k, v in cases.items()}


def check_bundle(path: Path, model: nn.Module, original: nn.Module, device: str, dtype: torch.dtype) -> None:
    """Each model of a bundle against the eager model: the dynamic one as check_package checks a
    package, each class's on batches padded to its class."""
    models = bundle_models(path)
    if "model" in models:
        check_package(path, model, original, device, dtype)
    bound = 1e-4 if dtype == torch.float32 else None
    for model_name, size in models.items():
        if size is None:
            continue
        package = load_package(path, device, model_name)
        worst, scale = 0.0, 0.0
        with torch.inference_mode():
            for case, inputs in class_cases(size, device, dtype).items():
                want, got = model(*inputs).float(), package(*inputs).float()
                assert got.shape == want.shape, (model_name, case, got.shape, want.shape)
                worst = max(worst, (got - want).abs().max().item())
                scale = max(scale, want.abs().max().item())
        limit = bound if bound is not None else 0.05 * scale
        print(f"[{path.name}] {model_name} differs from the eager model by {worst:.3g} (largest logit {scale:.3g})",
              flush=True)
        assert worst <= limit, f"{model_name} differs from the eager model by {worst:.3g} (bound {limit:.3g})"


def inductor_configs(ap: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    import ast  # here, not at the top: a line above the model classes changes the .pt files (debug info)

    configs = {}
    for item in args.inductor_config:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--inductor-config {item!r}: expected KEY=VALUE")
        try:
            configs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            ap.error(f"--inductor-config {item!r}: VALUE is not a Python literal")
    return configs


def main() -> None:
    ap = argparse.ArgumentParser(description="Build TorchScript models (and AOTInductor packages) under models/.")
    ap.add_argument("--only", choices=["digits-small", "digits-seed"])
    ap.add_argument("--aoti", action="store_true", help="export and package with AOTInductor (.pt2)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="--aoti: the package's device")
    ap.add_argument("--dtype", choices=list(DTYPES), default="f32", help="--aoti: the package's dtype")
    ap.add_argument("--max-autotune", action="store_true", help="--aoti: inductor's max_autotune (slow to build)")
    ap.add_argument("--inductor-config", action="append", default=[], metavar="KEY=VALUE",
                    help="--aoti: one more inductor config, VALUE a Python literal (repeatable), "
                         "e.g. triton.persistent_reductions=False")
    ap.add_argument("--aten", action="append", default=[], choices=ATEN_OPS,
                    help="--aoti: compile this op as a call to ATen's kernel, not an inductor kernel (repeatable; "
                         "cumsum always is, and index_put on CUDA)")
    ap.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                    help="--aoti: export with the weights channels-last, so cuDNN runs the convolutions "
                         "channels-last (default: on for CUDA, off for CPU)")
    ap.add_argument("--pooling", choices=POOLINGS,
                    help="--aoti, digits-seed: how the package sums the segments per row: index_put, a matrix "
                         "product with the 0/1 row matrix, or differences of a running total (scan; the default "
                         "for CUDA, index_put for CPU)")
    ap.add_argument("--size-classes", metavar="N1,N2,...",
                    help="--aoti: one bundle (<name>[.<device>[.<dtype>]].classes.pt2) holding the dynamic model and "
                         "one model per size class with the segment dimension static at that size")
    ap.add_argument("--no-dynamic", action="store_true",
                    help="--size-classes: leave the dynamic model out of the bundle (segpredict then refuses a run "
                         "whose size classes have no model, and rejects rows over the largest class)")
    ap.add_argument("--jobs", type=int, default=0,
                    help="--size-classes: programs compiled at once, each in its own process (default: a quarter "
                         "of the cores, at least 1)")
    ap.add_argument("--out", type=Path, help="--aoti with --only: the package's path")
    ap.add_argument("--no-check", action="store_true",
                    help="--aoti: skip checking the package against eager in Python (the benchmark checks it "
                         "through segpredict instead, whose loader is not Python's)")
    ap.add_argument("--check-package", type=Path, help="with --only: check this package against the eager model")
    args = ap.parse_args()
    MODELS.mkdir(exist_ok=True)
    if args.check_package:
        if not args.only:
            ap.error("--check-package needs --only")
        model, original = eager_models(args.only, args.device, DTYPES[args.dtype], args.pooling or "index_put")
        if any(size is not None for size in bundle_models(args.check_package).values()):
            check_bundle(args.check_package, model, original, args.device, DTYPES[args.dtype])
        else:
            check_package(args.check_package, model, original, args.device, DTYPES[args.dtype])
        return
    if args.pooling and args.only != "digits-seed":
        ap.error("--pooling is for --only digits-seed")
    if args.aoti:
        # torch 2.11's own pytree code trips its own deprecation on every package.
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        if args.out and not args.only:
            ap.error("--out needs --only")
        if args.size_classes:
            try:
                classes = [int(n) for n in args.size_classes.split(",")]
            except ValueError:
                ap.error(f"--size-classes {args.size_classes!r}: expected N1,N2,... (segment totals)")
            for name in [args.only] if args.only else ["digits-small", "digits-seed"]:
                build_aoti_classes(name, args.device, args.dtype, args.max_autotune, args.out, classes,
                                   inductor_configs(ap, args), check=not args.no_check, aten_ops=args.aten,
                                   channels_last=args.channels_last, pooling=args.pooling,
                                   dynamic=not args.no_dynamic, jobs=args.jobs)
            return
        for name in [args.only] if args.only else ["digits-small", "digits-seed"]:
            build_aoti(name, args.device, args.dtype, args.max_autotune, args.out, inductor_configs(ap, args),
                       check=not args.no_check, aten_ops=args.aten, channels_last=args.channels_last,
                       pooling=args.pooling)
        return
    if args.only is None or os.environ.get("PYTHONHASHSEED") != "0":
        # One process per model, with a fixed PYTHONHASHSEED: TorchScript's generated code
        # depends on set iteration order and on what was compiled earlier in the process,
        # so this keeps the files byte-identical whether built together or with --only.
        env = dict(os.environ, PYTHONHASHSEED="0")
        for name in [args.only] if args.only else ["digits-small", "digits-seed"]:
            subprocess.run([sys.executable, __file__, "--only", name], check=True, env=env)
    elif args.only == "digits-small":
        build_digits_small()
    else:
        build_digits_seed()


if __name__ == "__main__":
    main()
