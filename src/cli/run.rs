//! `segpredict run`: the pipeline file with the command line applied, one
//! process's shard or several local shard processes, and how the run ended
//! as an exit code a scheduler can act on.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use segpredict_core::exit::Result;

use super::RunArgs;
use crate::local_shards::LocalShards;
use crate::logging;
use crate::metrics;
use crate::pipeline::{self, RunEnd, RunOptions};
use segpredict_checkpoint::commit::{CommitState, RunSummary};
use segpredict_core::exit::{self, Error, Outcome};
use segpredict_core::shard::{ShardSpec, COMPLETION_INDEX_VAR};
use segpredict_worker as worker;

pub(super) fn run(args: RunArgs, cancel: Arc<AtomicBool>) -> Result<Outcome> {
    if let Some(local) = args.local_shards {
        return run_local_shards(local);
    }
    let (shard, fraction) = (shard_of(&args)?, reject_fraction(&args)?);
    // Every line this process logs names its shard: a sharded job's logs,
    // merged, can be told apart (in JSON, `spans[].shard`). The spans are
    // at the ERROR level only so that any filter keeping a line keeps them.
    let _shard = tracing::error_span!("shard", shard = %shard).entered();
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
        let options = RunOptions {
            shard,
            wait_for_lock: args.wait_for_lock.unwrap_or_default(),
            cancel: None,
        };
        let end = pipeline::run(&config, allocator, cancel, options)?;
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

/// The shard this process predicts: `--shard I/N`, `--shards N` with the
/// index from the Indexed Job, or the whole input.
pub(super) fn shard_of(args: &RunArgs) -> Result<ShardSpec> {
    Ok(match (args.shard, args.shards, args.local_shards) {
        (Some(shard), _, _) => shard,
        (None, Some(count), _) => {
            let index = std::env::var(COMPLETION_INDEX_VAR).ok();
            ShardSpec::from_completion_index(count, index.as_deref())?
        }
        // `check --local-shards N`: every shard shares the verdict's manifest.
        (None, None, Some(LocalShards::Count(count))) => ShardSpec::new(0, count)?,
        (None, None, Some(LocalShards::AllGpus)) => {
            let gpus = u32::try_from(worker::cuda_device_count()).unwrap_or(1);
            ShardSpec::new(0, gpus.max(1))?
        }
        (None, None, None) => ShardSpec::WHOLE,
    })
}

pub(super) fn reject_fraction(args: &RunArgs) -> Result<f64> {
    let fraction = args.max_reject_fraction;
    if !(0.0..=1.0).contains(&fraction) {
        return Err(Error::permanent(format!(
            "--max-reject-fraction must be between 0 and 1, not {fraction}"
        )));
    }
    Ok(fraction)
}

/// How the run ended, as an exit code, said on stderr.
fn outcome(end: RunEnd, dir: &std::path::Path, shard: ShardSpec, fraction: f64) -> Outcome {
    match end {
        RunEnd::AlreadyComplete(summary) => {
            logging::notice(&format!(
                "{}: this run is already complete (_SUCCESS); nothing to do",
                dir.display()
            ));
            recorded_outcome(summary.as_ref(), dir, fraction)
        }
        RunEnd::ShardAlreadyDone(commit) => {
            logging::notice(&format!("shard {shard} was already done"));
            report_commit(dir, &commit, fraction)
        }
        RunEnd::Finished { report, commit } => {
            let fields = serde_json::json!({ "report": &*report });
            logging::result(&report.summary(), "run finished", fields);
            match &commit {
                CommitState::Committed(_) => report_commit(dir, &commit, fraction),
                CommitState::Waiting(_) => {
                    report_commit(dir, &commit, fraction);
                    let rows = report.rows;
                    let rejects = exit::completed(rows.rows_rejected, rows.rows_in, fraction);
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
            let rows = totals.rows;
            let outcome = exit::completed(rows.rows_rejected, rows.rows_in, fraction);
            if rows.rows_rejected > 0 {
                logging::notice(&format!(
                    "{} row(s) rejected; see {}",
                    rows.rows_rejected,
                    dir.join(segpredict_checkpoint::layout::REJECTS).display()
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

/// A finished run's exit code, again: the one its commit gave (rejects
/// over the fraction, skipped files: 3), from the totals it recorded, so
/// the same command on a finished run says what the first one said.
pub(super) fn recorded_outcome(
    summary: Option<&RunSummary>,
    dir: &std::path::Path,
    fraction: f64,
) -> Outcome {
    match summary {
        Some(summary) => report_commit(dir, &CommitState::Committed(summary.totals()), fraction),
        None => Outcome::Done,
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
        dir.join(segpredict_checkpoint::layout::REJECTS).display()
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
