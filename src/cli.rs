//! The command line: flags mirror the CLI, are turned once into a
//! [`PipelineConfig`], and no stage ever sees clap.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::commit::{commit_run, CommitState, Totals};
use crate::config::{ConfigError, Overrides, PipelineConfig};
use crate::exit::{self, Failure, Outcome, Permanent};
use crate::local_shards::{LocalShards, LocalShardsError};
use crate::message::{ShardError, ShardSpec, COMPLETION_INDEX_VAR};
use crate::pipeline::{self, RunEnd, RunOptions};
use crate::reader::{OnBadFile, ReaderError};
use crate::worker::WorkerError;
use crate::writer::checkpoint::CheckpointError;
use crate::writer::done::ScanError;
use crate::writer::manifest::ManifestError;
use crate::writer::WriterError;
use crate::{report, worker};

#[derive(Debug, Parser)]
#[command(
    name = "segpredict",
    version,
    about = "Batch prediction over Parquet with a segment budget"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Predict every row of the pipeline's input and write Parquet.
    Run(RunArgs),
    /// Measure the model's device memory against segments per batch and
    /// print the largest budget that keeps a run under a memory target.
    Calibrate(CalibrateArgs),
    /// Commit a sharded run by hand: check every shard's accounting and
    /// write `_SUCCESS`, or say which shards are missing.
    Commit(CommitArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum BadFile {
    Fail,
    Skip,
}

#[derive(Debug, clap::Args)]
struct CommitArgs {
    /// The run's output directory.
    dir: PathBuf,
}

#[derive(Debug, clap::Args)]
struct CalibrateArgs {
    /// The pipeline file (TOML): its model, dtype and input columns are used.
    pipeline: PathBuf,
    /// Device memory target, e.g. 20GiB or 512MiB.
    #[arg(long)]
    gpu_memory: String,
    /// cuda or cuda:N (overrides [model] device).
    #[arg(long)]
    device: Option<String>,
    /// Also write the measurements and the fit as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The pipeline file (TOML).
    pipeline: PathBuf,
    /// Input file, directory or glob (overrides [readers] path).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Output directory (overrides [writers] dir).
    #[arg(long)]
    output: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N (overrides [model] device).
    #[arg(long)]
    device: Option<String>,
    /// Segment budget per batch (overrides [bucketing] max_segments).
    #[arg(long)]
    max_segments: Option<usize>,
    /// Reader and writer threads (overrides both).
    #[arg(long)]
    threads: Option<usize>,
    /// Replace another run's output in the output directory (the same
    /// run's output is resumed, never replaced).
    #[arg(long)]
    overwrite: bool,
    /// Predict shard I of N (0-based) of the input; all shards write into
    /// one directory and the last one to finish commits the run.
    #[arg(long, value_name = "I/N", conflicts_with_all = ["shards", "local_shards"])]
    shard: Option<ShardSpec>,
    /// Predict one of N shards, the index taken from JOB_COMPLETION_INDEX
    /// (as a Kubernetes Indexed Job sets it).
    #[arg(long, value_name = "N", conflicts_with = "local_shards")]
    shards: Option<u32>,
    /// Start N shard processes of this run here, one per GPU (`all`: one
    /// per visible GPU); exits with the most severe of their codes.
    #[arg(long, value_name = "N|all")]
    local_shards: Option<LocalShards>,
    /// An input file that cannot be read: `fail` ends the run naming it
    /// (overrides [readers] on_bad_file); `skip` leaves it out, names it in
    /// the report and predicts the other files (exit code 3).
    #[arg(long, value_enum)]
    on_bad_file: Option<BadFile>,
    /// The fraction of input rows that may be rejected with exit code 0;
    /// more gives exit code 3. Default 0: any reject gives 3.
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    max_reject_fraction: f64,
    /// Device memory target; with it the budget is calibrated on the device
    /// (as `max_segments = "auto"` with `gpu_memory`).
    #[arg(long)]
    gpu_memory: Option<String>,
}

pub fn main() -> ExitCode {
    // First: a signal from here on cancels the run and decides the code.
    let cancel = Arc::new(AtomicBool::new(false));
    let signals = crate::signals::install(cancel.clone());
    crate::reader::catch_decoder_panics();
    init_tracing();
    let cli = Cli::parse();
    let result = signals
        .context("installing the SIGINT/SIGTERM handler")
        .and_then(|()| match cli.command {
            Command::Run(args) => run(args, cancel),
            Command::Calibrate(args) => calibrate(args).map(|()| Outcome::Done),
            Command::Commit(args) => commit(&args.dir),
        });
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => match crate::signals::received() {
            Some(signal) if e.downcast_ref::<pipeline::Interrupted>().is_some() => {
                eprintln!("segpredict: {e:#}; the output directory is resumable");
                Outcome::Interrupted(signal)
            }
            _ => {
                eprintln!("segpredict: error: {e:#}");
                Outcome::Failed(classify(&e))
            }
        },
    };
    ExitCode::from(outcome.code())
}

/// Whether running the same command again may succeed, from the error's
/// chain: a cause a retry cannot change (settings, inputs, model, a refused
/// directory, a corrupt file) is permanent; I/O and device failures are not.
fn classify(error: &anyhow::Error) -> Failure {
    let permanent = error.chain().any(|cause| {
        if cause.is::<Permanent>() || cause.is::<ConfigError>() || cause.is::<ShardError>() {
            return true;
        }
        if let Some(e) = cause.downcast_ref::<CheckpointError>() {
            return e.is_permanent();
        }
        if let Some(e) = cause.downcast_ref::<ReaderError>() {
            return !matches!(e, ReaderError::Io { .. });
        }
        if let Some(e) = cause.downcast_ref::<WorkerError>() {
            return e.is_permanent();
        }
        if let Some(e) = cause.downcast_ref::<WriterError>() {
            return matches!(e, WriterError::Config(_) | WriterError::UnknownLabel { .. });
        }
        if let Some(e) = cause.downcast_ref::<ManifestError>() {
            return matches!(e, ManifestError::Parse { .. });
        }
        if let Some(e) = cause.downcast_ref::<LocalShardsError>() {
            return e.is_permanent();
        }
        cause.is::<ScanError>()
            || cause.is::<crate::bucketing::BucketingError>()
            || cause.is::<crate::worker::calibrate::CalibrationError>()
    });
    match permanent {
        true => Failure::Permanent,
        false => Failure::Retryable,
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SEGPREDICT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour codes help a person at a terminal and garble a job's log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}

fn run(args: RunArgs, cancel: Arc<AtomicBool>) -> Result<Outcome> {
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
    let config = run_config(args)?;
    let allocator = worker::configure_allocator(&config.model);
    let end = pipeline::run(&config, allocator, cancel, RunOptions { shard })?;
    Ok(outcome(end, &config.writers.dir, shard, fraction))
}

/// The pipeline file with the command line's values applied.
fn run_config(args: RunArgs) -> Result<PipelineConfig> {
    let mut config = PipelineConfig::load(&args.pipeline)?;
    config.apply(&Overrides {
        input: args.input,
        output: args.output,
        device: args.device,
        max_segments: args.max_segments,
        threads: args.threads,
    });
    config.writers.overwrite |= args.overwrite;
    match args.on_bad_file {
        Some(BadFile::Fail) => config.readers.on_bad_file = OnBadFile::Fail,
        Some(BadFile::Skip) => config.readers.on_bad_file = OnBadFile::Skip,
        None => {}
    }
    if let Some(target) = args.gpu_memory {
        config.bucketing.gpu_memory = Some(target);
        config.auto_budget = true;
    }
    Ok(config)
}

/// How the run ended, as an exit code, said on stderr.
fn outcome(end: RunEnd, dir: &std::path::Path, shard: ShardSpec, fraction: f64) -> Outcome {
    match end {
        RunEnd::AlreadyComplete => {
            eprintln!(
                "segpredict: {}: this run is already complete (_SUCCESS); nothing to do",
                dir.display()
            );
            Outcome::Done
        }
        RunEnd::ShardAlreadyDone(commit) => {
            eprintln!("segpredict: shard {shard} was already done");
            report_commit(dir, &commit, fraction)
        }
        RunEnd::Finished { report, commit } => {
            println!("{}", report.summary());
            let shard_outcome = match &commit {
                CommitState::Committed(_) => report_commit(dir, &commit, fraction),
                CommitState::Waiting(_) => {
                    report_commit(dir, &commit, fraction);
                    exit::completed(report.rows_rejected, report.rows_in, fraction)
                }
            };
            if report.skipped_files.is_empty() {
                return shard_outcome;
            }
            eprintln!(
                "segpredict: {} input file(s) skipped; see {}",
                report.skipped_files.len(),
                dir.join("_report.json").display()
            );
            Outcome::most_severe([shard_outcome, Outcome::TooManyRejects])
        }
    }
}

/// Says what the commit found; the outcome of a committed run.
fn report_commit(dir: &std::path::Path, commit: &CommitState, fraction: f64) -> Outcome {
    match commit {
        CommitState::Committed(totals) => {
            let outcome = exit::completed(totals.rows_rejected, totals.rows_in, fraction);
            if totals.rows_rejected > 0 {
                eprintln!(
                    "segpredict: {} row(s) rejected; see {}",
                    totals.rows_rejected,
                    dir.join("_rejects.parquet").display()
                );
            }
            outcome
        }
        CommitState::Waiting(missing) => {
            eprintln!(
                "segpredict: this shard is done; the run is committed when {} finish",
                describe_missing(missing)
            );
            Outcome::Done
        }
    }
}

fn describe_missing(missing: &[u32]) -> String {
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

/// `segpredict commit DIR`.
fn commit(dir: &std::path::Path) -> Result<Outcome> {
    match commit_run(dir)? {
        CommitState::Committed(Totals {
            rows_in,
            rows_out,
            rows_rejected,
            ..
        }) => {
            println!(
                "{}: committed: {rows_in} rows in, {rows_out} predicted, {rows_rejected} rejected",
                dir.display()
            );
            Ok(Outcome::Done)
        }
        CommitState::Waiting(missing) => Err(anyhow::anyhow!(
            "{}: cannot commit yet: {} not done",
            dir.display(),
            describe_missing(&missing)
        )),
    }
}

fn calibrate(args: CalibrateArgs) -> Result<()> {
    let mut config = PipelineConfig::load(&args.pipeline)?;
    config.apply(&Overrides {
        device: args.device,
        ..Overrides::default()
    });
    let allocator = worker::configure_allocator(&config.model);
    let calibration = pipeline::calibrate(&config, &args.gpu_memory)?;
    println!(
        "{}",
        report::describe_calibration(&calibration, allocator.as_deref())
    );
    if let Some(path) = args.json {
        let text = serde_json::to_string_pretty(&report::CalibrationReport::from(&calibration))?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
