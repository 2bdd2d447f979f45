//! `segpredict run`: the pipeline file with the command line applied, one
//! process's shard or several local shard processes, and how the run ended
//! as an exit code a scheduler can act on.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;

use super::RunArgs;
use crate::local_shards::LocalShards;
use crate::logging;
use crate::metrics;
use crate::pipeline::{self, RunEnd, RunOptions};
use segpredict_checkpoint::commit::CommitState;
use segpredict_core::exit::{self, Outcome, Permanent};
use segpredict_core::message::{ShardSpec, COMPLETION_INDEX_VAR};
use segpredict_worker as worker;

pub(super) fn run(args: RunArgs, cancel: Arc<AtomicBool>) -> Result<Outcome> {
    if let Some(local) = args.local_shards {
        return run_local_shards(local);
    }
    let shard = match (args.shard, args.shards) {
        (Some(shard), _) => shard,
        (None, Some(count)) => {
            let index = std::env::var(COMPLETION_INDEX_VAR).ok();
            ShardSpec::from_completion_index(count, index.as_deref())?
        }
        (None, None) => ShardSpec::WHOLE,
    };
    let fraction = args.max_reject_fraction;
    if !(0.0..=1.0).contains(&fraction) {
        let e = anyhow::anyhow!("--max-reject-fraction must be between 0 and 1, not {fraction}");
        return Err(Permanent(e).into());
    }
    let targets = args.metrics.targets(&args.pipeline.pipeline, shard);
    // Before the exporter's thread, the first of the process: no
    // environment variable is changed once a thread runs (see
    // `worker::prepare_process`).
    let loaded = args.pipeline.load(args.threads).map(|config| {
        let inputs = config.readers.columns.input_spec();
        let allocator = worker::prepare_process(&config.model, &inputs);
        (config, allocator)
    });
    let exporter = metrics::Exporter::start(targets);
    let ran = loaded.and_then(|(config, allocator)| {
        let end = pipeline::run(&config, allocator, cancel, RunOptions { shard })?;
        Ok((config, end))
    });
    if let Some(exporter) = exporter {
        match &ran {
            Ok((_, RunEnd::Finished { report, .. })) => exporter.finish(Some(report)),
            Ok(_) => exporter.finish_nothing_to_do(),
            Err(_) => exporter.finish(None),
        }
    }
    let (config, end) = ran?;
    Ok(outcome(end, &config.writers.dir, shard, fraction))
}

/// How the run ended, as an exit code, said on stderr.
fn outcome(end: RunEnd, dir: &std::path::Path, shard: ShardSpec, fraction: f64) -> Outcome {
    match end {
        RunEnd::AlreadyComplete => {
            logging::notice(&format!(
                "{}: this run is already complete (_SUCCESS); nothing to do",
                dir.display()
            ));
            Outcome::Done
        }
        RunEnd::ShardAlreadyDone(commit) => {
            logging::notice(&format!("shard {shard} was already done"));
            report_commit(dir, &commit, fraction)
        }
        RunEnd::Finished { report, commit } => {
            println!("{}", report.summary());
            match &commit {
                CommitState::Committed(_) => report_commit(dir, &commit, fraction),
                CommitState::Waiting(_) => {
                    report_commit(dir, &commit, fraction);
                    let rejects = exit::completed(report.rows_rejected, report.rows_in, fraction);
                    let skipped = skipped_outcome(report.skipped_files.len() as u64, dir);
                    Outcome::most_severe([rejects, skipped])
                }
            }
        }
    }
}

/// Says what the commit found; the outcome of a committed run.
fn report_commit(dir: &std::path::Path, commit: &CommitState, fraction: f64) -> Outcome {
    match commit {
        CommitState::Committed(totals) => {
            let outcome = exit::completed(totals.rows_rejected, totals.rows_in, fraction);
            if totals.rows_rejected > 0 {
                logging::notice(&format!(
                    "{} row(s) rejected; see {}",
                    totals.rows_rejected,
                    dir.join("_rejects.parquet").display()
                ));
            }
            Outcome::most_severe([outcome, skipped_outcome(totals.skipped_files, dir)])
        }
        CommitState::Waiting(missing) => {
            logging::notice(&format!(
                "this shard is done; the run is committed when {} finish",
                describe_missing(missing)
            ));
            Outcome::Done
        }
    }
}

/// Input files left out (`--on-bad-file skip`) need a person, as rejects
/// beyond the allowed fraction do: exit code 3, whichever attempt commits.
fn skipped_outcome(skipped: u64, dir: &std::path::Path) -> Outcome {
    if skipped == 0 {
        return Outcome::Done;
    }
    logging::notice(&format!(
        "{skipped} input file(s) skipped; see {}",
        dir.join("_rejects.parquet").display()
    ));
    Outcome::TooManyRejects
}

pub(super) fn describe_missing(missing: &[u32]) -> String {
    let list: Vec<String> = missing.iter().map(|i| format!("shard {i}")).collect();
    list.join(", ")
}

/// `--local-shards`: this program's own arguments, one child per shard.
fn run_local_shards(local: LocalShards) -> Result<Outcome> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let gpus = if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some_and(|v| v.is_empty()) {
        0
    } else {
        worker::cuda_device_count()
    };
    Ok(crate::local_shards::run(local, gpus, &args)?)
}
