//! `segpredict check`: everything `run` checks before its first row, with
//! its errors and the checkpoint's own verdict, and nothing written.

use segpredict_core::exit::{Context, Result};

use super::attempt::checkpoint_of;
use super::load_worker;
use super::start::{check_model_bound, memory_target};
use crate::config::PipelineConfig;
use segpredict_bucketing::Bucketer;
use segpredict_checkpoint::checkpoint::Verdict;
use segpredict_checkpoint::commit::RunSummary;
use segpredict_core::message::Row;
use segpredict_core::shard::ShardSpec;
use segpredict_worker::calibrate::CalibrationError;

/// What `check` found: the run would start.
#[derive(Debug)]
pub struct Checked {
    pub files: usize,
    pub rows: u64,
    pub row_groups: usize,
    /// As users write it: `cpu`, `cuda:0`.
    pub device: String,
    pub labels: usize,
    /// What the run would do with its output (the verdict `run` acts on).
    pub output: Verdict,
    /// A finished run's recorded summary, for the exit code it ended with.
    pub summary: Option<RunSummary>,
}

/// Everything [`run`] checks before its first row, in its order and with its
/// errors, and nothing else: bucketing, input files and columns, model and
/// labels (one tiny forward pass), device, the calibration target, and the
/// output directory against this shard of the run, left untouched.
pub fn check(config: &PipelineConfig, shard: ShardSpec) -> Result<Checked> {
    Bucketer::<Row>::new(&config.bucketing).context("invalid [bucketing] section")?;
    let plan = config.readers.plan()?;
    let model = load_worker(config)?;
    check_model_bound(config, &model)?;
    if config.auto_budget {
        memory_target(config)?;
        if !model.device().is_cuda() {
            return Err(CalibrationError::NotCuda.into());
        }
    }
    config.writers.validate()?;
    let options = super::RunOptions {
        shard,
        ..super::RunOptions::default()
    };
    let checkpoint = checkpoint_of(config, &plan, options)?;
    let output = checkpoint.verdict()?;
    if output != Verdict::Complete {
        checkpoint.check_not_locked()?;
    }
    let summary = match output {
        Verdict::Complete => RunSummary::read(&**checkpoint.store())?,
        _ => None,
    };
    checkpoint.store().check_writable()?;
    Ok(Checked {
        files: plan.sources.len(),
        rows: plan.total_rows,
        row_groups: plan.row_groups(),
        device: segpredict_worker::device_name(model.device()),
        labels: model.labels().len(),
        output,
        summary,
    })
}
