//! One attempt at a run (of a shard): `_run.json` written or checked, the
//! checkpoint's verdict, the rows earlier attempts committed, and at the
//! end the shard's accounting and done marker.

use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::{RunEnd, RunOptions};
use crate::config::PipelineConfig;
use segpredict_checkpoint::batch_parts::add_batch_files;
use segpredict_checkpoint::checkpoint::{self, ShardDone, Start};
use segpredict_checkpoint::commit::commit_run;
use segpredict_checkpoint::done::scan_committed;
use segpredict_checkpoint::manifest::{sha256_file, Fingerprint, RunManifest};
use segpredict_checkpoint::OutputLayout;
use segpredict_core::message::{BatchTotals, Calibration};
use segpredict_reader::ReadPlan;
use segpredict_report::{RunFacts, RunReport, StageReports};
use segpredict_worker::{Worker, WorkerError};

/// This attempt's layout, the rows earlier attempts committed (predicted,
/// rejected), the rows of this shard and the batches earlier attempts ran;
/// or how the run ends at once (already complete, this shard already done).
pub(super) type Attempt = (OutputLayout, (u64, u64), u64, BatchTotals);

/// Writes or checks `_run.json`, takes the checkpoint's verdict, and keeps
/// the plan to this shard's rows not yet committed.
pub(super) fn begin_attempt(
    config: &PipelineConfig,
    plan: &mut ReadPlan,
    options: RunOptions,
) -> Result<Result<Attempt, RunEnd>> {
    let dir = &config.writers.dir;
    let manifest = RunManifest::new(fingerprint(config)?, &plan.sources, options.shard.count);
    let overwrite = config.writers.overwrite;
    let (layout, committed) = match checkpoint::prepare(dir, &manifest, options.shard, overwrite)? {
        Start::AlreadyComplete => return Ok(Err(RunEnd::AlreadyComplete)),
        Start::ShardDone => return Ok(Err(RunEnd::ShardAlreadyDone(commit_run(dir)?))),
        Start::Predict { layout, committed } => (layout, committed),
    };
    let done = scan_committed(&committed, &manifest.input_rows())?;
    let resumed = (done.predicted(), done.rejected());
    let shard_rows = plan.select(options.shard, Arc::new(done));
    let earlier_batches = earlier_batches(&layout)?;
    Ok(Ok((layout, resumed, shard_rows, earlier_batches)))
}

/// The batches this shard's earlier attempts committed, summed from their
/// batch files a record batch at a time (this attempt's own are summed as
/// they run).
fn earlier_batches(layout: &OutputLayout) -> Result<BatchTotals> {
    let this_attempt = layout.batches_prefix();
    let files: Vec<_> =
        checkpoint::committed_batch_files(layout.dir(), Some(layout.names().shard))?
            .into_iter()
            .filter(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                !name.starts_with(&this_attempt)
            })
            .collect();
    let mut totals = BatchTotals::default();
    add_batch_files(&files, &mut totals)?;
    Ok(totals)
}

/// What the report needs to know of the run's set-up.
pub(super) fn run_facts(
    config: &PipelineConfig,
    plan: &ReadPlan,
    model: &Worker,
    allocator_conf: Option<String>,
    calibration: Option<Calibration>,
    (layout, resumed, shard_rows, earlier_batches): &Attempt,
) -> RunFacts {
    let shard = layout.names().shard;
    RunFacts {
        input: config.readers.path.display().to_string(),
        output: config.writers.dir.display().to_string(),
        device: segpredict_worker::device_name(model.device()),
        on_cuda: model.device().is_cuda(),
        model_dtype: format!("{:?}", config.model.dtype).to_lowercase(),
        input_files: plan.sources.len(),
        rows_in: *shard_rows,
        max_segments: config.bucketing.max_segments,
        final_max_segments: None,
        strategy: config.bucketing.strategy,
        cudnn_benchmark: model.cudnn_benchmark(),
        channels_last: model.channels_last(),
        allocator_conf,
        calibration,
        wall_s: 0.0,
        resumed: *resumed,
        attempts: layout.names().attempt,
        shard: shard.is_sharded().then(|| shard.to_string()),
        skipped_files: plan.skipped.clone(),
        earlier_batches: earlier_batches.clone(),
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
        columns: format!("{:?}", config.readers.columns),
        dtype: format!("{:?}", config.model.dtype).to_lowercase(),
    })
}

/// Checks the shard's row accounting over all its attempts, then writes
/// its plot and its done marker.
pub(super) fn finish_shard(
    layout: &OutputLayout,
    stages: StageReports,
    facts: RunFacts,
) -> Result<RunReport> {
    let report = RunReport::from_stages(facts, &stages);
    // The accounting invariant: every input row is predicted or rejected, once.
    if report.rows_out + report.rows_rejected != report.rows_in {
        bail!(
            "row accounting failed: {} rows in, {} predicted + {} rejected over {} attempt(s); the output is incomplete",
            report.rows_in, report.rows_out, report.rows_rejected, report.attempts
        );
    }
    let svg = layout.shard_svg();
    checkpoint::publish(&svg, report.to_svg()?.as_bytes())?;
    let names = layout.names();
    let done = ShardDone {
        shard: names.shard,
        rows_in: report.rows_in,
        rows_out: report.rows_out,
        rows_rejected: report.rows_rejected,
        rows_resumed: report.rows_resumed,
        attempts: names.attempt,
        report: serde_json::to_value(&report)?,
    };
    checkpoint::mark_shard_done(layout.dir(), &done)?;
    Ok(report)
}
