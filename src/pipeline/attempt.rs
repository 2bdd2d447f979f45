//! One attempt at a run (of a shard), wired to the checkpoint: what the
//! run is (`_run.json`'s fingerprint), the checkpoint's verdict acted on,
//! the rows earlier attempts committed kept out of the plan, and at the end
//! the shard's accounting and done marker. The protocol itself is
//! `segpredict_checkpoint::checkpoint`'s.

use std::sync::Arc;

use segpredict_core::exit::{Context, Error, Result};

use super::{RunEnd, RunOptions};
use crate::config::PipelineConfig;
use segpredict_checkpoint::batches::add_batch_files;
use segpredict_checkpoint::checkpoint::{Attempt, Begun, Checkpoint, ShardAccounting, ShardDone};
use segpredict_checkpoint::commit::{commit_run, RunSummary};
use segpredict_checkpoint::manifest::{sha256_file, Fingerprint, RunManifest};
use segpredict_checkpoint::Store;
use segpredict_core::message::Calibration;
use segpredict_core::stats::BatchTotals;
use segpredict_reader::ReadPlan;
use segpredict_report::{RunFacts, RunReport, StageReports};
use segpredict_worker::{Worker, WorkerError};

/// An attempt that began: the checkpoint's attempt (store, names, the
/// shard's lock), the rows earlier attempts committed, this shard's rows,
/// and the batches earlier attempts ran.
#[derive(Debug)]
pub(super) struct Begin {
    pub attempt: Attempt,
    /// Rows earlier attempts committed: predicted, rejected.
    pub resumed: (u64, u64),
    pub shard_rows: u64,
    pub earlier_batches: BatchTotals,
}

/// The run's checkpoint: the output location's store, what the run is, and
/// this process's shard.
pub(super) fn checkpoint_of(
    config: &PipelineConfig,
    plan: &ReadPlan,
    options: RunOptions,
) -> Result<Checkpoint> {
    let shards = options.shard;
    // The run would read its own output back as input, or write over it.
    segpredict_reader::check_output_outside_input(&config.readers.path, &config.writers.dir)?;
    let store: Arc<dyn Store> =
        segpredict_checkpoint::open_store(&config.writers.dir, &shards.tag())?;
    let manifest = RunManifest::new(fingerprint(config)?, &plan.sources, shards.count);
    let checkpoint = Checkpoint::new(store, manifest, shards, config.writers.overwrite)
        .waiting_for_lock(options.wait_for_lock);
    Ok(match options.cancel {
        Some(cancel) => checkpoint.cancelling_on_lost_lock(cancel),
        None => checkpoint,
    })
}

/// Takes the checkpoint's verdict and acts on it, and keeps the plan to
/// this shard's rows not yet committed; or says how the run ends at once
/// (already complete, this shard already done).
pub(super) fn begin_attempt(
    config: &PipelineConfig,
    plan: &mut ReadPlan,
    options: RunOptions,
) -> Result<Result<Begin, RunEnd>> {
    let checkpoint = checkpoint_of(config, plan, options.clone())?;
    let store = checkpoint.store().clone();
    let attempt = match checkpoint.begin()? {
        Begun::Complete => return Ok(Err(RunEnd::AlreadyComplete(RunSummary::read(&*store)?))),
        Begun::ShardDone(_lock) => return Ok(Err(RunEnd::ShardAlreadyDone(commit_run(&*store)?))),
        Begun::Predict(attempt) => attempt,
    };
    let done = attempt.done.clone();
    let resumed = (done.predicted(), done.rejected());
    let shard_rows = plan.select(options.shard, Arc::new(done));
    let mut earlier_batches = BatchTotals::default();
    add_batch_files(&*store, &attempt.earlier_batch_files, &mut earlier_batches)?;
    Ok(Ok(Begin {
        attempt,
        resumed,
        shard_rows,
        earlier_batches,
    }))
}

/// What the report needs to know of the run's set-up.
pub(super) fn run_facts(
    config: &PipelineConfig,
    plan: &ReadPlan,
    model: &Worker,
    allocator_conf: Option<String>,
    calibration: Option<Calibration>,
    begin: &Begin,
) -> RunFacts {
    let names = begin.attempt.layout.names();
    RunFacts {
        // Counted at the end (`finish_run`).
        store_requests: None,
        input: config.readers.path.display().to_string(),
        output: config.writers.dir.display().to_string(),
        device: segpredict_worker::device_name(model.device()),
        on_cuda: model.device().is_cuda(),
        model_dtype: format!("{:?}", config.model.dtype).to_lowercase(),
        input_files: plan.sources.len(),
        rows_in: begin.shard_rows,
        max_segments: config.bucketing.max_segments,
        final_max_segments: None,
        strategy: config.bucketing.strategy,
        cudnn_benchmark: model.cudnn_benchmark(),
        channels_last: model.channels_last(),
        allocator_conf,
        calibration,
        wall_s: 0.0,
        resumed: begin.resumed,
        attempts: names.attempt,
        shard: names.shard.is_sharded().then(|| names.shard.to_string()),
        skipped_files: plan.skipped.clone(),
        earlier_batches: begin.earlier_batches.clone(),
        batches_file: segpredict_checkpoint::BATCHES.to_string(),
        warm_up_s: None,
        model_ready_s: None,
    }
}

/// What changes predictions, for `_run.json`.
pub(super) fn fingerprint(config: &PipelineConfig) -> Result<Fingerprint> {
    // The worker's own errors for a missing file, before it loads anything.
    let (model, labels) = (&config.model.path, &config.model.labels);
    if !model.is_file() {
        return Err(WorkerError::ModelMissing {
            path: model.clone(),
        }
        .into());
    }
    let hash = |path: &std::path::Path, what: &str| {
        sha256_file(path).with_context(|| format!("reading the {what} {}", path.display()))
    };
    Ok(Fingerprint {
        model_sha256: hash(model, "model")?,
        labels_sha256: hash(labels, "labels file")?,
        // Carried columns change the parts' schema: a run carrying others
        // is another run (nothing carried leaves the text as it was).
        columns: match &config.readers.carry {
            c if c.is_nothing() => format!("{:?}", config.readers.columns),
            c => format!("{:?} carry {c:?}", config.readers.columns),
        },
        dtype: format!("{:?}", config.model.dtype).to_lowercase(),
    })
}

/// Checks the shard's row accounting over all its attempts, then writes
/// its plot and its done marker.
pub(super) fn finish_shard(
    begin: &Begin,
    stages: StageReports,
    facts: RunFacts,
) -> Result<RunReport> {
    let report = RunReport::from_stages(facts, &stages);
    // The accounting invariant: every input row is predicted or rejected, once.
    // Retryable: the shard is not marked done, so a rerun resumes from
    // what was committed and counts again.
    if !report.rows.balances() {
        return Err(Error::retryable(format!(
            "row accounting failed: {} over {} attempt(s); the output is incomplete",
            report.rows, report.attempts
        )));
    }
    let attempt = &begin.attempt;
    let svg = report.to_svg()?;
    attempt
        .store
        .put(&attempt.layout.shard_svg(), svg.as_bytes())?;
    let names = attempt.layout.names();
    let done = ShardDone {
        shard: names.shard,
        accounting: ShardAccounting {
            rows: report.rows,
            attempts: names.attempt,
        },
        report: report.clone(),
    };
    attempt.log.done(done)?;
    Ok(report)
}
