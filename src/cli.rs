//! The command line: flags mirror the CLI, are turned once into a
//! [`PipelineConfig`], and no stage ever sees clap. `run.rs` runs a
//! pipeline and says how it ended; `tools.rs` holds the other commands.

mod run;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::config::{Overrides, PipelineConfig};
use crate::local_shards::LocalShards;
use crate::logging::{self, LogFormat};
use crate::metrics;
use crate::pipeline;
use segpredict_core::exit::{self, Context, Outcome};
use segpredict_core::shard::ShardSpec;
use segpredict_reader::OnBadFile;

#[derive(Debug, Parser)]
#[command(
    name = "segpredict",
    version,
    about = "Batch prediction over Parquet with a segment budget"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How stderr lines are written: text for a person, json for a log
    /// pipeline (one object per line, no colour, no progress bar).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Predict every row of the pipeline's input and write Parquet.
    Run(RunArgs),
    /// Measure the model's device memory against segments per batch and
    /// print the largest budget that keeps a run under a memory target.
    Calibrate(CalibrateArgs),
    /// Time the model alone on the pipeline's device: batches of one shape
    /// run back to back with their inputs already on the device, the
    /// ceiling a run at that shape can approach.
    Speed(SpeedArgs),
    /// Commit a sharded run by hand: check every shard's accounting and
    /// write `_SUCCESS`, or say which shards are missing.
    Commit(CommitArgs),
    /// Check everything `run` checks before its first row (input files and
    /// columns, model, labels against the model's outputs, device, output
    /// directory) and stop; exit codes as `run`.
    Check(RunArgs),
    /// Describe Parquet input without predicting: rows, schema, suggested
    /// columns, segments per row and, with a pipeline, its batch plan.
    Inspect(InspectArgs),
    /// Print a shell completion script (e.g. `segpredict completions bash >
    /// /etc/bash_completion.d/segpredict`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `segpredict man > segpredict.1`.
    Man,
}

/// The pipeline file and the values the command line overrides in it,
/// shared by `run` and `check` so both read the same configuration.
#[derive(Debug, clap::Args)]
struct PipelineArgs {
    /// The pipeline file (TOML).
    pipeline: PathBuf,
    /// Input file, directory or glob [default: [readers] path in the pipeline file]
    #[arg(long)]
    input: Option<PathBuf>,
    /// Output directory [default: [writers] dir in the pipeline file]
    #[arg(long)]
    output: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N [default: [model] device in the pipeline file]
    #[arg(long)]
    device: Option<String>,
    /// Segment budget per batch [default: [bucketing] max_segments in the pipeline file]
    #[arg(long)]
    max_segments: Option<usize>,
    /// Replace another run's output in the output directory (the same
    /// run's output is resumed, never replaced) [default: [writers]
    /// overwrite in the pipeline file, else off].
    #[arg(long)]
    overwrite: bool,
    /// An input file that cannot be read: `fail` ends the run naming it
    /// (overrides [readers] on_bad_file); `skip` leaves it out, names it in
    /// the report and predicts the other files (exit code 3) [default:
    /// [readers] on_bad_file in the pipeline file, else fail].
    #[arg(long, value_enum)]
    on_bad_file: Option<BadFile>,
    /// Device memory target; with it the budget is calibrated on the device
    /// (as `max_segments = "auto"` with `gpu_memory`) [default: none].
    #[arg(long)]
    gpu_memory: Option<String>,
}

impl PipelineArgs {
    /// The pipeline file with these values applied (`threads`: `run`'s
    /// reader and writer threads).
    fn load(self, threads: Option<usize>) -> exit::Result<PipelineConfig> {
        let mut config = PipelineConfig::load(&self.pipeline)?;
        config.apply(&Overrides {
            input: self.input,
            output: self.output,
            device: self.device,
            max_segments: self.max_segments,
            threads,
        });
        config.writers.overwrite |= self.overwrite;
        match self.on_bad_file {
            Some(BadFile::Fail) => config.readers.on_bad_file = OnBadFile::Fail,
            Some(BadFile::Skip) => config.readers.on_bad_file = OnBadFile::Skip,
            None => {}
        }
        if let Some(target) = self.gpu_memory {
            config.bucketing.gpu_memory = Some(target);
            config.auto_budget = true;
        }
        Ok(config)
    }
}

#[derive(Debug, clap::Args)]
struct InspectArgs {
    /// Parquet files, directories or globs (default: the pipeline's input).
    paths: Vec<PathBuf>,
    /// A pipeline file: show how it would batch the input.
    #[arg(long)]
    pipeline: Option<PathBuf>,
    /// A calibration saved by `calibrate --json`: the expected peak memory,
    /// and the budget for `max_segments = "auto"`.
    #[arg(long)]
    calibration: Option<PathBuf>,
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
    /// cuda or cuda:N [default: [model] device in the pipeline file]
    #[arg(long)]
    device: Option<String>,
    /// Also write the measurements and the fit as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct SpeedArgs {
    /// The pipeline file (TOML): its model, dtype, device and input columns.
    pipeline: PathBuf,
    /// Segments a batch [default: the pipeline's budget on the device; with
    /// max_segments = "auto", the uncalibrated 4096: pass the calibrated one]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    segments: Option<u64>,
    /// Rows a batch [default: segments / 18, the sample's median row]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    rows: Option<u64>,
    /// Batches timed, after 5 untimed ones.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    batches: u64,
    /// CUDA streams the batches take turns on (a model that waits on the
    /// device between batches may gain from a second one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=8))]
    streams: u64,
    /// auto, cpu, cuda or cuda:N [default: [model] device in the pipeline file]
    #[arg(long)]
    device: Option<String>,
    /// Time the model on the segments of this input's first rows (a Parquet
    /// file or folder, read with the pipeline's columns) instead of a byte
    /// pattern: a model can take longer on real data.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Also write the measurement as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Reader and writer threads [default: [readers] threads and [writers]
    /// threads in the pipeline file].
    #[arg(long)]
    threads: Option<usize>,
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
    /// The fraction of input rows that may be rejected with exit code 0;
    /// more gives exit code 3. Default 0: any reject gives 3.
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    max_reject_fraction: f64,
    /// When another process holds this shard's lock (a lease in a bucket
    /// until it expires), wait up to DURATION for it (`90s`, `10m`) instead
    /// of exiting 1 at once naming the holder and when its lease expires.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    wait_for_lock: Option<std::time::Duration>,
    #[command(flatten)]
    metrics: MetricsArgs,
}

fn duration(text: &str) -> Result<std::time::Duration, humantime::DurationError> {
    humantime::parse_duration(text)
}

/// Where Prometheus metrics go (none by default).
#[derive(Debug, clap::Args)]
struct MetricsArgs {
    /// Write Prometheus metrics to this file, rewritten atomically every few
    /// seconds and at the end (for node_exporter's textfile collector: name
    /// it `*.prom` in the collector's directory) [default: none].
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<PathBuf>,
    /// Seconds between rewrites of `--metrics-file` during the run (match
    /// your scrape interval).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = positive_seconds)]
    metrics_every: f64,
    /// Push Prometheus metrics to this Pushgateway (e.g.
    /// http://pushgateway:9091) every minute and at the end; plain HTTP
    /// [default: none].
    #[arg(long, value_name = "URL")]
    pushgateway: Option<String>,
    /// The `job` label of pushed metrics; the `pipeline` label is the
    /// pipeline file's name without `.toml`.
    #[arg(long, value_name = "NAME", default_value = "segpredict")]
    pushgateway_job: String,
}

impl MetricsArgs {
    fn targets(&self, pipeline: &std::path::Path, shard: ShardSpec) -> metrics::MetricsTargets {
        metrics::MetricsTargets {
            file: self.metrics_file.as_deref().map(|f| shard_file(f, shard)),
            file_every: std::time::Duration::from_secs_f64(self.metrics_every),
            pushgateway: self.pushgateway.clone(),
            job: self.pushgateway_job.clone(),
            pipeline: pipeline
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            shard: shard.is_sharded().then_some(shard),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a positive number of seconds")]
struct NotSeconds(String);

fn positive_seconds(text: &str) -> Result<f64, NotSeconds> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(s),
        _ => Err(NotSeconds(text.to_string())),
    }
}

/// A sharded run's metrics file: `NAME.shard-I.EXT`, so the local shards of
/// one host (`--local-shards`) do not overwrite each other's file.
fn shard_file(file: &std::path::Path, shard: ShardSpec) -> PathBuf {
    if !shard.is_sharded() {
        return file.to_path_buf();
    }
    let stem = file.file_stem().unwrap_or_default().to_string_lossy();
    let name = match file.extension() {
        Some(ext) => format!("{stem}.shard-{}.{}", shard.index, ext.to_string_lossy()),
        None => format!("{stem}.shard-{}", shard.index),
    };
    file.with_file_name(name)
}

pub fn main() -> ExitCode {
    // First: a signal from here on cancels the run and decides the code.
    let cancel = Arc::new(AtomicBool::new(false));
    let signals = crate::signals::install(cancel.clone());
    segpredict_reader::catch_decoder_panics();
    let cli = Cli::parse();
    logging::init(cli.log_format);
    let result = signals
        .context("installing the SIGINT/SIGTERM handler")
        .and_then(|()| match cli.command {
            Command::Run(args) => run::run(args, cancel),
            Command::Calibrate(args) => tools::calibrate(args).map(|()| Outcome::Done),
            Command::Commit(args) => tools::commit(&args.dir),
            Command::Check(args) => tools::check(args),
            Command::Speed(args) => tools::speed(args).map(|()| Outcome::Done),
            Command::Inspect(args) => tools::inspect(args).map(|()| Outcome::Done),
            Command::Completions { shell } => tools::completions(shell).map(|()| Outcome::Done),
            Command::Man => tools::man().map(|()| Outcome::Done),
        });
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => match crate::signals::received() {
            Some(signal) if e.downcast_ref::<pipeline::Interrupted>().is_some() => {
                logging::notice(&format!("{e:#}; the output directory is resumable"));
                Outcome::Interrupted(signal)
            }
            _ => {
                logging::error(&e);
                Outcome::Failed(e.failure())
            }
        },
    };
    ExitCode::from(outcome.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigError;
    use crate::local_shards::LocalShardsError;
    use parquet::errors::ParquetError;
    use segpredict_checkpoint::checkpoint::CheckpointError;
    use segpredict_checkpoint::commit::CommitError;
    use segpredict_checkpoint::log::LogError;
    use segpredict_checkpoint::manifest::ManifestError;
    use segpredict_checkpoint::{FileError, StoreError};
    use segpredict_core::exit::{Error, Failure};
    use segpredict_core::shard::ShardError;
    use segpredict_reader::{DecodeError, ReaderError};
    use segpredict_report::ReportError;
    use segpredict_worker::WorkerError;
    use segpredict_writers::WriterError;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "test")
    }

    fn store(kind: std::io::ErrorKind) -> StoreError {
        StoreError {
            op: "writing",
            location: "out/x".into(),
            source: io(kind),
        }
    }

    /// A read that failed below the parquet crate (it keeps the
    /// `std::io::Error` as its source).
    fn parquet_io() -> ParquetError {
        io(std::io::ErrorKind::TimedOut).into()
    }

    type Case = (Error, Failure);

    /// The command line's, the input's, the model's and the shards' errors.
    fn input_cases() -> Vec<Case> {
        use std::io::ErrorKind::NotFound;
        let path = std::path::PathBuf::from("in.parquet");
        vec![
            (Error::permanent("usage"), Failure::Permanent),
            (Error::retryable("shards running"), Failure::Retryable),
            (crate::pipeline::Interrupted.into(), Failure::Retryable),
            (
                io(std::io::ErrorKind::BrokenPipe).into(),
                Failure::Retryable,
            ),
            (io(NotFound).into(), Failure::Permanent),
            (ShardError::NoShards.into(), Failure::Permanent),
            (
                ConfigError::Read {
                    path: path.clone(),
                    source: io(NotFound),
                }
                .into(),
                Failure::Permanent,
            ),
            (
                WorkerError::ModelMissing { path: path.clone() }.into(),
                Failure::Permanent,
            ),
            (LocalShardsError::NoGpus.into(), Failure::Permanent),
            (
                segpredict_bucketing::BucketingError::ZeroBudget.into(),
                Failure::Permanent,
            ),
            (
                segpredict_worker::calibrate::CalibrationError::NotCuda.into(),
                Failure::Permanent,
            ),
        ]
    }

    /// The reader's: a read that failed is retryable, a bad file is not.
    fn reader_cases() -> Vec<Case> {
        use std::io::ErrorKind::NotFound;
        let path = std::path::PathBuf::from("in.parquet");
        vec![
            (
                ReaderError::Missing { path: path.clone() }.into(),
                Failure::Permanent,
            ),
            (
                ReaderError::Io {
                    path: path.clone(),
                    source: io(NotFound),
                }
                .into(),
                Failure::Retryable,
            ),
            (
                ReaderError::NotParquet {
                    path: path.clone(),
                    source: parquet_io(),
                }
                .into(),
                Failure::Retryable,
            ),
            (
                ReaderError::NotParquet {
                    path: path.clone(),
                    source: ParquetError::General("bad magic".into()),
                }
                .into(),
                Failure::Permanent,
            ),
            (
                ReaderError::Decode {
                    path: path.clone(),
                    row_group: 3,
                    source: DecodeError::Parquet(parquet_io()),
                }
                .into(),
                Failure::Retryable,
            ),
            (
                ReaderError::Decode {
                    path: path.clone(),
                    row_group: 3,
                    source: DecodeError::Corrupt("page".into()),
                }
                .into(),
                Failure::Permanent,
            ),
        ]
    }

    /// The output's and the checkpoint's errors.
    fn output_cases() -> Vec<Case> {
        use std::io::ErrorKind::{NotFound, PermissionDenied, StorageFull};
        vec![
            (WriterError::Config("x".into()).into(), Failure::Permanent),
            (
                WriterError::File(FileError::Store(store(StorageFull))).into(),
                Failure::Retryable,
            ),
            (store(StorageFull).into(), Failure::Retryable),
            (store(PermissionDenied).into(), Failure::Permanent),
            (LogError::Store(store(NotFound)).into(), Failure::Retryable),
            (
                LogError::Malformed {
                    location: "p".into(),
                    source: serde_json::from_str::<u8>("x").unwrap_err(),
                }
                .into(),
                Failure::Permanent,
            ),
            (
                ManifestError::Store(store(StorageFull)).into(),
                Failure::Retryable,
            ),
        ]
    }

    /// The checkpoint's, the commit's and the report's.
    fn checkpoint_cases() -> Vec<Case> {
        use std::io::ErrorKind::StorageFull;
        vec![
            (
                CheckpointError::Foreign {
                    location: "o".into(),
                    found: "f".into(),
                }
                .into(),
                Failure::Permanent,
            ),
            (
                CheckpointError::Locked {
                    location: "o".into(),
                    shard: ShardSpec::WHOLE,
                    holder: segpredict_checkpoint::store::Holder("pid 1".into()),
                }
                .into(),
                Failure::Retryable,
            ),
            (
                CommitError::Accounting {
                    location: "o".into(),
                    problem: "x".into(),
                }
                .into(),
                Failure::Permanent,
            ),
            (
                CommitError::Store(store(StorageFull)).into(),
                Failure::Retryable,
            ),
            (
                LogError::Fenced {
                    shard: segpredict_core::shard::ShardSpec::WHOLE,
                    epoch: 1,
                    newer: 2,
                    holder: "pid 7 on h".into(),
                    started: "2026-12-07T00:00:00Z".into(),
                }
                .into(),
                Failure::Retryable,
            ),
            (
                ReportError::Json(serde_json::from_str::<u8>("x").unwrap_err()).into(),
                Failure::Permanent,
            ),
        ]
    }

    /// One case per error type (and per variant where the class depends on
    /// it), wrapped in context as the pipeline wraps them: the class the
    /// type gave survives to `main`. (A type without a class does not
    /// convert at all: the doc tests of `segpredict_core::exit::Classify`.)
    #[test]
    fn each_error_type_says_whether_a_retry_can_help() {
        let cases = [
            input_cases(),
            reader_cases(),
            output_cases(),
            checkpoint_cases(),
        ];
        for (error, expected) in cases.into_iter().flatten() {
            let error = error.context("running the pipeline");
            assert_eq!(error.failure(), expected, "{error:#}");
        }
    }

    #[test]
    fn each_shard_writes_its_own_metrics_file() {
        let file = std::path::Path::new("/m/segpredict.prom");
        assert_eq!(shard_file(file, ShardSpec::WHOLE), file);
        assert_eq!(
            shard_file(file, ShardSpec::new(1, 2).unwrap()),
            std::path::Path::new("/m/segpredict.shard-1.prom")
        );
    }
}
