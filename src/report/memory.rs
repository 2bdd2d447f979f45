//! Device and host memory over a run, from the per-batch records.

use serde::Serialize;

use super::BatchReport;

/// Device memory over the whole run, from the per-batch records.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemorySummary {
    pub peak_allocated_bytes: i64,
    pub peak_reserved_bytes: i64,
    pub final_reserved_bytes: i64,
    /// Batches (after the warm-up) whose reserved peak passed every earlier
    /// batch's: the seed's ratchet, counted.
    pub reserved_growth_events_after_warmup: u64,
    pub warmup_batches: usize,
    pub alloc_retries: i64,
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
pub fn device_busy_share(records: &[BatchReport], wall_s: f64) -> Option<f64> {
    let times: Vec<f64> = records.iter().filter_map(|r| r.device_ms).collect();
    if times.is_empty() || wall_s <= 0.0 {
        return None;
    }
    Some(times.iter().sum::<f64>() / 1e3 / wall_s)
}

/// Batches of warm-up: the first batch of each distinct shape may reserve.
pub fn warmup_batches(records: &[BatchReport]) -> usize {
    let mut seen = std::collections::HashSet::new();
    let mut last_new = 0;
    for (i, r) in records.iter().enumerate() {
        if seen.insert(r.padded_segments) {
            last_new = i + 1;
        }
    }
    // With few shapes warm-up ends after each has been seen once; with many
    // (no padding) it is capped so the ratchet still shows.
    last_new.min(records.len() / 10).max(1.min(records.len()))
}

/// Summarises memory over the run; `None` when no batch has memory stats.
pub fn memory_summary(records: &[BatchReport]) -> Option<MemorySummary> {
    let with_memory: Vec<_> = records.iter().filter_map(|r| r.memory).collect();
    let last = with_memory.last()?;
    let warmup = warmup_batches(records);
    let mut high_water = 0i64;
    let mut growth = 0u64;
    for (i, m) in with_memory.iter().enumerate() {
        if m.reserved_peak > high_water {
            if i >= warmup {
                growth += 1;
            }
            high_water = m.reserved_peak;
        }
    }
    Some(MemorySummary {
        peak_allocated_bytes: with_memory
            .iter()
            .map(|m| m.allocated_peak)
            .max()
            .unwrap_or(0),
        peak_reserved_bytes: high_water,
        final_reserved_bytes: last.reserved,
        reserved_growth_events_after_warmup: growth,
        warmup_batches: warmup,
        alloc_retries: last.alloc_retries,
        ooms: last.ooms,
    })
}
