//! What a run keeps in memory of its batches: running totals, quantile
//! histograms, the device-memory track and a bounded sample for the plot.
//! Every record itself goes to a committed file under `_progress/` as it
//! is measured (the writers' batch files), so nothing here grows with the
//! number of batches: a night of a billion rows holds the same few KiB.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::record::{BatchRecord, FlushReason, MemoryStats};

/// Smallest value a [`LogHistogram`] tells apart from zero, in ms.
const HISTOGRAM_MIN_MS: f64 = 1e-3;
/// Each bucket is this much wider than the one below: a quantile read from
/// the histogram is within 1% of the true value.
const HISTOGRAM_GROWTH: f64 = 1.02;
/// Buckets from 1 µs to about 3 hours (1e-3 * 1.02^1200 ms ≈ 2e7 ms);
/// longer values land in the last.
const HISTOGRAM_BUCKETS: usize = 1200;

/// Durations in logarithmic buckets of 2% width: a fixed 9.6 KiB whatever
/// the count, quantiles within 1% of the exact ones, deterministic, and
/// mergeable (counts add) across attempts and shards. A reservoir sample
/// would be as small but random (two reports of one run would differ) and
/// could not be merged exactly; an exact quantile needs every value.
/// Serialized sparse (`[[bucket, count], ...]`, the non-empty buckets), as
/// a commit record carries one per batch-record file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "SparseHistogram", try_from = "SparseHistogram")]
pub struct LogHistogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        Self {
            counts: vec![0; HISTOGRAM_BUCKETS + 1],
            total: 0,
        }
    }
}

impl LogHistogram {
    /// Bucket 0 holds values up to `HISTOGRAM_MIN_MS`; bucket `i` values in
    /// `(min * g^(i-1), min * g^i]`.
    fn bucket(value_ms: f64) -> usize {
        if value_ms.is_nan() || value_ms <= HISTOGRAM_MIN_MS {
            return 0;
        }
        let i = ((value_ms / HISTOGRAM_MIN_MS).ln() / HISTOGRAM_GROWTH.ln()).ceil();
        (i as usize).min(HISTOGRAM_BUCKETS)
    }

    /// The value a bucket stands for: its geometric middle.
    fn value(bucket: usize) -> f64 {
        match bucket {
            0 => 0.0,
            i => HISTOGRAM_MIN_MS * HISTOGRAM_GROWTH.powf(i as f64 - 0.5),
        }
    }

    /// Counts one value, in milliseconds, in its bucket; values below
    /// the smallest bucket count as 0, values above the largest in it.
    pub fn add(&mut self, value_ms: f64) {
        self.counts[Self::bucket(value_ms)] += 1;
        self.total += 1;
    }

    /// Adds `other`'s counts (another attempt's or shard's), as if its
    /// values had been added here.
    pub fn merge(&mut self, other: &LogHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
    }

    /// Values added so far.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q` quantile (nearest rank), within 1%; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Self::value(bucket));
            }
        }
        Some(Self::value(HISTOGRAM_BUCKETS))
    }
}

/// A [`LogHistogram`]'s non-empty buckets, in bucket order: its form in
/// JSON, a few dozen pairs where the dense form is 1,201 numbers.
#[derive(Serialize, Deserialize)]
struct SparseHistogram(Vec<(usize, u64)>);

impl From<LogHistogram> for SparseHistogram {
    fn from(h: LogHistogram) -> Self {
        let filled = h.counts.iter().enumerate().filter(|(_, &c)| c > 0);
        SparseHistogram(filled.map(|(i, &c)| (i, c)).collect())
    }
}

/// A serialized histogram's bucket past the last one.
#[derive(Debug, thiserror::Error)]
#[error("histogram bucket {bucket} > {HISTOGRAM_BUCKETS}, the last")]
pub struct BucketOutOfRange {
    bucket: usize,
}

impl TryFrom<SparseHistogram> for LogHistogram {
    type Error = BucketOutOfRange;

    fn try_from(sparse: SparseHistogram) -> Result<Self, BucketOutOfRange> {
        let mut h = LogHistogram::default();
        for (bucket, count) in sparse.0 {
            let slot = h
                .counts
                .get_mut(bucket)
                .ok_or(BucketOutOfRange { bucket })?;
            *slot += count;
            h.total += count;
        }
        Ok(h)
    }
}

/// Totals over batch records that do not depend on their order, so the
/// records of several attempts (read back from their files, or carried in
/// their commit records) and shards add up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BatchTotals {
    /// Batches run.
    pub batches: u64,
    /// Input rows in them.
    pub rows: u64,
    /// Real segments in them.
    pub segments: u64,
    /// Segments the model processed, padding included; minus `segments`,
    /// the work padding cost.
    pub padded_segments: u64,
    /// Batches of one row over the budget, run alone.
    pub oversized: u64,
    /// The earliest a batch was queued, in ms from its attempt's start.
    pub first_queued_ms: Option<f64>,
    /// Device time summed over the batches timed on a device.
    pub device_ms: f64,
    /// Each batch's host wall time from queueing to answers, in ms.
    pub wall_ms_histogram: LogHistogram,
    /// Each batch's device time, in ms, for batches timed on a device.
    pub device_ms_histogram: LogHistogram,
}

impl BatchTotals {
    /// Counts one batch record into the totals.
    pub fn add(&mut self, r: &BatchRecord) {
        self.batches += 1;
        self.rows += r.rows as u64;
        self.segments += r.segments as u64;
        self.padded_segments += r.padded_segments as u64;
        self.oversized += u64::from(r.flush_reason == FlushReason::Oversized);
        self.first_queued_ms = Some(match self.first_queued_ms {
            Some(first) => first.min(r.queued_at_ms),
            None => r.queued_at_ms,
        });
        self.wall_ms_histogram.add(r.wall_ms);
        if let Some(device_ms) = r.device_ms {
            self.device_ms += device_ms;
            self.device_ms_histogram.add(device_ms);
        }
    }

    /// Adds another attempt's or shard's totals; the earliest queueing is
    /// this one's (each attempt counts from its own start).
    pub fn merge_counts(&mut self, other: &BatchTotals) {
        self.batches += other.batches;
        self.rows += other.rows;
        self.segments += other.segments;
        self.padded_segments += other.padded_segments;
        self.oversized += other.oversized;
        self.device_ms += other.device_ms;
        self.wall_ms_histogram.merge(&other.wall_ms_histogram);
        self.device_ms_histogram.merge(&other.device_ms_histogram);
    }

    /// Adds totals of the same attempt's clock (another file of one
    /// writer's records, say): as [`BatchTotals::merge_counts`], and the
    /// earliest queueing is the earlier of the two.
    pub fn merge(&mut self, other: &BatchTotals) {
        self.merge_counts(other);
        self.first_queued_ms = match (self.first_queued_ms, other.first_queued_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Device memory over one attempt's batches, in their order, kept small:
/// the distinct padded shapes (at most the size classes, or the budget's
/// segment counts unpadded) and the batches where reserved memory reached
/// a new high (reserved memory grows in blocks of at least 2 MiB, so at
/// most device memory / 2 MiB of them), never one entry per batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryTrack {
    /// Batches seen, with or without memory statistics.
    pub batches: u64,
    shapes: BTreeSet<usize>,
    /// Batches up to and including the last one of a shape not seen before.
    pub last_new_shape: u64,
    /// Among batches with memory statistics, the 0-based index of each
    /// that raised the reserved high-water mark.
    pub reserved_highs_at: Vec<u64>,
    with_memory: u64,
    /// The most bytes allocated to tensors at any batch (0 without memory
    /// statistics).
    pub peak_allocated: i64,
    /// The most bytes reserved from the device at any batch (0 without
    /// memory statistics).
    pub peak_reserved: i64,
    /// The last batch's statistics.
    pub last: Option<MemoryStats>,
}

impl MemoryTrack {
    /// Follows one more batch, in the order they ran: its shape, and its
    /// memory statistics if the device gave any.
    pub fn add(&mut self, r: &BatchRecord) {
        self.batches += 1;
        if self.shapes.insert(r.padded_segments) {
            self.last_new_shape = self.batches;
        }
        let Some(m) = r.memory else { return };
        if m.reserved_peak > self.peak_reserved {
            self.reserved_highs_at.push(self.with_memory);
            self.peak_reserved = m.reserved_peak;
        }
        self.peak_allocated = self.peak_allocated.max(m.allocated_peak);
        self.with_memory += 1;
        self.last = Some(m);
    }
}

/// Points the plot may hold: enough for a 1200-pixel-wide picture.
const PLOT_POINTS: usize = 2048;

/// Every `stride`-th batch record of an attempt, at most `PLOT_POINTS`:
/// when full, every other point is dropped and the stride doubles, so a
/// run of any length keeps an evenly spaced sample of its batches.
#[derive(Debug, Clone)]
pub struct PlotSample {
    /// The distance, in batches, between kept points; starts at 1 and
    /// doubles each time the sample fills.
    pub stride: u64,
    /// Batches offered, kept or not.
    pub seen: u64,
    /// Batch `i * stride` at index `i`.
    pub points: Vec<BatchRecord>,
}

impl Default for PlotSample {
    fn default() -> Self {
        Self {
            stride: 1,
            seen: 0,
            points: Vec::new(),
        }
    }
}

impl PlotSample {
    /// Offers the next batch record, in run order; kept if it falls on the
    /// stride.
    pub fn add(&mut self, r: &BatchRecord) {
        if self.seen.is_multiple_of(self.stride) {
            if self.points.len() == PLOT_POINTS {
                let mut keep = false;
                self.points.retain(|_| {
                    keep = !keep;
                    keep
                });
                self.stride *= 2;
            }
            if self.seen.is_multiple_of(self.stride) {
                self.points.push(r.clone());
            }
        }
        self.seen += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, wall_ms: f64) -> BatchRecord {
        BatchRecord {
            seq,
            rows: 2,
            segments: 10,
            padded_segments: 16,
            flush_reason: FlushReason::BudgetReached,
            queued_at_ms: 5.0 + seq as f64,
            launch_ms: 0.5,
            done_at_ms: 6.0 + seq as f64,
            wall_ms,
            device_ms: None,
            split_depth: 0,
            memory: None,
        }
    }

    #[test]
    fn quantiles_are_within_one_percent_and_merge_exactly() {
        let mut whole = LogHistogram::default();
        let mut halves = [LogHistogram::default(), LogHistogram::default()];
        for i in 1..=10_000u32 {
            let value = f64::from(i) * 0.37;
            whole.add(value);
            halves[(i % 2) as usize].add(value);
        }
        let [mut merged, other] = halves;
        merged.merge(&other);
        assert_eq!(merged, whole);
        for (q, exact) in [(0.5, 5000.0 * 0.37), (0.9, 9000.0 * 0.37)] {
            let got = whole.quantile(q).unwrap();
            assert!((got / exact - 1.0).abs() <= 0.01, "q{q}: {got} vs {exact}");
        }
        assert_eq!(LogHistogram::default().quantile(0.5), None);
        let mut tiny = LogHistogram::default();
        tiny.add(0.0);
        tiny.add(1e12);
        assert_eq!(tiny.quantile(0.5), Some(0.0));
        assert!(tiny.quantile(1.0).unwrap() > 1e7);
    }

    #[test]
    fn totals_count_every_record_and_keep_the_earliest_queueing() {
        let mut totals = BatchTotals::default();
        for seq in [3, 1, 2] {
            totals.add(&record(seq, 2.0));
        }
        assert_eq!(totals.batches, 3);
        assert_eq!(totals.rows, 6);
        assert_eq!(totals.padded_segments, 48);
        assert_eq!(totals.first_queued_ms, Some(6.0));
        let mut both = totals.clone();
        both.merge_counts(&totals);
        assert_eq!(both.batches, 6);
        assert_eq!(both.wall_ms_histogram.count(), 6);
        assert_eq!(both.first_queued_ms, Some(6.0));
    }

    #[test]
    fn totals_through_json_and_merged_equal_the_records_added_one_by_one() {
        let (mut whole, mut halves) = (BatchTotals::default(), Vec::new());
        for half in [0..40u64, 40..100] {
            let mut totals = BatchTotals::default();
            for seq in half {
                let mut r = record(seq, 0.5 + seq as f64 * 3.1);
                r.device_ms = (seq % 3 == 0).then_some(seq as f64 * 0.7);
                totals.add(&r);
                whole.add(&r);
            }
            halves.push(totals);
        }
        let json = serde_json::to_string(&halves).unwrap();
        // Sparse: far below the 2 x 1,201 numbers of two dense histograms.
        assert!(json.len() < 4096, "{} bytes", json.len());
        let back: Vec<BatchTotals> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, halves);
        let mut merged = BatchTotals::default();
        back.iter().for_each(|t| merged.merge(t));
        assert_eq!(merged.first_queued_ms, whole.first_queued_ms);
        assert_eq!(merged.wall_ms_histogram, whole.wall_ms_histogram);
        assert_eq!(merged.device_ms_histogram, whole.device_ms_histogram);
        assert_eq!(merged.batches, whole.batches);
        assert!((merged.device_ms - whole.device_ms).abs() < 1e-9);
        let bad = r#"{"wall_ms_histogram": [[1201, 1]]}"#;
        let e = serde_json::from_str::<BatchTotals>(bad).unwrap_err();
        assert!(e.to_string().contains("bucket 1201"), "{e}");
    }

    #[test]
    fn a_million_batches_keep_the_summaries_at_their_size() {
        // Eight padded shapes and a reserved peak that settles after
        // warm-up, as a long CUDA night looks: nothing kept per batch.
        let (mut track, mut totals, mut sample) = (
            MemoryTrack::default(),
            BatchTotals::default(),
            PlotSample::default(),
        );
        for seq in 0..1_000_000u64 {
            let mut r = record(seq, 1.0 + (seq % 97) as f64);
            r.padded_segments = 256 << (seq % 8);
            r.memory = Some(MemoryStats {
                allocated: 1,
                allocated_peak: 2,
                reserved: 3,
                reserved_peak: (seq.min(20) as i64) << 21,
                inactive_split: 0,
                alloc_retries: 0,
                ooms: 0,
                device_free: 0,
                device_total: 1 << 40,
            });
            track.add(&r);
            totals.add(&r);
            sample.add(&r);
        }
        assert_eq!((track.batches, totals.batches), (1_000_000, 1_000_000));
        assert_eq!(track.shapes.len(), 8);
        assert_eq!(track.reserved_highs_at.len(), 20);
        assert!(sample.points.len() <= PLOT_POINTS);
        assert_eq!(totals.wall_ms_histogram.counts.len(), HISTOGRAM_BUCKETS + 1);
    }

    #[test]
    fn the_plot_sample_stays_bounded_and_evenly_spaced() {
        let mut sample = PlotSample::default();
        let n = 10 * PLOT_POINTS as u64 + 7;
        for seq in 0..n {
            sample.add(&record(seq, 1.0));
        }
        assert_eq!(sample.seen, n);
        assert!(sample.points.len() <= PLOT_POINTS);
        assert!(sample.points.len() > PLOT_POINTS / 2);
        for (i, point) in sample.points.iter().enumerate() {
            assert_eq!(point.seq, i as u64 * sample.stride);
        }
    }
}
