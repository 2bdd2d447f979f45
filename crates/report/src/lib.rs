//! The run report: `_report.json` with the totals (over every attempt) and
//! per-batch statistics, pointing to `_segpredict/batches.parquet` for the records
//! themselves (streamed to disk by the writers, never held), `_report.svg`
//! plotting a bounded sample of them, the short summary a person reads at
//! the end of a run, and the calibration's text.
//!
//! The report is assembled here from what each stage reports when it ends
//! (message types), into the report's own output types: what the JSON says
//! is decided here, not by the stages' structs.

mod calibration;
mod memory;
mod plot;

use segpredict_core::exit::{Classify, Failure};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use calibration::{describe_calibration, CalibrationReport};
pub use memory::{device_busy_share, memory_summary, peak_rss_bytes, MemorySummary};

use segpredict_core::accounting::RowCounts;
use segpredict_core::message::{
    BatchingStrategy, BucketingReport, Calibration, ReaderStats, RejectKind, SkippedFile,
    WorkerReport, WriterReport,
};
use segpredict_core::requests::StoreRequests;
use segpredict_core::stats::{BatchTotals, PlotSample};

/// Everything a run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Rows of the run's input (of this shard's units, for a shard),
    /// predicted and rejected by this attempt and earlier ones, and those
    /// earlier attempts had committed (written flat: `rows_in`, ...).
    #[serde(flatten)]
    pub rows: RowCounts,
    /// Attempts at this run (of this shard), this one included.
    pub attempts: u32,
    /// `I/N` when the run is one shard of several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// Input files left out (`on_bad_file = "skip"`), with why.
    pub skipped_files: Vec<SkippedFile>,
    /// Forward passes, by this attempt and earlier ones (the pieces of a
    /// batch split after an out-of-memory count one each).
    pub batches: u64,
    /// Segments of those forward passes, without and with padding.
    pub segments: u64,
    pub padded_segments: u64,
    /// Forward passes of one row over the budget, run alone.
    pub oversized_batches: u64,
    /// Per-batch times over every attempt; absent when no batch ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_ms: Option<BatchTimes>,
    pub max_segments: usize,
    /// The budget at the end (lower than `max_segments` after an
    /// out-of-memory); absent for the `rows` strategy, which has none.
    pub final_max_segments: Option<usize>,
    pub size_classes: Vec<usize>,
    /// Which model of a size-class bundle ran each segment total's batches
    /// (`ModelPath`); absent for any other model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_paths: Vec<segpredict_core::message::ModelPath>,
    pub cudnn_benchmark: bool,
    /// Whether the weights ran channels-last (`[model] channels_last`).
    pub channels_last: bool,
    pub allocator_conf: Option<String>,
    pub oom_events: u64,
    pub oom_rejected_rows: u64,
    /// Seconds this attempt ran.
    pub wall_s: f64,
    /// Seconds from this attempt's start (before the model loads) to its
    /// first batch being queued: the later of the model being ready and the
    /// first batch's rows read and bucketed (the readers start with the
    /// model's loading). Absent when no batch ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_batch_s: Option<f64>,
    /// Seconds of that start-up spent warming the size classes (on CUDA,
    /// padded, `[model] warm_size_classes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_up_s: Option<f64>,
    /// Seconds from this attempt's start to the model being ready: device
    /// set-up, model load, the start-up probe, calibration and warm-up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_ready_s: Option<f64>,
    pub rows_per_s: f64,
    pub segments_per_s: f64,
    pub busy_s: StageBusy,
    /// The readers' cost per segment read, in microseconds of decode-pool
    /// CPU time (each thread's `CLOCK_THREAD_CPUTIME_ID`, not its wall
    /// time): how many cores decoding takes at a given rate (an
    /// encoded image costs its decode and resize). Absent when no segment
    /// was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_us_per_segment: Option<f64>,
    /// Device time of this attempt's batches (CUDA events around each) over
    /// its wall time: how busy the GPU was kept. Absent on CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_busy_share: Option<f64>,
    /// The process's peak resident memory (Linux `VmHWM`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// Requests to object storage, failed ones (retried) included; absent
    /// when input and output are local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_requests: Option<StoreRequests>,
    /// Absent on CPU: there is no device memory to report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySummary>,
    /// Written as the strategy's type name (`SegmentBudget`, `Rows`), as
    /// reports have always named it.
    #[serde(
        serialize_with = "strategy_name",
        deserialize_with = "strategy_from_name"
    )]
    pub strategy: BatchingStrategy,
    /// Present when `max_segments = "auto"` chose the budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationReport>,
    /// Where the per-batch records of every attempt (and shard) are, in
    /// the output directory, once the run is committed: one row each.
    pub batches_file: String,
    /// What `_report.svg` draws: a bounded sample of this attempt's batches.
    #[serde(skip)]
    pub plot: PlotSample,
}

/// The median and 90th percentile of the batches' host wall time (queued
/// to answers on the host) and device time, in ms, read from logarithmic
/// histograms (`message::LogHistogram`): within 1% of the exact values,
/// in fixed memory however many batches ran.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BatchTimes {
    pub wall_median: f64,
    pub wall_p90: f64,
    /// Absent on CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_median: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_p90: Option<f64>,
}

impl BatchTimes {
    fn of(totals: &BatchTotals) -> Option<Self> {
        let (wall, device) = (&totals.wall_ms_histogram, &totals.device_ms_histogram);
        Some(Self {
            wall_median: wall.quantile(0.5)?,
            wall_p90: wall.quantile(0.9)?,
            device_median: device.quantile(0.5),
            device_p90: device.quantile(0.9),
        })
    }
}

fn strategy_name<S: serde::Serializer>(s: &BatchingStrategy, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(match s {
        BatchingStrategy::SegmentBudget => "SegmentBudget",
        BatchingStrategy::Rows => "Rows",
    })
}

fn strategy_from_name<'de, D: serde::Deserializer<'de>>(
    input: D,
) -> Result<BatchingStrategy, D::Error> {
    match String::deserialize(input)?.as_str() {
        "SegmentBudget" => Ok(BatchingStrategy::SegmentBudget),
        "Rows" => Ok(BatchingStrategy::Rows),
        other => Err(serde::de::Error::unknown_variant(
            other,
            &["SegmentBudget", "Rows"],
        )),
    }
}

/// The strategy as a pipeline file writes it (`segment_budget`, `rows`).
fn strategy_as_written(s: BatchingStrategy) -> &'static str {
    match s {
        BatchingStrategy::SegmentBudget => "segment_budget",
        BatchingStrategy::Rows => "rows",
    }
}

/// Seconds each stage spent working (not waiting on its channels), summed
/// over its threads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StageBusy {
    pub readers: f64,
    /// The decode pool's CPU time (summed over its threads), within the
    /// readers' time: Arrow values to segment bytes, images decoded and
    /// resized.
    pub decode: f64,
    pub bucketing: f64,
    pub model: f64,
    pub writers: f64,
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

    fn decode_us_per_segment(&self) -> Option<f64> {
        let segments: u64 = self.readers.iter().map(|r| r.segments).sum();
        let busy: Duration = self.readers.iter().map(|r| r.decode_busy).sum();
        (segments > 0).then(|| busy.as_secs_f64() * 1e6 / segments as f64)
    }

    fn busy(&self) -> StageBusy {
        let secs = Duration::as_secs_f64;
        StageBusy {
            readers: self.readers.iter().map(|r| secs(&r.busy)).sum(),
            decode: self.readers.iter().map(|r| secs(&r.decode_busy)).sum(),
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
    /// The batches of this shard's earlier attempts, read back from their
    /// committed batch files.
    pub earlier_batches: BatchTotals,
    /// The batch records' file, relative to the output
    /// (`_segpredict/batches.parquet`).
    pub batches_file: String,
    /// Seconds spent warming the size classes before the first row (CUDA,
    /// padded, `[model] warm_size_classes`).
    pub warm_up_s: Option<f64>,
    /// Seconds from the attempt's start to the model being ready.
    pub model_ready_s: Option<f64>,
    /// Requests to object storage so far (`None` when nothing is remote).
    pub store_requests: Option<StoreRequests>,
}

impl RunReport {
    /// The report of a run whose stages all ended.
    pub fn from_stages(facts: RunFacts, stages: &StageReports) -> Self {
        let worker = &stages.worker;
        let mut batches = facts.earlier_batches.clone();
        batches.merge_counts(&worker.batches);
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
            rows: RowCounts {
                rows_in: facts.rows_in,
                rows_out: facts.resumed.0 + stages.rows_out(),
                rows_rejected: facts.resumed.1 + stages.rows_rejected(),
                rows_resumed: facts.resumed.0 + facts.resumed.1,
            },
            attempts: facts.attempts,
            shard: facts.shard,
            skipped_files: facts.skipped_files,
            batches: batches.batches,
            segments: batches.segments,
            padded_segments: batches.padded_segments,
            oversized_batches: batches.oversized,
            batch_ms: BatchTimes::of(&batches),
            max_segments: facts.max_segments,
            final_max_segments: facts.final_max_segments,
            size_classes: stages.bucketing.size_classes.clone(),
            model_paths: worker.model_paths.clone(),
            cudnn_benchmark: facts.cudnn_benchmark,
            channels_last: facts.channels_last,
            allocator_conf: facts.allocator_conf.filter(|_| facts.on_cuda),
            oom_events: worker.oom_events,
            oom_rejected_rows: stages.rejected_as(RejectKind::OomSingleRow),
            wall_s,
            time_to_first_batch_s: worker.batches.first_queued_ms.map(|ms| ms / 1e3),
            warm_up_s: facts.warm_up_s,
            model_ready_s: facts.model_ready_s,
            rows_per_s: stages.rows_out().saturating_add(stages.rows_rejected()) as f64
                / wall_s.max(1e-9),
            segments_per_s: worker.batches.segments as f64 / wall_s.max(1e-9),
            busy_s: stages.busy(),
            decode_us_per_segment: stages.decode_us_per_segment(),
            device_busy_share: device_busy_share(&worker.batches, wall_s),
            peak_rss_bytes: peak_rss_bytes(),
            store_requests: facts.store_requests,
            memory: memory_summary(&worker.memory),
            strategy: facts.strategy,
            calibration: facts.calibration.as_ref().map(CalibrationReport::from),
            batches_file: facts.batches_file,
            plot: worker.plot.clone(),
        }
    }

    /// `_report.json`'s text.
    pub fn to_json(&self) -> Result<String, ReportError> {
        serde_json::to_string_pretty(self).map_err(ReportError::Json)
    }

    /// `_report.svg`'s text: memory and segments per batch.
    pub fn to_svg(&self) -> Result<String, ReportError> {
        let title = format!(
            "segpredict: {} rows, {} batches on {} ({}), strategy {}",
            self.rows.rows_in,
            self.batches,
            self.device,
            self.model_dtype,
            strategy_as_written(self.strategy)
        );
        plot::svg(&title, &self.plot).map_err(ReportError::Plot)
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
        if let Some(us) = self.decode_us_per_segment {
            s += &format!(
                "readers: {us:.2} us of decode-pool CPU a segment ({:.2} s in all)\n",
                self.busy_s.decode
            );
        }
        if let Some(rss) = self.peak_rss_bytes {
            s += &format!("peak host memory (RSS) {} MiB\n", rss >> 20);
        }
        if let Some(r) = &self.store_requests {
            s += &format!(
                "object storage: {} requests, {} failed and retried, {:.1} MiB read, {:.1} MiB written\n",
                r.requests,
                r.failed,
                r.bytes_read as f64 / 1048576.0,
                r.bytes_written as f64 / 1048576.0
            );
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
            self.rows.rows_in,
            self.rows.rows_out,
            self.rows.rows_rejected,
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

/// Our own data that does not serialise or draw does the same on a retry.
impl Classify for ReportError {
    fn failure(&self) -> Failure {
        match self {
            ReportError::Json(_) | ReportError::Plot(_) => Failure::Permanent,
        }
    }
}
