//! Device and host memory over a run, from what the model worker kept of
//! its batches (running totals and the memory track, not the records).

use serde::{Deserialize, Serialize};

use segpredict_core::stats::{BatchTotals, MemoryTrack};

/// Device memory over the run's last attempt (one process, one device
/// allocator), from its batches in order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MemorySummary {
    /// The most device memory tensors held at once.
    pub peak_allocated_bytes: i64,
    /// The most device memory the caching allocator reserved at once
    /// (what other processes on the GPU cannot have).
    pub peak_reserved_bytes: i64,
    /// Reserved after the last batch.
    pub final_reserved_bytes: i64,
    /// Batches (after the warm-up) whose reserved peak passed every earlier
    /// batch's: the seed's ratchet, counted.
    pub reserved_growth_events_after_warmup: u64,
    /// The first batches counted as warm-up, whose reserved growth is
    /// expected: up to the last new batch shape, at most a tenth of them.
    pub warmup_batches: usize,
    /// Times the allocator freed its cache and retried an allocation, as
    /// the allocator counts them at the end (a sign the budget is tight).
    pub alloc_retries: i64,
    /// Out-of-memory errors, as the allocator counts them at the end.
    pub ooms: i64,
}

/// The process's peak resident set size so far, from `/proc/self/status`.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Summed device time of the batches over `wall_s`; `None` when no batch
/// was timed on a device.
pub fn device_busy_share(batches: &BatchTotals, wall_s: f64) -> Option<f64> {
    if batches.device_ms_histogram.count() == 0 || wall_s <= 0.0 {
        return None;
    }
    Some(batches.device_ms / 1e3 / wall_s)
}

/// Batches of warm-up: the first batch of each distinct shape may reserve.
pub fn warmup_batches(track: &MemoryTrack) -> usize {
    let batches = track.batches as usize;
    // With few shapes warm-up ends after each has been seen once; with many
    // (no padding) it is capped so the ratchet still shows.
    (track.last_new_shape as usize)
        .min(batches / 10)
        .max(1.min(batches))
}

/// Summarises an attempt's device memory; `None` when no batch had memory
/// statistics.
pub fn memory_summary(track: &MemoryTrack) -> Option<MemorySummary> {
    let last = track.last?;
    let warmup = warmup_batches(track);
    let growth = track
        .reserved_highs_at
        .iter()
        .filter(|&&i| i >= warmup as u64)
        .count() as u64;
    Some(MemorySummary {
        peak_allocated_bytes: track.peak_allocated,
        peak_reserved_bytes: track.peak_reserved,
        final_reserved_bytes: last.reserved,
        reserved_growth_events_after_warmup: growth,
        warmup_batches: warmup,
        alloc_retries: last.alloc_retries,
        ooms: last.ooms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use segpredict_core::message::{BatchRecord, FlushReason, MemoryStats};

    const MIB: i64 = 1 << 20;

    fn record(padded_segments: usize, reserved_peak_mib: Option<i64>) -> BatchRecord {
        BatchRecord {
            seq: 0,
            rows: 1,
            segments: padded_segments,
            padded_segments,
            flush_reason: FlushReason::BudgetReached,
            queued_at_ms: 0.0,
            launch_ms: 1.0,
            done_at_ms: 1.0,
            wall_ms: 1.0,
            device_ms: reserved_peak_mib.map(|_| 2.0),
            split_depth: 0,
            memory: reserved_peak_mib.map(|mib| MemoryStats {
                allocated: mib * MIB / 2,
                allocated_peak: mib * MIB - 1,
                reserved: mib * MIB,
                reserved_peak: mib * MIB,
                inactive_split: 0,
                alloc_retries: 1,
                ooms: 0,
                device_free: 0,
                device_total: 80 << 30,
            }),
        }
    }

    fn tracked(records: &[BatchRecord]) -> (MemoryTrack, BatchTotals) {
        let (mut track, mut totals) = (MemoryTrack::default(), BatchTotals::default());
        for r in records {
            track.add(r);
            totals.add(r);
        }
        (track, totals)
    }

    #[test]
    fn no_memory_summary_on_cpu() {
        let (track, totals) = tracked(&[record(256, None), record(512, None)]);
        assert_eq!(memory_summary(&track), None);
        assert_eq!(device_busy_share(&totals, 1.0), None);
    }

    #[test]
    fn growth_after_warm_up_is_counted_once_per_new_high() {
        // Two shapes, each seen by batch 2: warm-up is capped at a tenth of
        // the run (2 of 20 batches); later new highs are the ratchet.
        let mut records: Vec<_> = (0..20).map(|_| record(512, Some(100))).collect();
        records[0] = record(256, Some(50));
        records[1] = record(512, Some(100));
        records[7] = record(512, Some(120));
        records[8] = record(512, Some(110));
        records[15] = record(512, Some(130));
        let summary = memory_summary(&tracked(&records).0).expect("CUDA records");
        assert_eq!(summary.warmup_batches, 2);
        assert_eq!(summary.reserved_growth_events_after_warmup, 2);
        assert_eq!(summary.peak_reserved_bytes, 130 * MIB);
        assert_eq!(summary.peak_allocated_bytes, 130 * MIB - 1);
        assert_eq!(summary.final_reserved_bytes, 100 * MIB);
        assert_eq!(summary.alloc_retries, 1);
    }

    #[test]
    fn flat_memory_has_no_growth_events() {
        let records: Vec<_> = (0..50).map(|i| record(256 << (i % 3), Some(100))).collect();
        let (track, _) = tracked(&records);
        let summary = memory_summary(&track).expect("CUDA records");
        assert_eq!(summary.reserved_growth_events_after_warmup, 0);
        assert_eq!(summary.warmup_batches, 3);
        // One entry per new high, not per batch: the track stays small.
        assert_eq!(track.reserved_highs_at, [0]);
    }

    #[test]
    fn device_busy_share_is_device_time_over_wall_time() {
        let (_, totals) = tracked(&[record(256, Some(10)), record(256, Some(10))]);
        // 2 batches x 2 ms of device time over 8 ms of wall time.
        let share = device_busy_share(&totals, 0.008).unwrap();
        assert!((share - 0.5).abs() < 1e-9, "{share}");
    }
}
