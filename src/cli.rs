//! The command line: flags mirror the CLI, are turned once into a
//! [`PipelineConfig`], and no stage ever sees clap.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};

use crate::config::{Overrides, PipelineConfig};
use crate::logging::{self, LogFormat};
use crate::{metrics, pipeline, report, worker};

/// Exit codes a batch scheduler can act on.
pub const EXIT_OK: u8 = 0;
pub const EXIT_ERROR: u8 = 1;
/// The run completed and every row is accounted for, but some rows were
/// rejected (see `_rejects.parquet`).
pub const EXIT_REJECTS: u8 = 3;
pub const EXIT_INTERRUPTED: u8 = 130;

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
    /// Check everything `run` checks before its first row (input files and
    /// columns, model, labels against the model's outputs, device, output
    /// directory) and stop; exit codes as `run`.
    Check(CheckArgs),
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

#[derive(Debug, clap::Args)]
struct CheckArgs {
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
    /// As `run --overwrite`: earlier output would be replaced.
    #[arg(long)]
    overwrite: bool,
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
struct RunArgs {
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
    /// Reader and writer threads [default: [readers] threads and [writers]
    /// threads in the pipeline file].
    #[arg(long)]
    threads: Option<usize>,
    /// Replace an earlier run's output in the output directory [default:
    /// [writers] overwrite in the pipeline file, else off].
    #[arg(long)]
    overwrite: bool,
    /// Device memory target; with it the budget is calibrated on the device
    /// (as `max_segments = "auto"` with `gpu_memory`) [default: none].
    #[arg(long)]
    gpu_memory: Option<String>,
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// Where Prometheus metrics go (none by default).
#[derive(Debug, clap::Args)]
struct MetricsArgs {
    /// Write Prometheus metrics to this file, rewritten atomically every few
    /// seconds and at the end (for node_exporter's textfile collector: name
    /// it `*.prom` in the collector's directory) [default: none].
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<PathBuf>,
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
    fn targets(&self, pipeline: &std::path::Path) -> metrics::MetricsTargets {
        metrics::MetricsTargets {
            file: self.metrics_file.clone(),
            pushgateway: self.pushgateway.clone(),
            job: self.pushgateway_job.clone(),
            pipeline: pipeline
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format);
    let cancel = Arc::new(AtomicBool::new(false));
    let result = match cli.command {
        Command::Run(args) => run(args, cancel.clone()),
        Command::Calibrate(args) => calibrate(args).map(|()| EXIT_OK),
        Command::Check(args) => check(args).map(|()| EXIT_OK),
        Command::Inspect(args) => inspect(args).map(|()| EXIT_OK),
        Command::Completions { shell } => completions(shell).map(|()| EXIT_OK),
        Command::Man => man().map(|()| EXIT_OK),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.downcast_ref::<pipeline::Interrupted>().is_some() => {
            logging::notice(&format!("{e:#}"));
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Err(e) => {
            logging::error(&e);
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn run(args: RunArgs, cancel: Arc<AtomicBool>) -> Result<u8> {
    let exporter = metrics::Exporter::start(args.metrics.targets(&args.pipeline));
    let result = predict(args, cancel);
    if let Some(exporter) = exporter {
        exporter.finish(result.as_ref().ok().map(|(report, _)| report));
    }
    let (report, rejects_path) = result?;
    println!("{}", report.summary());
    Ok(if report.rows_rejected > 0 {
        logging::notice(&format!(
            "{} row(s) rejected; see {}",
            report.rows_rejected,
            rejects_path.display()
        ));
        EXIT_REJECTS
    } else {
        EXIT_OK
    })
}

/// The run itself, and where its rejects went.
fn predict(args: RunArgs, cancel: Arc<AtomicBool>) -> Result<(report::RunReport, PathBuf)> {
    let mut config = PipelineConfig::load(&args.pipeline)?;
    config.apply(&Overrides {
        input: args.input,
        output: args.output,
        device: args.device,
        max_segments: args.max_segments,
        threads: args.threads,
    });
    config.writers.overwrite |= args.overwrite;
    if let Some(target) = args.gpu_memory {
        config.bucketing.gpu_memory = Some(target);
        config.auto_budget = true;
    }
    let allocator = worker::configure_allocator(&config.model);
    let on_signal = cancel.clone();
    ctrlc::set_handler(move || on_signal.store(true, Ordering::Relaxed))
        .context("installing the Ctrl-C handler")?;
    let report = pipeline::run(&config, allocator, cancel)?;
    Ok((report, config.writers.layout().rejects()))
}

fn check(args: CheckArgs) -> Result<()> {
    let mut config = PipelineConfig::load(&args.pipeline)?;
    config.apply(&Overrides {
        input: args.input,
        output: args.output,
        device: args.device,
        max_segments: args.max_segments,
        threads: None,
    });
    config.writers.overwrite |= args.overwrite;
    worker::configure_allocator(&config.model);
    let checked = pipeline::check(&config)?;
    println!(
        "ok: {} file(s), {} rows in {} row groups; model answers {} labels on {}; output {}",
        checked.files,
        checked.rows,
        checked.row_groups,
        checked.labels,
        checked.device,
        config.writers.dir.display()
    );
    Ok(())
}

fn inspect(args: InspectArgs) -> Result<()> {
    let request = crate::inspect::InspectRequest {
        paths: args.paths,
        pipeline: args
            .pipeline
            .as_deref()
            .map(PipelineConfig::load)
            .transpose()?,
        calibration: args.calibration,
    };
    print!("{}", crate::inspect::inspect(&request)?);
    Ok(())
}

fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "segpredict", &mut std::io::stdout());
    Ok(())
}

fn man() -> Result<()> {
    clap_mangen::Man::new(Cli::command())
        .render(&mut std::io::stdout())
        .context("writing the manual page")
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
