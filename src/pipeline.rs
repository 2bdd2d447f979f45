//! Wires the stages together: readers -> bucketing -> model worker -> writers,
//! joined by bounded channels so a slow stage slows the ones before it.
//!
//! What can fail without the device (input files, columns, settings, the
//! output directory) is checked before any thread starts. Then the readers
//! start while this thread loads, probes and warms the model; a failure
//! there undoes the attempt's beginning in the output directory. Then the
//! other stages start; the first error sets the shared cancel flag, every
//! stage stops at its next message, and the run returns that error.

mod attempt;
mod check;
mod options;
mod start;
mod threads;

use segpredict_core::exit::{Classify, Failure};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use segpredict_core::exit::{Context, Error, Result};

use crate::config::PipelineConfig;
use attempt::{begin_attempt, finish_shard, Begin};
pub use check::{check, Checked};
use segpredict_bucketing::{default_size_classes, Bucketer};

use segpredict_checkpoint::commit::{commit_run, CommitState, RunSummary};

pub use options::{LostLock, RunOptions};
use segpredict_core::message::{Calibration, ModelSpeed, Row};
use segpredict_reader::ReadPlan;
use segpredict_report::{RunFacts, RunReport};
use segpredict_worker::calibrate::parse_size;
use segpredict_worker::{self as worker, Worker};
use start::{abandon_start, prepare_model};

/// The run was cancelled (Ctrl-C or SIGTERM) before it completed.
#[derive(Debug, thiserror::Error)]
#[error("interrupted; no output was marked complete")]
pub struct Interrupted;

/// A rerun resumes (main exits 130/143 for it when a signal was received).
impl Classify for Interrupted {
    fn failure(&self) -> Failure {
        Failure::Retryable
    }
}

/// The model worker for the pipeline's model, columns and padding.
fn load_worker(config: &PipelineConfig) -> Result<Worker> {
    let inputs = config.readers.columns.input_spec();
    // Padding's default depends on the device, which loading chooses; only
    // an explicit `false` rules out cuDNN benchmark mode.
    let padded = config.bucketing.pad_to_size_classes != Some(false);
    config.check_top_k()?;
    let top_k = config.writers.top_k;
    Ok(Worker::load(&config.model, inputs, padded, top_k)?)
}

/// `segpredict calibrate`: load the model on the pipeline's device and
/// measure it against `gpu_memory`.
pub fn calibrate(config: &PipelineConfig, gpu_memory: &str) -> Result<Calibration> {
    let target = parse_size(gpu_memory)?;
    Ok(load_worker(config)?.calibrate(target, default_size_classes)?)
}

/// What `speed` measured, and on what.
#[derive(Debug)]
pub struct SpeedReport {
    pub speed: ModelSpeed,
    /// As users write it: `cpu`, `cuda:0`.
    pub device: String,
    pub format: worker::ModelFormat,
}

/// `segpredict speed`: the model alone on the pipeline's device, at
/// `segments` a batch (default: the budget a run would use there) in
/// `rows` rows (default: rows of the median segment count, as calibration),
/// the batches taking turns over `streams` CUDA streams.
pub fn speed(
    config: &PipelineConfig,
    segments: Option<usize>,
    rows: Option<usize>,
    batches: usize,
    streams: usize,
    on_input: bool,
) -> Result<SpeedReport> {
    let model = load_worker(config)?;
    let mut bucketing = config.bucketing.clone();
    bucketing.settle_for_device(model.device().is_cuda());
    let segments = segments.unwrap_or(bucketing.max_segments);
    if let Some(limit) = model.max_segments().filter(|&limit| segments > limit) {
        return Err(Error::permanent(format!(
            "{} takes at most {limit} segments a batch (the bound it was exported with); asked for {segments}",
            config.model.path.display()
        )));
    }
    let data = match on_input {
        true => Some(input_segments(config, segments)?),
        false => None,
    };
    Ok(SpeedReport {
        speed: model.speed_alone(segments, rows, batches, data.as_deref(), streams)?,
        device: worker::device_name(model.device()),
        format: model.format(),
    })
}

/// The first `segments` segments of the input (`speed --input`).
fn input_segments(config: &PipelineConfig, segments: usize) -> Result<Vec<u8>> {
    let data = segpredict_reader::leading_segments(&config.readers, segments)
        .with_context(|| format!("reading segments from {}", config.readers.path.display()))?;
    if data.is_empty() {
        return Err(Error::permanent(format!(
            "{}: no segments to time the model on",
            config.readers.path.display()
        )));
    }
    Ok(data)
}

/// How a run ended without an error.
#[derive(Debug)]
pub enum RunEnd {
    /// `_SUCCESS` of this very run was already there: nothing was done;
    /// the committed run's summary, for the exit code it ended with.
    AlreadyComplete(Option<RunSummary>),
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
/// done; `allocator_conf` is what `worker::prepare_process` put in
/// force before any thread started.
pub fn run(
    config: &PipelineConfig,
    allocator_conf: Option<String>,
    cancel: Arc<AtomicBool>,
    options: RunOptions,
) -> Result<RunEnd> {
    let started = Instant::now();
    // Before anything is written: a device setting that cannot work
    // (`--device tpu`, CUDA without a GPU) leaves no run behind.
    let on_cuda = worker::choose_device(&config.model.device)?.is_cuda();
    let options = RunOptions {
        cancel: Some(cancel.clone()),
        ..options
    };
    let (plan, attempt) = match plan_and_attempt(config, options)? {
        Ok(started) => started,
        Err(end) => return Ok(end),
    };
    // Inside the shard's span; the stage threads enter it too.
    let names = attempt.attempt.layout.names();
    let _attempt = tracing::error_span!("attempt", attempt = names.attempt).entered();
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        "planned the read and began the attempt"
    );
    if on_cuda {
        // Before the readers start, so they keep off the worker's core.
        segpredict_core::cpu::reserve_core_for_worker();
    }
    let prepare = || {
        prepare_model(config, &plan, allocator_conf, &attempt, started, &cancel)
            .inspect_err(|_| abandon_start(&attempt))
    };
    let ran = threads::run_stages(config, &plan, prepare, &cancel, &attempt.attempt);
    // Losing the lock cancels the stages; whatever they then failed with,
    // the cause is the lost lock.
    if let Some(holder) = attempt.attempt.lost_lock() {
        return Err(LostLock { holder: holder.0 }.into());
    }
    finish_run(ran?, &attempt, started, &cancel)
}

/// What needs no device: the bucketing and writers sections, the read
/// plan, and the attempt (or how the run ends at once).
fn plan_and_attempt(
    config: &PipelineConfig,
    options: RunOptions,
) -> Result<Result<(ReadPlan, Begin), RunEnd>> {
    // Building a bucketer validates the section, size classes included.
    Bucketer::<Row>::new(&config.bucketing).context("invalid [bucketing] section")?;
    config.writers.validate()?;
    config.check_top_k()?;
    let mut plan = config.readers.plan()?;
    Ok(begin_attempt(config, &mut plan, options)?.map(|attempt| (plan, attempt)))
}

/// The shard's accounting and done marker after its stages ended, then the
/// run's commit if every shard is done.
fn finish_run(
    ran: threads::Ran,
    attempt: &Begin,
    started: Instant,
    cancel: &AtomicBool,
) -> Result<RunEnd> {
    if cancel.load(Ordering::Relaxed) {
        return Err(Interrupted.into());
    }
    let facts = RunFacts {
        final_max_segments: Some(ran.final_budget).filter(|&b| b != usize::MAX),
        wall_s: started.elapsed().as_secs_f64(),
        store_requests: Some(segpredict_storage::requests()).filter(|r| r.requests > 0),
        ..ran.facts
    };
    let report = Box::new(finish_shard(attempt, ran.stages, facts)?);
    // Past the shard's `done` record a signal no longer stops the run: the
    // commit finishes and the run exits 0 (an evicted pod whose output is
    // complete must not be retried). Before it, the run exits 129/130/143.
    let commit = commit_run(&*attempt.attempt.store)?;
    Ok(RunEnd::Finished { report, commit })
}
