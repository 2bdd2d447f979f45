"""Shared data helpers for the digits sample and the digits models.

Source: the UCI ML hand-written digits data set (1,797 8x8 images, values
0..16) as bundled with scikit-learn (``sklearn.datasets.load_digits``; no
network access needed). Licence of the UCI data set: CC BY 4.0.

The 1,797 images are split deterministically (fixed seed, stratified by class)
into two disjoint halves:

* TRAIN  -- used only by ``tools/make_models.py`` to train ``digits-small``;
* SAMPLE -- used only by ``sample_data/make_sample.py`` to compose the sample.

Both scripts compose "items" the same way (``compose_items``), with different
seeds.
"""

from __future__ import annotations

import numpy as np

SPLIT_SEED = 20240611
N_TAG_IDS = 100
MAX_TAGS = 6
LABELS = ["零", "一", "二", "三", "四", "五", "六", "七", "八", "九"]


def to_u8(images16: np.ndarray) -> np.ndarray:
    """Scale 0..16 pixel values to 0..255 bytes: round(v*255/16)."""
    v = np.rint(images16.astype(np.float64) * 255.0 / 16.0)
    return np.clip(v, 0, 255).astype(np.uint8).reshape(len(images16), 64)


def load_split():
    """Return ((train_u8 [N,64], train_y), (sample_u8 [M,64], sample_y)).

    Stratified, deterministic 50/50 split of the 1,797 digits images.
    """
    from sklearn.datasets import load_digits

    d = load_digits()
    images = to_u8(d.images)
    y = d.target.astype(np.int64)
    rng = np.random.Generator(np.random.PCG64(SPLIT_SEED))
    train_idx, sample_idx = [], []
    for c in range(10):
        idx = np.flatnonzero(y == c)
        idx = idx[rng.permutation(len(idx))]
        half = len(idx) // 2
        train_idx.append(idx[:half])
        sample_idx.append(idx[half:])
    train_idx = np.sort(np.concatenate(train_idx))
    sample_idx = np.sort(np.concatenate(sample_idx))
    assert len(np.intersect1d(train_idx, sample_idx)) == 0
    return (images[train_idx], y[train_idx]), (images[sample_idx], y[sample_idx])


def compose_items(
    images: np.ndarray,
    labels: np.ndarray,
    n_items: int,
    seed: int,
    big_counts=(1100, 1500, 2000, 2500),
    median: float = 18.0,
    sigma: float = 1.3,
    max_regular: int = 999,
    p_dominant: float = 0.5,
    p_tag_informative: float = 0.3,
):
    """Compose items from a pool of digit images.

    Returns a dict with
      seg_offsets  int64 [n_items+1]
      seg_images   uint8 [S, 64]   (row-major 8x8 bytes, 0..255)
      seg_digits   int64 [S]
      seg_img_idx  int64 [S]       (index into ``images``)
      tag_offsets  int64 [n_items+1]
      tags         int32 [T]
      label        int64 [n_items] (most frequent segment digit; ties -> smallest)

    Segment counts: lognormal with median ``median`` and ``sigma``, rounded and
    clipped to [1, max_regular]; ``len(big_counts)`` items at random positions
    get exactly those (large) counts instead.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    counts = np.rint(rng.lognormal(mean=np.log(median), sigma=sigma, size=n_items))
    counts = np.clip(counts, 1, max_regular).astype(np.int64)
    if len(big_counts):
        pos = rng.choice(n_items, size=len(big_counts), replace=False)
        counts[pos] = np.asarray(big_counts, dtype=np.int64)
    total = int(counts.sum())
    seg_offsets = np.zeros(n_items + 1, dtype=np.int64)
    np.cumsum(counts, out=seg_offsets[1:])
    row_of_seg = np.repeat(np.arange(n_items), counts)

    dominant = rng.integers(0, 10, size=n_items)
    use_dom = rng.random(total) < p_dominant
    rand_digit = rng.integers(0, 10, size=total)
    seg_digits = np.where(use_dom, dominant[row_of_seg], rand_digit).astype(np.int64)

    # Pick an image of the required digit (with replacement).
    by_class = [np.flatnonzero(labels == c) for c in range(10)]
    u = rng.random(total)
    seg_img_idx = np.empty(total, dtype=np.int64)
    for c in range(10):
        m = seg_digits == c
        pool = by_class[c]
        seg_img_idx[m] = pool[np.minimum((u[m] * len(pool)).astype(np.int64), len(pool) - 1)]
    seg_images = images[seg_img_idx]

    # True label: most frequent digit among the segments; ties -> smallest digit.
    hist = np.zeros((n_items, 10), dtype=np.int64)
    np.add.at(hist, (row_of_seg, seg_digits), 1)
    label = hist.argmax(axis=1).astype(np.int64)

    # Tags: 0..MAX_TAGS per item, weakly informative about the label.
    n_tags = rng.integers(0, MAX_TAGS + 1, size=n_items)
    tag_offsets = np.zeros(n_items + 1, dtype=np.int64)
    np.cumsum(n_tags, out=tag_offsets[1:])
    t_total = int(n_tags.sum())
    row_of_tag = np.repeat(np.arange(n_items), n_tags)
    informative = rng.random(t_total) < p_tag_informative
    inf_tag = label[row_of_tag] * 10 + rng.integers(0, 10, size=t_total)
    uni_tag = rng.integers(0, N_TAG_IDS, size=t_total)
    tags = np.where(informative, inf_tag, uni_tag).astype(np.int32)

    return dict(
        seg_offsets=seg_offsets,
        seg_images=seg_images,
        seg_digits=seg_digits,
        seg_img_idx=seg_img_idx,
        tag_offsets=tag_offsets,
        tags=tags,
        label=label,
    )
