//! A calibration as a person reads it, and as JSON (`calibrate --json` and
//! the run report's `calibration`).

use serde::{Deserialize, Serialize};

use segpredict_core::message::{Calibration, CalibrationPoint, LinearFit};

/// The report's form of a [`Calibration`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CalibrationReport {
    /// The device-memory target the budget was chosen for, bytes.
    pub target_bytes: u64,
    /// The batch sizes measured, each with its memory peaks.
    pub points: Vec<PointReport>,
    /// The line fitted through the points' reserved peaks.
    pub fit: FitReport,
    /// The segment budget chosen: the largest the fit keeps under the
    /// target.
    pub max_segments: usize,
    /// The size classes chosen with it.
    pub size_classes: Vec<usize>,
    /// Peak reserved measured at the chosen budget.
    pub measured_peak_reserved: i64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PointReport {
    pub segments: usize,
    pub peak_reserved: i64,
    pub peak_allocated: i64,
}

/// `reserved ≈ intercept + slope * segments`, in bytes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct FitReport {
    pub intercept: f64,
    pub slope: f64,
}

impl From<&CalibrationPoint> for PointReport {
    fn from(p: &CalibrationPoint) -> Self {
        Self {
            segments: p.segments,
            peak_reserved: p.peak_reserved,
            peak_allocated: p.peak_allocated,
        }
    }
}

impl From<&LinearFit> for FitReport {
    fn from(f: &LinearFit) -> Self {
        Self {
            intercept: f.intercept,
            slope: f.slope,
        }
    }
}

impl From<&Calibration> for CalibrationReport {
    fn from(c: &Calibration) -> Self {
        Self {
            target_bytes: c.target_bytes,
            points: c.points.iter().map(PointReport::from).collect(),
            fit: FitReport::from(&c.fit),
            max_segments: c.max_segments,
            size_classes: c.size_classes.clone(),
            measured_peak_reserved: c.measured_peak_reserved,
        }
    }
}

/// The calibration as a person reads it, ending with the lines to paste.
pub fn describe_calibration(c: &Calibration, allocator: Option<&str>) -> String {
    let mib = |b: i64| b >> 20;
    let mut s = format!(
        "target {} MiB (allocator: {})\n{:>10} {:>14} {:>15}\n",
        c.target_bytes >> 20,
        allocator.unwrap_or("default"),
        "segments",
        "peak reserved",
        "peak allocated"
    );
    for p in &c.points {
        s += &format!(
            "{:>10} {:>10} MiB {:>11} MiB\n",
            p.segments,
            mib(p.peak_reserved),
            mib(p.peak_allocated)
        );
    }
    s += &format!(
        "fit: {:.0} MiB + {:.3} MiB per segment\nmeasured at the budget: {} MiB\n\n[bucketing]\nmax_segments = {}\nsize_classes = {:?}",
        c.fit.intercept / 1048576.0,
        c.fit.slope / 1048576.0,
        mib(c.measured_peak_reserved),
        c.max_segments,
        c.size_classes
    );
    s
}
