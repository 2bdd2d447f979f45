//! The commands around `run`: look at input before a run (`inspect`),
//! check a pipeline without running it (`check`), size the budget
//! (`calibrate`), commit a sharded run by hand (`commit`), and the shell
//! completions and manual page.

use anyhow::{Context, Result};
use clap::CommandFactory;

use super::{CalibrateArgs, CheckArgs, Cli, InspectArgs};
use crate::commit::{commit_run, CommitState, Totals};
use crate::config::{Overrides, PipelineConfig};
use crate::exit::Outcome;
use crate::{pipeline, report, worker};

pub(super) fn check(args: CheckArgs) -> Result<()> {
    let config = args.pipeline.load(None)?;
    worker::configure_allocator(&config.model);
    let checked = pipeline::check(&config, args.shards)?;
    println!(
        "ok: {} file(s), {} rows in {} row groups; model answers {} labels on {}; output {} ({})",
        checked.files,
        checked.rows,
        checked.row_groups,
        checked.labels,
        checked.device,
        config.writers.dir.display(),
        checked.output
    );
    Ok(())
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
            super::run::describe_missing(&missing)
        )),
    }
}

pub(super) fn calibrate(args: CalibrateArgs) -> Result<()> {
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
