//! Calibration: choose the segment budget from a device-memory target.
//!
//! Peak reserved memory of a conv model grows about linearly with the
//! segments in a batch. So run the real model on synthetic batches at a few
//! segment totals, fit `reserved = intercept + slope * segments`, and take
//! the largest budget whose predicted peak stays under the target; then run
//! that budget once and shrink it while the measured peak is over.

use super::{alloc, Worker, WorkerError};
use segpredict_core::exit::{Classify, Failure};
use segpredict_core::message::{
    Batch, BatchExtra, Calibration, CalibrationPoint, ExtraSpec, FlushReason, InputSpec, LinearFit,
    RowMeta,
};

/// Segments per synthetic row: the sample's median, so per-row work is typical.
pub(super) const SEGMENTS_PER_ROW: usize = 18;
/// Budgets are multiples of this, so padded shapes stay tidy.
const BUDGET_QUANTUM: usize = 64;
/// No budget above this is tried, whatever the target.
const MAX_TRIED_SEGMENTS: usize = 1 << 20;

/// Why the segment budget could not be calibrated.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CalibrationError {
    /// Calibration measures the CUDA allocator; a CPU has none to measure.
    #[error("calibration needs a CUDA device; on CPU set max_segments to a number")]
    NotCuda,
    /// The memory target (`gpu_memory`, `--gpu-memory`) does not parse;
    /// holds the text given.
    #[error("cannot read memory size `{0}` (use e.g. 20GiB, 512MiB, 8GB)")]
    BadSize(String),
    /// `max_segments = "auto"` without a memory target to calibrate for.
    #[error("max_segments = \"auto\" needs gpu_memory in [bucketing] (or --gpu-memory)")]
    NoTarget,
    /// Fewer than two points were measured (holds how many), so no line
    /// can be fitted.
    #[error("need at least two measured points to fit, got {0}")]
    TooFewPoints(usize),
    /// The smallest batch measured already reserves more than the target.
    #[error(
        "the model needs {needed} MiB already at {segments} segments, over the {target} MiB target"
    )]
    TargetTooSmall {
        /// Peak reserved at that batch, MiB.
        needed: i64,
        /// The batch's segments.
        segments: usize,
        /// The target, MiB.
        target: u64,
    },
}

/// Settings and a target the model does not fit: the same on every try.
impl Classify for CalibrationError {
    fn failure(&self) -> Failure {
        Failure::Permanent
    }
}

/// Parses `20GiB`, `512MiB`, `8GB`, `1.5GiB` or a plain byte count.
pub fn parse_size(text: &str) -> Result<u64, CalibrationError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| CalibrationError::BadSize(text.into()))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => return Err(CalibrationError::BadSize(text.into())),
    };
    Ok((value * scale) as u64)
}

/// Least squares through the points.
pub fn fit_line(points: &[CalibrationPoint]) -> Result<LinearFit, CalibrationError> {
    if points.len() < 2 {
        return Err(CalibrationError::TooFewPoints(points.len()));
    }
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.segments as f64).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.peak_reserved as f64).sum::<f64>() / n;
    let sxx: f64 = points
        .iter()
        .map(|p| (p.segments as f64 - mean_x).powi(2))
        .sum();
    let sxy: f64 = points
        .iter()
        .map(|p| (p.segments as f64 - mean_x) * (p.peak_reserved as f64 - mean_y))
        .sum();
    let slope = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
    Ok(LinearFit {
        intercept: mean_y - slope * mean_x,
        slope,
    })
}

/// The largest budget (a multiple of the quantum, at least one quantum)
/// whose predicted peak stays under the target.
pub fn budget_for_target(fit: &LinearFit, target_bytes: u64) -> usize {
    let room = target_bytes as f64 - fit.intercept;
    let raw = if fit.slope > 0.0 {
        room / fit.slope
    } else {
        MAX_TRIED_SEGMENTS as f64
    };
    let raw = raw.clamp(0.0, MAX_TRIED_SEGMENTS as f64) as usize;
    (raw / BUDGET_QUANTUM * BUDGET_QUANTUM).max(BUDGET_QUANTUM)
}

/// The segment totals measured: doubling from 256, up to `limit`, while the
/// fit so far predicts the next one under about twice the target.
fn next_total(points: &[CalibrationPoint], target_bytes: u64, limit: usize) -> Option<usize> {
    let last = points.last().map_or(128, |p| p.segments);
    let next = last * 2;
    if next > limit {
        return None;
    }
    let over = points
        .last()
        .is_some_and(|p| p.peak_reserved as f64 > target_bytes as f64 * 1.2);
    (!over).then_some(next)
}

impl Worker {
    /// Measures the model on `device` and picks the budget for `target_bytes`;
    /// `size_classes_for` gives the classes for a budget (the bucketing
    /// stage's ladder, passed in by the caller that wires the stages).
    pub fn calibrate(
        &self,
        target_bytes: u64,
        size_classes_for: fn(usize) -> Vec<usize>,
    ) -> Result<Calibration, WorkerError> {
        let cuda_index = self
            .cuda_index()
            .ok_or(WorkerError::Calibration(CalibrationError::NotCuda))?;
        let inputs = &self.inputs;
        let _no_grad = tch::no_grad_guard();
        // A model bounded below the largest total tried is never run past it.
        let limit = self.max_segments().map_or(MAX_TRIED_SEGMENTS, |m| {
            (m.min(MAX_TRIED_SEGMENTS) / BUDGET_QUANTUM * BUDGET_QUANTUM).max(BUDGET_QUANTUM)
        });
        let mut points = Vec::new();
        while let Some(total) = next_total(&points, target_bytes, limit) {
            match self.measure(inputs, total, cuda_index)? {
                Some(point) => points.push(point),
                None => break,
            }
        }
        if let Some(first) = points.first() {
            if first.peak_reserved as u64 > target_bytes {
                return Err(WorkerError::Calibration(CalibrationError::TargetTooSmall {
                    needed: first.peak_reserved >> 20,
                    segments: first.segments,
                    target: target_bytes >> 20,
                }));
            }
        }
        // Fit the upper points: small batches are dominated by fixed costs.
        let upper: Vec<_> = points
            .iter()
            .copied()
            .filter(|p| p.segments >= 1024)
            .collect();
        let fit_points = if upper.len() >= 2 { &upper } else { &points };
        let fit = fit_line(fit_points).map_err(WorkerError::Calibration)?;
        let (max_segments, measured) = self.fit_budget(
            budget_for_target(&fit, target_bytes).min(limit),
            target_bytes,
            cuda_index,
        )?;
        alloc::empty_cache()?;
        Ok(Calibration {
            target_bytes,
            points,
            fit,
            max_segments,
            size_classes: size_classes_for(max_segments),
            measured_peak_reserved: measured.map_or(-1, |p| p.peak_reserved),
        })
    }

    /// The line is an estimate: measure the budget it gives and shrink it
    /// while the real peak is over target (a few tries). Returns the budget
    /// and its measurement (`None`: still out of memory).
    fn fit_budget(
        &self,
        mut max_segments: usize,
        target_bytes: u64,
        cuda_index: usize,
    ) -> Result<(usize, Option<CalibrationPoint>), WorkerError> {
        let quantised =
            |segments: usize| (segments / BUDGET_QUANTUM * BUDGET_QUANTUM).max(BUDGET_QUANTUM);
        let mut measured = self.measure(&self.inputs, max_segments, cuda_index)?;
        for _ in 0..4 {
            max_segments = match measured {
                Some(p) if p.peak_reserved as u64 <= target_bytes => break,
                Some(p) => {
                    let shrink = target_bytes as f64 / p.peak_reserved as f64 * 0.98;
                    quantised((max_segments as f64 * shrink) as usize)
                }
                None => quantised(max_segments / 2),
            };
            measured = self.measure(&self.inputs, max_segments, cuda_index)?;
        }
        Ok((max_segments, measured))
    }

    /// Peak memory of two forward passes over `total` segments, from an empty
    /// cache; `None` when the device runs out of memory.
    fn measure(
        &self,
        inputs: &InputSpec,
        total: usize,
        cuda_index: usize,
    ) -> Result<Option<CalibrationPoint>, WorkerError> {
        alloc::empty_cache()?;
        alloc::reset_peaks(cuda_index)?;
        let batch = synthetic_batch(inputs, total);
        for _ in 0..2 {
            match self.forward(&batch).and_then(|launched| launched.wait()) {
                Ok(_) => {}
                Err(e) if e.is_out_of_memory() => return Ok(None),
                Err(source) => {
                    return Err(WorkerError::Forward {
                        seq: 0,
                        rows: batch.rows.len(),
                        segments: total,
                        source,
                    })
                }
            }
        }
        let stats = alloc::stats(cuda_index)?;
        Ok(stats.map(|m| CalibrationPoint {
            segments: total,
            peak_reserved: m.reserved_peak,
            peak_allocated: m.allocated_peak,
        }))
    }
}

/// A batch of `total` segments in rows of about the median size, with every
/// extra input present, as the pipeline's columns describe them.
pub fn synthetic_batch(inputs: &InputSpec, total: usize) -> Batch {
    synthetic_batch_of_rows(inputs, total, total.div_ceil(SEGMENTS_PER_ROW), 2)
}

/// A batch of `total` segments over `n_rows` rows (at least one, at most
/// `total` unless `total` is 0), segments dealt as evenly as they go, with
/// `ragged_per_row` values per row in each ragged extra.
pub fn synthetic_batch_of_rows(
    inputs: &InputSpec,
    total: usize,
    n_rows: usize,
    ragged_per_row: usize,
) -> Batch {
    let n_rows = n_rows.min(total).max(1);
    let segment_counts: Vec<i64> = (0..n_rows)
        .map(|i| (total / n_rows + usize::from(i < total % n_rows)).max(1) as i64)
        .collect();
    let segment_bytes = inputs.segment_bytes();
    let segments = (0..total * segment_bytes)
        .map(|i| (i % 251) as u8)
        .collect();
    let extras = inputs
        .extras
        .iter()
        .map(|e| match *e {
            ExtraSpec::Ragged => BatchExtra::Ragged {
                values: vec![0; n_rows * ragged_per_row],
                counts: vec![ragged_per_row as i64; n_rows],
            },
            ExtraSpec::Vector { width } => BatchExtra::Vectors {
                values: vec![0.0; n_rows * width],
                width,
            },
            ExtraSpec::Float => BatchExtra::Floats(vec![0.0; n_rows]),
            ExtraSpec::Int => BatchExtra::Ints(vec![0; n_rows]),
        })
        .collect();
    let rows = (0..n_rows).map(|i| RowMeta::numbered(i as u64)).collect();
    Batch {
        seq: 0,
        rows,
        segment_counts,
        n_segments: total,
        padded_segments: total,
        segments,
        extras,
        flush_reason: FlushReason::Calibration,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(segments: usize, mib: i64) -> CalibrationPoint {
        CalibrationPoint {
            segments,
            peak_reserved: mib << 20,
            peak_allocated: mib << 20,
        }
    }

    #[test]
    fn fit_recovers_a_linear_memory_curve() {
        // 200 MiB of weights plus 0.25 MiB a segment.
        let points: Vec<_> = [1024, 2048, 4096, 8192]
            .iter()
            .map(|&s| point(s, 200 + s as i64 / 4))
            .collect();
        let fit = fit_line(&points).unwrap();
        assert!((fit.intercept - (200u64 << 20) as f64).abs() < 1.0);
        assert!((fit.slope - (1u64 << 18) as f64).abs() < 1e-6);
    }

    #[test]
    fn budget_fills_the_target_and_no_more() {
        let fit = LinearFit {
            intercept: (200u64 << 20) as f64,
            slope: (1u64 << 18) as f64,
        };
        // 2 GiB target: (2048 - 200) MiB / 0.25 MiB = 7392 segments.
        let budget = budget_for_target(&fit, 2u64 << 30);
        assert_eq!(budget, 7360);
        let predicted = fit.intercept + fit.slope * budget as f64;
        assert!(predicted <= (2u64 << 30) as f64);
        assert!(predicted >= 0.98 * (2u64 << 30) as f64);
    }

    #[test]
    fn budget_is_at_least_one_quantum() {
        let fit = LinearFit {
            intercept: 1e12,
            slope: 1.0,
        };
        assert_eq!(budget_for_target(&fit, 1 << 30), BUDGET_QUANTUM);
    }

    #[test]
    fn one_point_is_not_enough_to_fit() {
        assert_eq!(
            fit_line(&[point(1024, 300)]),
            Err(CalibrationError::TooFewPoints(1))
        );
    }

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!(parse_size("20GiB"), Ok(20 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("8GB"), Ok(8_000_000_000));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
    }

    #[test]
    fn measured_totals_double_until_past_the_target() {
        let target = 1u64 << 30;
        let all = MAX_TRIED_SEGMENTS;
        assert_eq!(next_total(&[], target, all), Some(256));
        assert_eq!(next_total(&[point(256, 100)], target, all), Some(512));
        assert_eq!(next_total(&[point(8192, 2000)], target, all), None);
    }

    #[test]
    fn measured_totals_stop_at_the_models_bound() {
        let target = 1u64 << 40;
        assert_eq!(next_total(&[point(32768, 100)], target, 65536), Some(65536));
        assert_eq!(next_total(&[point(65536, 200)], target, 65536), None);
    }
}
