//! Wires the stages together: readers -> bucketing -> model worker -> writers,
//! joined by bounded channels so a slow stage slows the ones before it.
//!
//! Everything that can fail before the first row (input files, columns,
//! model, labels, device, output directory) is checked before any thread
//! starts. Then all stages run in one thread scope; the first error sets the
//! shared cancel flag, every stage stops at its next message, and the run
//! returns that error.

mod attempt;
mod threads;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bucketing::{default_size_classes, Bucketer};
use crate::commit::{commit_run, CommitState};
use crate::config::PipelineConfig;
use crate::message::{Calibration, Row, ShardSpec};
use crate::reader::ReadPlan;
use crate::report::{RunFacts, RunReport};
use crate::worker::calibrate::{parse_size, CalibrationError};
use crate::worker::{self, Worker};
use crate::writer::checkpoint::{self, DirState};
use crate::writer::manifest::RunManifest;
use attempt::{begin_attempt, finish_shard, run_facts, Attempt};
use threads::Prepared;

/// The run was cancelled (Ctrl-C or SIGTERM) before it completed.
#[derive(Debug, thiserror::Error)]
#[error("interrupted; no output was marked complete")]
pub struct Interrupted;

/// The model worker for the pipeline's model, columns and padding.
fn load_worker(config: &PipelineConfig) -> Result<Worker> {
    let inputs = config.readers.columns.input_spec();
    // Padding's default depends on the device, which loading chooses; only
    // an explicit `false` rules out cuDNN benchmark mode.
    let padded = config.bucketing.pad_to_size_classes != Some(false);
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

/// The device's part of start-up: the budget calibrated (`max_segments =
/// "auto"`), then the size classes warmed at the budget in force.
fn prepare_device(
    config: &mut PipelineConfig,
    model: &Worker,
) -> Result<(Option<Calibration>, Option<Duration>)> {
    let calibration = match config.auto_budget {
        true => Some(calibrate_budget(config, model)?),
        false => None,
    };
    Ok((calibration, warm_size_classes(config, model)?))
}

/// The model side of start-up, run while the readers read the first row
/// groups: the model loaded and probed, the bucketing settled for its
/// device, the budget calibrated and the size classes warmed.
fn prepare_model(
    config: &PipelineConfig,
    plan: &ReadPlan,
    allocator_conf: Option<String>,
    attempt: &Attempt,
    started: Instant,
) -> Result<Prepared> {
    let mut model = load_worker(config)?;
    model.count_time_from(started);
    let mut config = config.clone();
    config.bucketing.settle_for_device(model.device().is_cuda());
    let (calibration, warm_up) = prepare_device(&mut config, &model)?;
    let (layout, resumed, shard_rows, _) = attempt;
    tracing::info!(files = plan.sources.len(), rows = shard_rows,
        resumed = resumed.0 + resumed.1, row_groups = plan.row_groups(),
        shard = %layout.names().shard, attempt = layout.names().attempt,
        device = %worker::device_name(model.device()), budget = config.bucketing.max_segments, "starting");
    // The budget in force: none for the `rows` strategy, as the bucketer knows.
    let budget = Bucketer::<Row>::new(&config.bucketing)?.max_segments();
    let mut facts = run_facts(&config, plan, &model, allocator_conf, calibration, attempt);
    facts.warm_up_s = warm_up.map(|d| d.as_secs_f64());
    facts.model_ready_s = Some(started.elapsed().as_secs_f64());
    Ok(Prepared {
        worker: model,
        bucketing: config.bucketing,
        budget,
        facts,
    })
}

/// Warms every size class the run will use (`[model] warm_size_classes`),
/// on CUDA with padded batches only: on CPU, or unpadded, shapes are not
/// few and there is no caching allocator to settle.
fn warm_size_classes(config: &PipelineConfig, model: &Worker) -> Result<Option<Duration>> {
    let padded = config.bucketing.pad_to_size_classes == Some(true);
    if !(config.model.warm_size_classes && padded && model.device().is_cuda()) {
        return Ok(None);
    }
    let classes = config.bucketing.effective_size_classes();
    let took = model.warm_size_classes(&classes)?;
    tracing::info!(
        classes = classes.len(),
        seconds = took.as_secs_f64(),
        "warmed the size classes"
    );
    Ok(Some(took))
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
    /// What the run would find in the output directory.
    pub output: DirState,
}

/// Everything [`run`] checks before its first row, in its order and with its
/// errors, and nothing else: bucketing, input files and columns, model and
/// labels (one tiny forward pass), device, the calibration target, and the
/// output directory against a run of `shards` shards, left untouched.
pub fn check(config: &PipelineConfig, shards: u32) -> Result<Checked> {
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
    config.writers.validate()?;
    let manifest = RunManifest::new(attempt::fingerprint(config)?, &plan.sources, shards);
    let output = checkpoint::inspect_dir(&config.writers.dir, &manifest, config.writers.overwrite)?;
    config.writers.check_writable()?;
    Ok(Checked {
        files: plan.sources.len(),
        rows: plan.total_rows,
        row_groups: plan.row_groups(),
        device: worker::device_name(model.device()),
        labels: model.labels().len(),
        output,
    })
}

/// What a run is asked to do beyond its pipeline file.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// The part of the input this process predicts.
    pub shard: ShardSpec,
}

/// How a run ended without an error.
#[derive(Debug)]
pub enum RunEnd {
    /// `_SUCCESS` of this very run was already there: nothing was done.
    AlreadyComplete,
    /// This shard finished in an earlier attempt.
    ShardAlreadyDone(CommitState),
    /// This attempt finished its shard (the whole input, unsharded).
    Finished {
        report: Box<RunReport>,
        commit: CommitState,
    },
}

/// Predicts every row of the pipeline's input (of this shard's units) not
/// committed by an earlier attempt, then commits the run if every shard is
/// done; `allocator_conf` is what `worker::configure_allocator` put in
/// force before any thread started.
pub fn run(
    config: &PipelineConfig,
    allocator_conf: Option<String>,
    cancel: Arc<AtomicBool>,
    options: RunOptions,
) -> Result<RunEnd> {
    let started = Instant::now();
    // Building a bucketer validates the section, size classes included.
    Bucketer::<Row>::new(&config.bucketing).context("invalid [bucketing] section")?;
    config.writers.validate()?;
    let mut plan = config.readers.plan()?;
    let attempt = match begin_attempt(config, &mut plan, options)? {
        Ok(attempt) => attempt,
        Err(end) => return Ok(end),
    };
    if worker::choose_device(&config.model.device)?.is_cuda() {
        // Before the readers start, so they keep off the worker's core.
        crate::cpu::reserve_core_for_worker();
    }
    let prepare = || prepare_model(config, &plan, allocator_conf, &attempt, started);
    let ran = threads::run_stages(config, &plan, prepare, &cancel, &attempt.0)?;
    if cancel.load(Ordering::Relaxed) {
        return Err(Interrupted.into());
    }
    let facts = RunFacts {
        final_max_segments: Some(ran.final_budget).filter(|&b| b != usize::MAX),
        wall_s: started.elapsed().as_secs_f64(),
        ..ran.facts
    };
    let report = Box::new(finish_shard(&attempt.0, ran.stages, facts)?);
    // A signal while the shard was finishing: the shard is done (its marker
    // is written) but the run reports the interruption, so a signal always
    // gives the same exit code; a rerun commits.
    if cancel.load(Ordering::Relaxed) {
        return Err(Interrupted.into());
    }
    let commit = commit_run(&config.writers.dir)?;
    Ok(RunEnd::Finished { report, commit })
}
