//! The model side of a run's start-up, while the readers read: the model
//! loaded and probed, the bucketing settled for its device, the budget
//! calibrated and the size classes warmed; and undoing the attempt's
//! beginning when that fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use segpredict_core::exit::{Error, Result};

use super::attempt::{run_facts, Begin};
use super::threads::Prepared;
use super::{load_worker, Interrupted};
use crate::config::PipelineConfig;
use segpredict_bucketing::{default_size_classes, Bucketer};
use segpredict_core::message::{BatchingStrategy, Calibration, Row};
use segpredict_reader::ReadPlan;
use segpredict_worker::calibrate::{parse_size, CalibrationError};
use segpredict_worker::{self as worker, Worker};

/// Undoes what beginning the attempt wrote when its start-up failed (the
/// model, its labels, the device, or a signal), so a rerun with the cause
/// fixed is not refused as another run's output; a failure here is logged,
/// the start-up's error is the run's.
pub(super) fn abandon_start(begin: &Begin) {
    if let Err(error) = begin.attempt.abandon() {
        tracing::warn!(%error, "could not undo the failed start in the output directory");
    }
}

/// `max_segments = "auto"`: measure the model on its device and set the
/// budget and size classes for the memory target.
fn calibrate_budget(config: &mut PipelineConfig, model: &Worker) -> Result<Calibration> {
    let target = memory_target(config)?;
    let calibration = model.calibrate(target, default_size_classes)?;
    tracing::info!(
        max_segments = calibration.max_segments,
        target_mib = target >> 20,
        measured_mib = calibration.measured_peak_reserved >> 20,
        "calibrated the segment budget"
    );
    config.bucketing.max_segments = calibration.max_segments;
    config.bucketing.size_classes = Some(calibration.size_classes.clone());
    Ok(calibration)
}

/// A model file that bounds the segments a batch may hold (a CUDA package
/// exported with a bound: past it, its kernels' 32-bit indices overflow, an
/// illegal memory access on the H200) refuses a budget over the bound, and
/// the `rows` strategy, which bounds no batch's segments; a calibrated
/// budget stays under it on its own.
pub(super) fn check_model_bound(config: &PipelineConfig, model: &Worker) -> Result<()> {
    let Some(limit) = model.max_segments() else {
        return Ok(());
    };
    match over_the_bound(config, limit) {
        // A setting to change, not a failure a retry could get past.
        Some(why) => Err(Error::permanent(format!(
            "{} takes at most {limit} segments a batch (the bound it was exported with); {why}",
            config.model.path.display()
        ))),
        None => Ok(()),
    }
}

/// Why `config`'s batches could exceed `limit` segments, if they could.
fn over_the_bound(config: &PipelineConfig, limit: usize) -> Option<String> {
    let budget = config.bucketing.max_segments;
    match config.bucketing.strategy {
        BatchingStrategy::SegmentBudget if config.auto_budget || budget <= limit => None,
        BatchingStrategy::SegmentBudget => Some(format!(
            "max_segments ([bucketing] or --max-segments) is {budget}: set it to {limit} or less"
        )),
        BatchingStrategy::Rows => {
            Some("the rows strategy does not keep to it: use strategy = \"segment_budget\"".into())
        }
    }
}

/// The device-memory target `max_segments = "auto"` calibrates for, in bytes.
pub(super) fn memory_target(config: &PipelineConfig) -> Result<u64, CalibrationError> {
    let target = config.bucketing.gpu_memory.as_deref();
    target
        .ok_or(CalibrationError::NoTarget)
        .and_then(parse_size)
}

/// The device's part of start-up: the budget calibrated (`max_segments =
/// "auto"`), then the size classes warmed at the budget in force.
fn prepare_device(
    config: &mut PipelineConfig,
    model: &Worker,
    cancel: &AtomicBool,
) -> Result<(Option<Calibration>, Option<Duration>)> {
    let calibration = match config.auto_budget {
        true => Some(calibrate_budget(config, model)?),
        false => None,
    };
    stop_if_cancelled(cancel)?;
    // A size-class bundle without its dynamic model takes only its classes.
    let padded =
        config.bucketing.pads() && config.bucketing.strategy == BatchingStrategy::SegmentBudget;
    let classes = padded.then(|| config.bucketing.effective_size_classes());
    model.check_size_classes(classes.as_deref())?;
    Ok((calibration, warm_size_classes(config, model)?))
}

/// A signal during start-up ends it between its steps (a run that has not
/// started predicting has nothing to finish).
fn stop_if_cancelled(cancel: &AtomicBool) -> Result<()> {
    match cancel.load(Ordering::Relaxed) {
        true => Err(Interrupted.into()),
        false => Ok(()),
    }
}

/// The model side of start-up, run while the readers read the first row
/// groups: the model loaded and probed, the bucketing settled for its
/// device, the budget calibrated and the size classes warmed.
pub(super) fn prepare_model(
    config: &PipelineConfig,
    plan: &ReadPlan,
    allocator_conf: Option<String>,
    attempt: &Begin,
    started: Instant,
    cancel: &AtomicBool,
) -> Result<Prepared> {
    let mut model = load_worker(config)?;
    model.count_time_from(started);
    stop_if_cancelled(cancel)?;
    let mut config = config.clone();
    config.bucketing.settle_for_device(model.device().is_cuda());
    check_model_bound(&config, &model)?;
    let (calibration, warm_up) = prepare_device(&mut config, &model, cancel)?;
    let (names, resumed) = (attempt.attempt.layout.names(), attempt.resumed);
    tracing::info!(files = plan.sources.len(), rows = attempt.shard_rows,
        resumed = resumed.0 + resumed.1, row_groups = plan.row_groups(),
        shard = %names.shard, attempt = names.attempt,
        device = %worker::device_name(model.device()), budget = config.bucketing.max_segments, "starting");
    // The budget in force: none for the `rows` strategy, as the bucketer knows.
    let budget = Bucketer::<Row>::new(&config.bucketing)?.max_segments();
    let mut facts = run_facts(&config, plan, &model, allocator_conf, calibration, attempt);
    facts.warm_up_s = warm_up.map(|d| d.as_secs_f64());
    facts.model_ready_s = Some(started.elapsed().as_secs_f64());
    Ok(Prepared {
        worker: model,
        bucketing: config.bucketing,
        budget,
        facts,
    })
}

/// Warms every size class the run will use (`[model] warm_size_classes`),
/// on CUDA with padded batches only: on CPU, or unpadded, shapes are not
/// few and there is no caching allocator to settle.
fn warm_size_classes(config: &PipelineConfig, model: &Worker) -> Result<Option<Duration>> {
    let padded = config.bucketing.pad_to_size_classes == Some(true);
    if !(config.model.warm_size_classes && padded && model.device().is_cuda()) {
        return Ok(None);
    }
    let classes = config.bucketing.effective_size_classes();
    let took = model.warm_size_classes(&classes, config.bucketing.max_rows)?;
    tracing::info!(
        classes = classes.len(),
        seconds = took.as_secs_f64(),
        "warmed the size classes"
    );
    Ok(Some(took))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(strategy: &str, max_segments: &str) -> PipelineConfig {
        PipelineConfig::parse(&format!(
            "[readers]\npath = \"in.parquet\"\n[readers.columns]\nid = \"id\"\n\
             segments = {{ name = \"segments\", shape = [1, 8, 8] }}\n\
             [bucketing]\nstrategy = \"{strategy}\"\nmax_segments = {max_segments}\ngpu_memory = \"6GiB\"\n\
             [model]\npath = \"m.pt2\"\nlabels = \"l.txt\"\n[writers]\ndir = \"out\"\n"
        ))
        .unwrap()
    }

    #[test]
    fn a_budget_over_a_packages_bound_is_refused_and_one_within_it_kept() {
        assert_eq!(
            over_the_bound(&config("segment_budget", "65536"), 65536),
            None
        );
        let why = over_the_bound(&config("segment_budget", "70000"), 65536).unwrap();
        assert!(why.contains("is 70000") && why.contains("65536"), "{why}");
        // A calibrated budget is kept under the bound by calibration itself.
        assert_eq!(
            over_the_bound(&config("segment_budget", "\"auto\""), 65536),
            None
        );
        let why = over_the_bound(&config("rows", "4096"), 65536).unwrap();
        assert!(why.contains("rows strategy"), "{why}");
    }
}
