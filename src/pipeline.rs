//! Wires the stages together: readers -> bucketing -> model worker -> writers,
//! joined by bounded channels so a slow stage slows the ones before it.
//!
//! Everything that can fail before the first row (input files, columns,
//! model, labels, device, output directory) is checked before any thread
//! starts. Then all stages run in one thread scope; the first error sets the
//! shared cancel flag, every stage stops at its next message, and the run
//! returns that error.

mod threads;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::bucketing::{default_size_classes, Bucketer};
use crate::config::PipelineConfig;
use crate::message::{Calibration, Row};
use crate::reader::ReadPlan;
use crate::report::{RunFacts, RunReport, StageReports};
use crate::worker::calibrate::{parse_size, CalibrationError};
use crate::worker::{self, Worker};
use crate::writer;

/// The run was cancelled (Ctrl-C or SIGTERM) before it completed.
#[derive(Debug, thiserror::Error)]
#[error("interrupted; no output was marked complete")]
pub struct Interrupted;

/// The model worker for the pipeline's model, columns and padding.
fn load_worker(config: &PipelineConfig) -> Result<Worker> {
    let inputs = config.readers.columns.input_spec();
    let padded = config.bucketing.pad_to_size_classes;
    Ok(Worker::load(&config.model, inputs, padded)?)
}

/// `segpredict calibrate`: load the model on the pipeline's device and
/// measure it against `gpu_memory`.
pub fn calibrate(config: &PipelineConfig, gpu_memory: &str) -> Result<Calibration> {
    let target = parse_size(gpu_memory)?;
    Ok(load_worker(config)?.calibrate(target, default_size_classes)?)
}

/// `max_segments = "auto"`: measure the model on its device and set the
/// budget and size classes for the memory target.
fn calibrate_budget(config: &mut PipelineConfig, model: &Worker) -> Result<Calibration> {
    let target = config.bucketing.gpu_memory.as_deref();
    let target = target
        .ok_or(CalibrationError::NoTarget)
        .and_then(parse_size)?;
    let calibration = model.calibrate(target, default_size_classes)?;
    tracing::info!(
        max_segments = calibration.max_segments,
        target_mib = target >> 20,
        measured_mib = calibration.measured_peak_reserved >> 20,
        "calibrated the segment budget"
    );
    config.bucketing.max_segments = calibration.max_segments;
    config.bucketing.size_classes = Some(calibration.size_classes.clone());
    Ok(calibration)
}

/// What `check` found: the run would start.
#[derive(Debug)]
pub struct Checked {
    pub files: usize,
    pub rows: u64,
    pub row_groups: usize,
    /// As users write it: `cpu`, `cuda:0`.
    pub device: String,
    pub labels: usize,
}

/// Everything [`run`] checks before its first row, in its order and with its
/// errors, and nothing else: bucketing, input files and columns, model and
/// labels (one tiny forward pass), device, the calibration target, and the
/// output directory, which is left untouched.
pub fn check(config: &PipelineConfig) -> Result<Checked> {
    Bucketer::<Row>::new(&config.bucketing).context("invalid [bucketing] section")?;
    let plan = config.readers.plan()?;
    let model = load_worker(config)?;
    if config.auto_budget {
        let target = config.bucketing.gpu_memory.as_deref();
        target
            .ok_or(CalibrationError::NoTarget)
            .and_then(parse_size)?;
        if !model.device().is_cuda() {
            bail!(CalibrationError::NotCuda);
        }
    }
    config.writers.check_dir()?;
    Ok(Checked {
        files: plan.sources.len(),
        rows: plan.total_rows,
        row_groups: plan.row_groups(),
        device: worker::device_name(model.device()),
        labels: model.labels().len(),
    })
}

/// Predicts every row of the pipeline's input; `allocator_conf` is what
/// `worker::configure_allocator` put in force before any thread started.
pub fn run(
    config: &PipelineConfig,
    allocator_conf: Option<String>,
    cancel: Arc<AtomicBool>,
) -> Result<RunReport> {
    let started = Instant::now();
    // Building a bucketer validates the section, size classes included.
    Bucketer::<Row>::new(&config.bucketing).context("invalid [bucketing] section")?;
    let plan = config.readers.plan()?;
    let model = load_worker(config)?;
    let mut config = config.clone();
    let calibration = match config.auto_budget {
        true => Some(calibrate_budget(&mut config, &model)?),
        false => None,
    };
    config.writers.prepare_dir()?;
    tracing::info!(files = plan.sources.len(), rows = plan.total_rows,
        row_groups = plan.row_groups(), device = %worker::device_name(model.device()),
        budget = config.bucketing.max_segments, "starting");
    // The budget in force: none for the `rows` strategy, as the bucketer knows.
    let budget = AtomicUsize::new(Bucketer::<Row>::new(&config.bucketing)?.max_segments());
    let facts = RunFacts {
        input: config.readers.path.display().to_string(),
        output: config.writers.dir.display().to_string(),
        device: worker::device_name(model.device()),
        on_cuda: model.device().is_cuda(),
        model_dtype: format!("{:?}", config.model.dtype).to_lowercase(),
        input_files: plan.sources.len(),
        rows_in: plan.total_rows,
        max_segments: config.bucketing.max_segments,
        final_max_segments: None,
        strategy: config.bucketing.strategy,
        cudnn_benchmark: model.cudnn_benchmark(),
        channels_last: model.channels_last(),
        allocator_conf,
        calibration,
        wall_s: 0.0,
    };
    let stages = threads::run_stages(&config, &plan, model, &budget, &cancel)?;
    if cancel.load(Ordering::Relaxed) {
        return Err(Interrupted.into());
    }
    let final_budget = Some(budget.load(Ordering::Relaxed)).filter(|&b| b != usize::MAX);
    let wall_s = started.elapsed().as_secs_f64();
    let facts = RunFacts {
        final_max_segments: final_budget,
        wall_s,
        ..facts
    };
    finish_run(&config, &plan, stages, facts)
}

/// Checks the row accounting, then writes rejects, reports and `_SUCCESS`.
fn finish_run(
    config: &PipelineConfig,
    plan: &ReadPlan,
    stages: StageReports,
    facts: RunFacts,
) -> Result<RunReport> {
    let report = RunReport::from_stages(facts, &stages);
    // The accounting invariant: every input row is predicted or rejected, once.
    if report.rows_out + report.rows_rejected != plan.total_rows {
        bail!(
            "row accounting failed: {} rows in, {} predicted + {} rejected; the output is incomplete",
            plan.total_rows, report.rows_out, report.rows_rejected
        );
    }
    let layout = &config.writers.layout();
    let mut rejects: Vec<_> = stages.writers.into_iter().flat_map(|w| w.rejects).collect();
    writer::write_rejects(layout, &mut rejects, &plan.sources, plan.id_kind)?;
    writer::write_whole(layout, &layout.report_json(), report.to_json()?.as_bytes())?;
    writer::write_whole(layout, &layout.report_svg(), report.to_svg()?.as_bytes())?;
    writer::write_success(layout)?;
    Ok(report)
}
