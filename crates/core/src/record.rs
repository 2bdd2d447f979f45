//! What the model worker measured of one batch: the record the writers put
//! in the batch files, why the batch was made, and device memory after it.
//! `message` carries these (re-exported there) and `stats` sums them; they
//! live apart so the two modules do not import each other.

use serde::Serialize;

/// Why a batch left its bucket, or how the model worker made it; the
/// report's `flush_reason` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushReason {
    /// The bucket hit the segment budget, or the next row would have passed it.
    BudgetReached,
    /// The bucket hit `max_rows`.
    RowCapReached,
    /// Too many rows were held overall; the bucket with the most segments left early.
    MemoryBound,
    /// Input ended; whatever was held left.
    EndOfInput,
    /// A single row over the budget, sent alone.
    Oversized,
    /// Half of a batch split after an out-of-memory.
    OomSplit,
    /// A lone row retried without its padding after an out-of-memory.
    OomUnpadded,
    /// A synthetic batch measuring memory (`max_segments = "auto"`).
    Calibration,
}

impl FlushReason {
    /// The reason's snake_case name, as batch files and reports store it;
    /// [`Self::parse`] reads it back.
    pub fn as_str(self) -> &'static str {
        match self {
            FlushReason::BudgetReached => "budget_reached",
            FlushReason::RowCapReached => "row_cap_reached",
            FlushReason::MemoryBound => "memory_bound",
            FlushReason::EndOfInput => "end_of_input",
            FlushReason::Oversized => "oversized",
            FlushReason::OomSplit => "oom_split",
            FlushReason::OomUnpadded => "oom_unpadded",
            FlushReason::Calibration => "calibration",
        }
    }

    /// The reason [`Self::as_str`] names, as batch files store it.
    pub fn parse(name: &str) -> Option<Self> {
        [
            FlushReason::BudgetReached,
            FlushReason::RowCapReached,
            FlushReason::MemoryBound,
            FlushReason::EndOfInput,
            FlushReason::Oversized,
            FlushReason::OomSplit,
            FlushReason::OomUnpadded,
            FlushReason::Calibration,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }
}

/// Device memory after one batch, in bytes; peaks are since the previous batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes the caching allocator has handed to live tensors now.
    pub allocated: i64,
    /// The most bytes handed to live tensors since the previous batch.
    pub allocated_peak: i64,
    /// Bytes the caching allocator holds from the device now, in use or
    /// cached: what other processes cannot have.
    pub reserved: i64,
    /// The most bytes reserved since the previous batch: the figure a
    /// memory target (`gpu_memory`) is held to.
    pub reserved_peak: i64,
    /// Bytes of cached blocks that were split and are now free:
    /// fragmentation the allocator cannot hand out whole.
    pub inactive_split: i64,
    /// How many times, since the process started, an allocation failed at
    /// first and succeeded after the cache was freed (a near miss).
    pub alloc_retries: i64,
    /// How many allocations, since the process started, failed with out of
    /// memory.
    pub ooms: i64,
    /// Free device memory as the driver reports it (all processes).
    pub device_free: i64,
    /// The device's total memory.
    pub device_total: i64,
}

/// What the model worker measured of one forward pass. Records are not
/// kept: each goes to the writers' batch files (`_segpredict/batches.parquet` once
/// the run is committed), and the worker keeps only their sums (`stats`:
/// `BatchTotals`, `MemoryTrack` and a `PlotSample`).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRecord {
    /// The sequence number the bucketing stage gave the batch in this
    /// attempt, from 0 ([`crate::message::Batch::seq`]).
    pub seq: u64,
    /// Input rows in the batch.
    pub rows: usize,
    /// Real segments: the rows' segments summed.
    pub segments: usize,
    /// Segments the model processed: `segments` plus padding up to the
    /// size class.
    pub padded_segments: usize,
    /// Why bucketing let the batch go (or why the worker made it).
    pub flush_reason: FlushReason,
    /// Milliseconds from the run's start to the host starting to queue the
    /// batch; the first batch's is the run's start-up.
    pub queued_at_ms: f64,
    /// Host milliseconds spent queueing the batch (statistics reset, upload,
    /// the model's own host work and any synchronisation inside it).
    pub launch_ms: f64,
    /// Milliseconds from the run's start to the batch's answers on the host.
    pub done_at_ms: f64,
    /// Host wall time from queueing the batch to its answers on the host
    /// (it overlaps the next batch's queueing).
    pub wall_ms: f64,
    /// Device time from the batch's first queued operation to its answers
    /// reaching the host; `None` on CPU.
    pub device_ms: Option<f64>,
    /// 0 for a batch as planned; k for a piece split k times after an out-of-memory.
    pub split_depth: u32,
    /// `None` on CPU (not zero): there is no caching allocator to read.
    pub memory: Option<MemoryStats>,
}
