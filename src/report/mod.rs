//! The run report: `_report.json` with one record per batch and the totals,
//! `_report.svg` plotting them, the short summary a person reads at the end
//! of a run, and the calibration's text.
//!
//! The report is assembled here from what each stage reports when it ends
//! (message types), into the report's own output types: what the JSON says
//! is decided here, not by the stages' structs.

mod calibration;
mod memory;
mod plot;

use std::time::Duration;

use serde::Serialize;

pub use calibration::{describe_calibration, CalibrationReport};
pub use memory::{device_busy_share, memory_summary, peak_rss_bytes, MemorySummary};

use crate::message::{
    BatchRecord, BatchingStrategy, BucketingReport, Calibration, FlushReason, MemoryStats,
    ReaderStats, RejectKind, SkippedFile, WorkerReport, WriterReport,
};

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub input: String,
    pub output: String,
    pub device: String,
    /// `CUDA_VISIBLE_DEVICES` as this process saw it, on CUDA: which GPU of
    /// the host `device` is (`--local-shards` gives each shard its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
    pub model_dtype: String,
    pub input_files: usize,
    /// Rows of the run's input (of this shard's units, for a shard).
    pub rows_in: u64,
    /// Rows predicted, by this attempt and earlier ones.
    pub rows_out: u64,
    /// Rows rejected, by this attempt and earlier ones.
    pub rows_rejected: u64,
    /// Rows earlier attempts had committed, which this one skipped.
    pub rows_resumed: u64,
    /// Attempts at this run (of this shard), this one included.
    pub attempts: u32,
    /// `I/N` when the run is one shard of several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// Input files left out (`on_bad_file = "skip"`), with why.
    pub skipped_files: Vec<SkippedFile>,
    pub batches: u64,
    pub segments: u64,
    pub padded_segments: u64,
    pub oversized_batches: u64,
    pub max_segments: usize,
    /// The budget at the end (lower than `max_segments` after an
    /// out-of-memory); absent for the `rows` strategy, which has none.
    pub final_max_segments: Option<usize>,
    pub size_classes: Vec<usize>,
    pub cudnn_benchmark: bool,
    /// Whether the weights ran channels-last (`[model] channels_last`).
    pub channels_last: bool,
    pub allocator_conf: Option<String>,
    pub oom_events: u64,
    pub oom_rejected_rows: u64,
    pub wall_s: f64,
    /// Seconds from the run's start (before the model loads) to the first
    /// batch being queued: device set-up, model load, the first row groups
    /// read and bucketed. Absent when no batch ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_batch_s: Option<f64>,
    pub rows_per_s: f64,
    pub segments_per_s: f64,
    pub busy_s: StageBusy,
    /// Device time of all batches (CUDA events around each) over the run's
    /// wall time: how busy the GPU was kept. Absent on CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_busy_share: Option<f64>,
    /// The process's peak resident memory (Linux `VmHWM`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// Absent on CPU: there is no device memory to report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySummary>,
    /// Written as the strategy's type name (`SegmentBudget`, `Rows`), as
    /// reports have always named it.
    #[serde(serialize_with = "strategy_name")]
    pub strategy: BatchingStrategy,
    /// Present when `max_segments = "auto"` chose the budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationReport>,
    pub batch_records: Vec<BatchReport>,
}

/// The earliest batch's queueing time, in seconds from the run's start.
fn time_to_first_batch_s(records: &[BatchReport]) -> Option<f64> {
    records
        .iter()
        .map(|r| r.queued_at_ms / 1e3)
        .min_by(f64::total_cmp)
}

fn strategy_name<S: serde::Serializer>(s: &BatchingStrategy, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(match s {
        BatchingStrategy::SegmentBudget => "SegmentBudget",
        BatchingStrategy::Rows => "Rows",
    })
}

/// Seconds each stage spent working (not waiting on its channels), summed
/// over its threads.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageBusy {
    pub readers: f64,
    pub bucketing: f64,
    pub model: f64,
    pub writers: f64,
}

/// One forward pass, as the report writes it.
#[derive(Debug, Clone, Serialize)]
pub struct BatchReport {
    pub seq: u64,
    pub rows: usize,
    pub segments: usize,
    pub padded_segments: usize,
    pub flush_reason: FlushReason,
    /// Milliseconds from the run's start to the host starting to queue it.
    pub queued_at_ms: f64,
    /// Host milliseconds spent queueing it (any wait inside the model's own
    /// host code included).
    pub launch_ms: f64,
    /// Milliseconds from the run's start to its answers on the host.
    pub done_at_ms: f64,
    /// Host wall time from queueing the batch to its answers on the host
    /// (it overlaps the next batch's queueing).
    pub wall_ms: f64,
    /// Device time of the batch; absent on CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_ms: Option<f64>,
    /// 0 for a batch as planned; k for a piece split k times after an out-of-memory.
    pub split_depth: u32,
    /// Absent on CPU (not zero): there is no caching allocator to read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryReport>,
}

/// Device memory after one batch, in bytes; peaks are since the previous batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryReport {
    pub allocated: i64,
    pub allocated_peak: i64,
    pub reserved: i64,
    pub reserved_peak: i64,
    pub inactive_split: i64,
    pub alloc_retries: i64,
    pub ooms: i64,
    pub device_free: i64,
    pub device_total: i64,
}

impl From<&MemoryStats> for MemoryReport {
    fn from(m: &MemoryStats) -> Self {
        Self {
            allocated: m.allocated,
            allocated_peak: m.allocated_peak,
            reserved: m.reserved,
            reserved_peak: m.reserved_peak,
            inactive_split: m.inactive_split,
            alloc_retries: m.alloc_retries,
            ooms: m.ooms,
            device_free: m.device_free,
            device_total: m.device_total,
        }
    }
}

impl From<&BatchRecord> for BatchReport {
    fn from(r: &BatchRecord) -> Self {
        Self {
            seq: r.seq,
            rows: r.rows,
            segments: r.segments,
            padded_segments: r.padded_segments,
            flush_reason: r.flush_reason,
            queued_at_ms: r.queued_at_ms,
            launch_ms: r.launch_ms,
            done_at_ms: r.done_at_ms,
            wall_ms: r.wall_ms,
            device_ms: r.device_ms,
            split_depth: r.split_depth,
            memory: r.memory.as_ref().map(MemoryReport::from),
        }
    }
}

/// What every stage reported when it ended.
#[derive(Debug)]
pub struct StageReports {
    pub readers: Vec<ReaderStats>,
    pub bucketing: BucketingReport,
    pub worker: WorkerReport,
    pub writers: Vec<WriterReport>,
}

impl StageReports {
    /// Rows the writers wrote to part files.
    pub fn rows_out(&self) -> u64 {
        self.writers.iter().map(|w| w.rows).sum()
    }

    /// Rows rejected anywhere (every reject reaches a writer).
    pub fn rows_rejected(&self) -> u64 {
        self.writers.iter().map(|w| w.rejects).sum()
    }

    fn rejected_as(&self, kind: RejectKind) -> u64 {
        self.writers
            .iter()
            .filter_map(|w| w.reject_kinds.get(&kind))
            .sum()
    }

    fn busy(&self) -> StageBusy {
        let secs = Duration::as_secs_f64;
        StageBusy {
            readers: self.readers.iter().map(|r| secs(&r.busy)).sum(),
            bucketing: secs(&self.bucketing.busy),
            model: secs(&self.worker.busy),
            writers: self.writers.iter().map(|w| secs(&w.busy)).sum(),
        }
    }
}

/// How the run was set up, and what the wiring knows at its end.
#[derive(Debug)]
pub struct RunFacts {
    pub input: String,
    pub output: String,
    pub device: String,
    /// Whether the device is a CUDA device (the allocator setting applies).
    pub on_cuda: bool,
    pub model_dtype: String,
    pub input_files: usize,
    pub rows_in: u64,
    pub max_segments: usize,
    pub final_max_segments: Option<usize>,
    pub strategy: BatchingStrategy,
    pub cudnn_benchmark: bool,
    pub channels_last: bool,
    pub allocator_conf: Option<String>,
    pub calibration: Option<Calibration>,
    pub wall_s: f64,
    /// What earlier attempts had committed: (predicted, rejected).
    pub resumed: (u64, u64),
    pub attempts: u32,
    pub shard: Option<String>,
    pub skipped_files: Vec<SkippedFile>,
}

impl RunReport {
    /// The report of a run whose stages all ended.
    pub fn from_stages(facts: RunFacts, stages: &StageReports) -> Self {
        let records: Vec<BatchReport> = stages.worker.batches.iter().map(Into::into).collect();
        let bucketing = &stages.bucketing;
        let wall_s = facts.wall_s;
        Self {
            input: facts.input,
            output: facts.output,
            device: facts.device,
            cuda_visible_devices: facts
                .on_cuda
                .then(|| std::env::var("CUDA_VISIBLE_DEVICES").ok())
                .flatten(),
            model_dtype: facts.model_dtype,
            input_files: facts.input_files,
            rows_in: facts.rows_in,
            rows_out: facts.resumed.0 + stages.rows_out(),
            rows_rejected: facts.resumed.1 + stages.rows_rejected(),
            rows_resumed: facts.resumed.0 + facts.resumed.1,
            attempts: facts.attempts,
            shard: facts.shard,
            skipped_files: facts.skipped_files,
            batches: records.len() as u64,
            segments: bucketing.segments,
            padded_segments: bucketing.padded_segments,
            oversized_batches: bucketing.oversized_batches,
            max_segments: facts.max_segments,
            final_max_segments: facts.final_max_segments,
            size_classes: bucketing.size_classes.clone(),
            cudnn_benchmark: facts.cudnn_benchmark,
            channels_last: facts.channels_last,
            allocator_conf: facts.allocator_conf.filter(|_| facts.on_cuda),
            oom_events: stages.worker.oom_events,
            oom_rejected_rows: stages.rejected_as(RejectKind::OomSingleRow),
            wall_s,
            time_to_first_batch_s: time_to_first_batch_s(&records),
            rows_per_s: stages.rows_out().saturating_add(stages.rows_rejected()) as f64
                / wall_s.max(1e-9),
            segments_per_s: bucketing.segments as f64 / wall_s.max(1e-9),
            busy_s: stages.busy(),
            device_busy_share: device_busy_share(&records, wall_s),
            peak_rss_bytes: peak_rss_bytes(),
            memory: memory_summary(&records),
            strategy: facts.strategy,
            calibration: facts.calibration.as_ref().map(CalibrationReport::from),
            batch_records: records,
        }
    }

    /// `_report.json`'s text.
    pub fn to_json(&self) -> Result<String, ReportError> {
        serde_json::to_string_pretty(self).map_err(ReportError::Json)
    }

    /// `_report.svg`'s text: memory and segments per batch.
    pub fn to_svg(&self) -> Result<String, ReportError> {
        let strategy = match self.strategy {
            BatchingStrategy::SegmentBudget => "SegmentBudget",
            BatchingStrategy::Rows => "Rows",
        };
        let title = format!(
            "segpredict: {} rows, {} batches on {} ({}), strategy {strategy}",
            self.rows_in, self.batches, self.device, self.model_dtype
        );
        plot::svg(&title, &self.batch_records).map_err(ReportError::Plot)
    }

    /// A few lines for the terminal.
    pub fn summary(&self) -> String {
        let mut s = self.totals_lines();
        if let Some(share) = self.device_busy_share {
            s += &format!("GPU busy {:.0}% of the run\n", share * 100.0);
        }
        if let Some(m) = &self.memory {
            s += &format!(
                "GPU memory: peak allocated {} MiB, peak reserved {} MiB, growth events after warm-up {}\n",
                m.peak_allocated_bytes >> 20,
                m.peak_reserved_bytes >> 20,
                m.reserved_growth_events_after_warmup
            );
        }
        if self.oom_events > 0 {
            s += &format!(
                "out-of-memory events {}, budget lowered to {}, rows rejected for memory {}\n",
                self.oom_events,
                self.final_max_segments.unwrap_or(self.max_segments),
                self.oom_rejected_rows
            );
        }
        if let Some(rss) = self.peak_rss_bytes {
            s += &format!("peak host memory (RSS) {} MiB\n", rss >> 20);
        }
        s += &format!("output: {}", self.output);
        s
    }

    /// The summary's first three lines: rows, batches, time.
    fn totals_lines(&self) -> String {
        format!(
            "{} rows in, {} predicted, {} rejected, from {} file(s) on {} ({})\n\
             {} batches, {} segments ({} padding), {}{}\n\
             {:.1} s: {:.0} rows/s, {:.0} segments/s; busy s: readers {:.2}, bucketing {:.2}, model {:.2}, writers {:.2}\n",
            self.rows_in,
            self.rows_out,
            self.rows_rejected,
            self.input_files,
            self.device,
            self.model_dtype,
            self.batches,
            self.segments,
            self.padded_segments.saturating_sub(self.segments),
            self.budget_words(),
            if self.oversized_batches > 0 {
                format!(", {} oversized row(s) ran alone", self.oversized_batches)
            } else {
                String::new()
            },
            self.wall_s,
            self.rows_per_s,
            self.segments_per_s,
            self.busy_s.readers,
            self.busy_s.bucketing,
            self.busy_s.model,
            self.busy_s.writers,
        )
    }

    fn budget_words(&self) -> String {
        match self.strategy {
            BatchingStrategy::Rows => "fixed rows per batch (no segment budget)".to_string(),
            BatchingStrategy::SegmentBudget => format!(
                "budget {} segments",
                self.final_max_segments.unwrap_or(self.max_segments)
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("serialising the run report")]
    Json(#[source] serde_json::Error),
    #[error("drawing the run report's plot")]
    Plot(#[source] plot::PlotError),
}
