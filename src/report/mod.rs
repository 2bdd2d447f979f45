//! The run report: `_report.json` with one record per batch and the totals,
//! `_report.svg` plotting them, and the short summary a person reads at the
//! end of a run.

mod plot;

use std::path::Path;

use serde::Serialize;

use crate::worker::calibrate::Calibration;
use crate::worker::BatchRecord;

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub input: String,
    pub output: String,
    pub device: String,
    pub model_dtype: String,
    pub input_files: usize,
    pub rows_in: u64,
    pub rows_out: u64,
    pub rows_rejected: u64,
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
    pub strategy: String,
    /// Present when `max_segments = "auto"` chose the budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    pub batch_records: Vec<BatchRecord>,
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

/// A device as users write it: `cpu`, `cuda:0`.
pub fn device_name(device: tch::Device) -> String {
    match device {
        tch::Device::Cpu => "cpu".into(),
        tch::Device::Cuda(index) => format!("cuda:{index}"),
        tch::Device::Mps => "mps".into(),
        tch::Device::Vulkan => "vulkan".into(),
    }
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
pub fn device_busy_share(records: &[BatchRecord], wall_s: f64) -> Option<f64> {
    let times: Vec<f64> = records.iter().filter_map(|r| r.device_ms).collect();
    if times.is_empty() || wall_s <= 0.0 {
        return None;
    }
    Some(times.iter().sum::<f64>() / 1e3 / wall_s)
}

/// Batches of warm-up: the first batch of each distinct shape may reserve.
pub fn warmup_batches(records: &[BatchRecord]) -> usize {
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
pub fn memory_summary(records: &[BatchRecord]) -> Option<MemorySummary> {
    let with_memory: Vec<_> = records
        .iter()
        .filter_map(|r| r.memory.map(|m| (r, m)))
        .collect();
    let last = with_memory.last()?.1;
    let warmup = warmup_batches(records);
    let mut high_water = 0i64;
    let mut growth = 0u64;
    for (i, (_, m)) in with_memory.iter().enumerate() {
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
            .map(|(_, m)| m.allocated_peak)
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

impl RunReport {
    pub fn write_json(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        let temp = dir.join("._report.json.inprogress");
        std::fs::write(&temp, text)?;
        std::fs::rename(temp, dir.join("_report.json"))
    }

    /// Writes `_report.svg`: memory and segments per batch.
    pub fn write_svg(&self, dir: &Path) -> Result<(), String> {
        let temp = dir.join("._report.svg.inprogress");
        let title = format!(
            "segpredict: {} rows, {} batches on {} ({}), strategy {}",
            self.rows_in, self.batches, self.device, self.model_dtype, self.strategy
        );
        plot::write_svg(&temp, &title, &self.batch_records)?;
        std::fs::rename(temp, dir.join("_report.svg")).map_err(|e| e.to_string())
    }

    /// A few lines for the terminal.
    pub fn summary(&self) -> String {
        let mut s = format!(
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
            if self.strategy == "Rows" {
                "fixed rows per batch (no segment budget)".to_string()
            } else {
                format!("budget {} segments", self.final_max_segments.unwrap_or(self.max_segments))
            },
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
        );
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
}
