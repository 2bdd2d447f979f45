//! The commands around `run`: look at input before a run (`inspect`),
//! check a pipeline without running it (`check`), size the budget
//! (`calibrate`), time the model alone (`speed`), commit a sharded run by hand (`commit`), and the shell
//! completions and manual page.

use clap::CommandFactory;
use segpredict_core::exit::{Context, Error, Failure, Result};

use super::{CalibrateArgs, Cli, InspectArgs, RunArgs, SpeedArgs};
use crate::config::{Overrides, PipelineConfig};
use crate::pipeline;
use segpredict_checkpoint::checkpoint::Verdict;
use segpredict_checkpoint::commit::{commit_by_hand, CommitState, Totals};
use segpredict_checkpoint::layout::COMMIT_TAG;
use segpredict_core::exit::Outcome;
use segpredict_report as report;
use segpredict_worker as worker;

/// `segpredict check` with `run`'s own flags: everything `run` checks
/// before its first row, the same verdict on the output and the same exit
/// code (a finished run's recorded one included), nothing written.
pub(super) fn check(args: RunArgs) -> Result<Outcome> {
    let (shard, fraction) = (
        super::run::shard_of(&args)?,
        super::run::reject_fraction(&args)?,
    );
    let config = args.pipeline.load(args.threads)?;
    worker::prepare_process(&config.model, &config.readers.columns.input_spec());
    let checked = pipeline::check(&config, shard)?;
    let dir = &config.writers.dir;
    let text = format!(
        "ok: {} file(s), {} rows in {} row groups; model answers {} labels on {}; output {} ({})",
        checked.files,
        checked.rows,
        checked.row_groups,
        checked.labels,
        checked.device,
        dir.display(),
        checked.output
    );
    let fields = serde_json::json!({ "output": checked.output.to_string() });
    crate::logging::result(&text, "check passed", fields);
    Ok(match checked.output {
        Verdict::Complete => super::run::recorded_outcome(checked.summary.as_ref(), dir, fraction),
        _ => Outcome::Done,
    })
}

pub(super) fn inspect(args: InspectArgs) -> Result<()> {
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

pub(super) fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "segpredict", &mut std::io::stdout());
    Ok(())
}

pub(super) fn man() -> Result<()> {
    clap_mangen::Man::new(Cli::command())
        .render(&mut std::io::stdout())
        .context("writing the manual page")
}

/// `segpredict commit DIR`.
pub(super) fn commit(dir: &std::path::Path) -> Result<Outcome> {
    let store = segpredict_checkpoint::open_store(dir, COMMIT_TAG)?;
    match commit_by_hand(store.as_ref())? {
        CommitState::Committed(Totals { rows, .. }) => {
            let text = format!("{}: committed: {rows}", dir.display());
            crate::logging::result(&text, "run committed", serde_json::json!({ "rows": rows }));
            Ok(Outcome::Done)
        }
        // The missing shards may still be running: a later commit succeeds.
        CommitState::Waiting(missing) => Err(Error::retryable(format!(
            "{}: cannot commit yet: {} not done",
            dir.display(),
            super::run::describe_missing(&missing)
        ))),
    }
}

/// A pipeline file on the device asked for (or its own), with the process
/// prepared before any thread starts (`worker::prepare_process`: the
/// allocator setting in force before anything touches CUDA); returns that
/// setting too.
fn load_on_device(
    pipeline: &std::path::Path,
    device: Option<String>,
) -> Result<(PipelineConfig, Option<String>)> {
    let mut config = PipelineConfig::load(pipeline)?;
    config.apply(&Overrides {
        device,
        ..Overrides::default()
    });
    let allocator = worker::prepare_process(&config.model, &config.readers.columns.input_spec());
    Ok((config, allocator))
}

/// `--json FILE`: the measurement, pretty-printed.
fn write_json(path: Option<&std::path::Path>, value: &impl serde::Serialize) -> Result<()> {
    if let Some(path) = path {
        // Our own measurement that does not serialise does so every time.
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| Error::classified(Failure::Permanent, e))?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

pub(super) fn calibrate(args: CalibrateArgs) -> Result<()> {
    let (config, allocator) = load_on_device(&args.pipeline, args.device)?;
    let calibration = pipeline::calibrate(&config, &args.gpu_memory)?;
    println!(
        "{}",
        report::describe_calibration(&calibration, allocator.as_deref())
    );
    write_json(
        args.json.as_deref(),
        &report::CalibrationReport::from(&calibration),
    )
}

pub(super) fn speed(args: SpeedArgs) -> Result<()> {
    let (mut config, _) = load_on_device(&args.pipeline, args.device)?;
    let on_input = args.input.is_some();
    config.apply(&Overrides {
        input: args.input,
        ..Overrides::default()
    });
    let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let measured = pipeline::speed(
        &config,
        args.segments.map(to_usize),
        args.rows.map(to_usize),
        to_usize(args.batches),
        to_usize(args.streams),
        on_input,
    )?;
    let s = &measured.speed;
    let format = format!("{:?}", measured.format).to_lowercase();
    let data = match on_input {
        true => format!("{}'s segments", config.readers.path.display()),
        false => "a byte pattern".to_string(),
    };
    let (streams, per_batch) = match s.streams {
        1 => (String::new(), "per batch"),
        n => (format!(" over {n} streams"), "between a stream's batches"),
    };
    println!(
        "model alone on {}{streams} ({}, {}): {} batches of {} segments in {} rows of {}: {:.0} segments/s; {per_batch} {:.3} ms median, {:.3} ms p90",
        measured.device,
        format,
        format!("{:?}", config.model.dtype).to_lowercase(),
        s.batches,
        s.segments,
        s.rows,
        data,
        s.segments_per_s,
        s.batch_ms_median,
        s.batch_ms_p90
    );
    let json = serde_json::json!({
        "device": measured.device,
        "format": format,
        "data": if on_input { "input" } else { "pattern" },
        "speed": s,
    });
    write_json(args.json.as_deref(), &json)
}
