//! Wires the stages together: readers -> bucketing -> model worker -> writers,
//! joined by bounded channels so a slow stage slows the ones before it.
//!
//! Everything that can fail before the first row (input files, columns,
//! model, labels, device, output directory) is checked before any thread
//! starts. Then all stages run in one thread scope; the first error sets the
//! shared cancel flag, every stage stops at its next message, and the run
//! returns that error.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::bucketing::{run_bucketing, Bucketer, BucketingReport};
use crate::config::PipelineConfig;
use crate::message::{InputSpec, Row, WriterMsg};
use crate::reader::{self, ReadPlan, ReaderStats};
use crate::report::{memory_summary, RunReport, StageBusy};
use crate::worker::calibrate::{parse_size, Calibration, CalibrationError};
use crate::worker::{self, Worker, WorkerReport};
use crate::writer::{self, OutputSchema, WriterReport};

/// Channel capacities, in messages. Small: they exist to overlap stages, not
/// to store data, and they bound host memory together with `max_held_rows`.
const CHUNKS_PER_READER: usize = 2;
const BATCHES_IN_FLIGHT: usize = 4;
const WRITER_MESSAGES: usize = 8;

/// The run was cancelled (Ctrl-C or SIGTERM) before it completed.
#[derive(Debug, thiserror::Error)]
#[error("interrupted; no output was marked complete")]
pub struct Interrupted;

/// Sets the allocator before anything touches CUDA: libtorch reads
/// `PYTORCH_ALLOC_CONF` once, at its first device allocation. A value the
/// user exported wins. Returns the setting in force.
pub fn configure_allocator(config: &PipelineConfig) -> Option<String> {
    for name in ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"] {
        if let Ok(value) = std::env::var(name) {
            return Some(value);
        }
    }
    if config.model.allocator.is_empty() {
        return None;
    }
    // Called from main before any thread exists, so no one reads the
    // environment concurrently.
    std::env::set_var("PYTORCH_ALLOC_CONF", &config.model.allocator);
    Some(config.model.allocator.clone())
}

pub fn run(
    config: &PipelineConfig,
    allocator_conf: Option<String>,
    cancel: Arc<AtomicBool>,
) -> Result<RunReport> {
    let started = Instant::now();
    // Building a bucketer validates the section, size classes included.
    Bucketer::<Row>::new(&config.bucketing).context("invalid [bucketing] section")?;
    let plan = config.readers.plan()?;
    let LoadedModel {
        labels,
        device,
        cudnn_benchmark,
        inputs,
        model,
    } = load_model(config)?;
    let channels_last = model.channels_last();
    let mut config = config.clone();
    let calibration = if config.auto_budget {
        Some(calibrate_budget(&mut config, &model, &inputs)?)
    } else {
        None
    };
    let config = &config;
    config.writers.prepare_dir()?;
    tracing::info!(
        files = plan.sources.len(),
        rows = plan.total_rows,
        row_groups = plan.row_groups(),
        device = ?device,
        budget = config.bucketing.max_segments,
        "starting"
    );
    let schema = OutputSchema {
        id_kind: plan.id_kind,
        labels,
        sources: plan.sources.clone(),
        rows_written: Arc::new(AtomicU64::new(0)),
    };
    // The budget in force: none for the `rows` strategy, as the bucketer knows.
    let initial_budget = Bucketer::<Row>::new(&config.bucketing)?.max_segments();
    let budget = AtomicUsize::new(initial_budget);
    let stages = run_stages(config, &plan, model, &schema, &budget, &cancel)?;
    if cancel.load(Ordering::Relaxed) {
        return Err(Interrupted.into());
    }
    let settings = RunSettings {
        device,
        cudnn_benchmark,
        channels_last,
        allocator_conf,
        calibration,
    };
    finish_run(config, &plan, stages, settings, &budget, started)
}

/// `max_segments = "auto"`: measure the model on its device and set the
/// budget and size classes for the memory target.
fn calibrate_budget(
    config: &mut PipelineConfig,
    model: &Worker,
    inputs: &InputSpec,
) -> Result<Calibration> {
    let target = config
        .bucketing
        .gpu_memory
        .as_deref()
        .ok_or(CalibrationError::NoTarget)
        .and_then(parse_size)?;
    let calibration = model.calibrate(inputs, target)?;
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

/// cuDNN benchmark mode re-tunes for every new input shape, so it is allowed
/// only when padding bounds the shapes; it is off unless asked for, since on
/// the H200 it made the seed's convs slower end to end (0.87x) and reserved
/// twice the memory (benches/gpu/RESULTS.md).
fn set_cudnn_benchmark(config: &PipelineConfig, device: tch::Device) -> Result<bool> {
    let wanted = config.model.cudnn_benchmark;
    if wanted && !config.bucketing.pad_to_size_classes {
        bail!("cudnn_benchmark = true needs pad_to_size_classes = true: unpadded, every batch is a new shape and re-tunes");
    }
    let on = wanted && device.is_cuda();
    if device.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(on);
    }
    Ok(on)
}

/// `segpredict calibrate`: load the model on the pipeline's device and
/// measure it against `gpu_memory`.
pub fn calibrate(config: &PipelineConfig, gpu_memory: &str) -> Result<Calibration> {
    let target = parse_size(gpu_memory)?;
    let loaded = load_model(config)?;
    Ok(loaded.model.calibrate(&loaded.inputs, target)?)
}

/// What `check` found: the run would start.
#[derive(Debug)]
pub struct Checked {
    pub files: usize,
    pub rows: u64,
    pub row_groups: usize,
    pub device: tch::Device,
    pub labels: usize,
}

/// Everything [`run`] checks before its first row, in the same order and with
/// the same errors, and nothing else: input files and columns, bucketing,
/// model and labels (one tiny forward pass), device, the calibration target,
/// and the output directory, which is left untouched.
pub fn check(config: &PipelineConfig) -> Result<Checked> {
    Bucketer::<Row>::new(&config.bucketing).context("invalid [bucketing] section")?;
    let plan = config.readers.plan()?;
    let loaded = load_model(config)?;
    if config.auto_budget {
        let target = config
            .bucketing
            .gpu_memory
            .as_deref()
            .ok_or(CalibrationError::NoTarget)
            .and_then(parse_size)?;
        if !loaded.device.is_cuda() {
            bail!(CalibrationError::NotCuda);
        }
        tracing::info!(target_mib = target >> 20, "the budget will be calibrated");
    }
    config.writers.check_dir()?;
    Ok(Checked {
        files: plan.sources.len(),
        rows: plan.total_rows,
        row_groups: plan.row_groups(),
        device: loaded.device,
        labels: loaded.labels.len(),
    })
}

/// The model on its device, with what it was loaded for.
struct LoadedModel {
    labels: Arc<Vec<String>>,
    device: tch::Device,
    cudnn_benchmark: bool,
    inputs: InputSpec,
    model: Worker,
}

/// Labels, device, cuDNN mode and model: the set-up `run` and `calibrate` share.
fn load_model(config: &PipelineConfig) -> Result<LoadedModel> {
    let labels = Arc::new(worker::load_labels(&config.model.labels)?);
    let device = worker::choose_device(&config.model.device)?;
    let cudnn_benchmark = set_cudnn_benchmark(config, device)?;
    let inputs = config.readers.columns.input_spec();
    let model = Worker::new(&config.model, device, &inputs, labels.len())?;
    model.probe(&inputs).with_context(|| {
        format!(
            "model {} with labels {} ({} labels)",
            config.model.path.display(),
            config.model.labels.display(),
            labels.len()
        )
    })?;
    Ok(LoadedModel {
        labels,
        device,
        cudnn_benchmark,
        inputs,
        model,
    })
}

/// The calibration as a person reads it, ending with the lines to paste.
pub fn describe_calibration(c: &Calibration, allocator: Option<&str>) -> String {
    let mib = |b: i64| b >> 20;
    let mut s = format!(
        "target {} MiB (allocator: {})\n{:>10} {:>14} {:>15}\n",
        c.target_bytes >> 20,
        allocator.unwrap_or("default"),
        "segments",
        "peak reserved",
        "peak allocated"
    );
    for p in &c.points {
        s += &format!(
            "{:>10} {:>10} MiB {:>11} MiB\n",
            p.segments,
            mib(p.peak_reserved),
            mib(p.peak_allocated)
        );
    }
    s += &format!(
        "fit: {:.0} MiB + {:.3} MiB per segment\nmeasured at the budget: {} MiB\n\n[bucketing]\nmax_segments = {}\nsize_classes = {:?}",
        c.fit.intercept / 1048576.0,
        c.fit.slope / 1048576.0,
        mib(c.measured_peak_reserved),
        c.max_segments,
        c.size_classes
    );
    s
}

/// How the run was set up, for its report.
struct RunSettings {
    device: tch::Device,
    cudnn_benchmark: bool,
    channels_last: bool,
    allocator_conf: Option<String>,
    calibration: Option<Calibration>,
}

struct StageReports {
    readers: Vec<ReaderStats>,
    bucketing: BucketingReport,
    worker: WorkerReport,
    writers: Vec<WriterReport>,
}

fn run_stages(
    config: &PipelineConfig,
    plan: &ReadPlan,
    model: Worker,
    schema: &OutputSchema,
    budget: &AtomicUsize,
    cancel: &Arc<AtomicBool>,
) -> Result<StageReports> {
    let n_readers = config
        .readers
        .effective_threads()
        .min(plan.row_groups().max(1));
    let n_writers = config.writers.effective_threads();
    let units = reader::unit_queue(plan);
    let (chunk_tx, chunk_rx) = crossbeam_channel::bounded(CHUNKS_PER_READER * n_readers);
    let (batch_tx, batch_rx) = crossbeam_channel::bounded(BATCHES_IN_FLIGHT);
    let (write_tx, write_rx) = crossbeam_channel::bounded::<WriterMsg>(WRITER_MESSAGES);
    let segment_bytes = config.readers.columns.segments.segment_bytes();
    let cancel: &AtomicBool = cancel;
    // Outside the scope so the progress thread may borrow it.
    let stages_done = &AtomicBool::new(false);
    // Each stage's first error cancels the others; a stage whose neighbour
    // has gone stops quietly, so the only errors returned are root causes.
    let fail = |e: anyhow::Error| {
        cancel.store(true, Ordering::Relaxed);
        e
    };
    let decode_pool = &config.readers.decode_pool()?;
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..n_readers)
            .map(|_| {
                let (units, out) = (units.clone(), chunk_tx.clone());
                scope.spawn(move || {
                    reader::run_reader(&config.readers, plan, decode_pool, units, out, cancel)
                        .map_err(|e| fail(e.into()))
                })
            })
            .collect();
        drop(chunk_tx);
        let rejects_tx = write_tx.clone();
        let bucketing = scope.spawn(move || {
            run_bucketing(
                &config.bucketing,
                segment_bytes,
                chunk_rx,
                batch_tx,
                rejects_tx,
                budget,
                cancel,
            )
            .map_err(|e| fail(e.into()))
        });
        let worker_tx = write_tx.clone();
        drop(write_tx);
        let worker = scope.spawn(move || {
            model
                .run(batch_rx, worker_tx, budget, cancel)
                .map_err(|e| fail(e.into()))
        });
        let writers: Vec<_> = (0..n_writers)
            .map(|idx| {
                let messages = write_rx.clone();
                scope.spawn(move || {
                    writer::run_writer(idx, &config.writers, schema, messages, cancel)
                        .map_err(|e| fail(e.into()))
                })
            })
            .collect();
        drop(write_rx);
        let progress = scope
            .spawn(|| show_progress(plan.total_rows, &schema.rows_written, stages_done, cancel));
        let mut first_error = None;
        let readers: Vec<_> = readers
            .into_iter()
            .filter_map(|h| keep(h.join(), &mut first_error, cancel))
            .collect();
        let bucketing = keep(bucketing.join(), &mut first_error, cancel);
        let worker = keep(worker.join(), &mut first_error, cancel);
        let writers: Vec<_> = writers
            .into_iter()
            .filter_map(|h| keep(h.join(), &mut first_error, cancel))
            .collect();
        stages_done.store(true, Ordering::Relaxed);
        let _ = progress.join();
        match (first_error, bucketing, worker) {
            (Some(e), _, _) => Err(e),
            (None, Some(bucketing), Some(worker)) => Ok(StageReports {
                readers,
                bucketing,
                worker,
                writers,
            }),
            _ => Err(anyhow::anyhow!("a pipeline stage ended without a report")),
        }
    })
}

/// A progress bar for a person at a terminal; a log line every half minute
/// for a batch job's log. Returns when the stages are done or cancelled.
fn show_progress(
    total_rows: u64,
    rows_written: &AtomicU64,
    done: &AtomicBool,
    cancel: &AtomicBool,
) {
    let tick = std::time::Duration::from_millis(200);
    let bar = crate::logging::draws_progress_bar().then(|| {
        let bar = indicatif::ProgressBar::new(total_rows);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} rows ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut last_log = Instant::now();
    while !done.load(Ordering::Relaxed) && !cancel.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        let rows = rows_written.load(Ordering::Relaxed);
        match &bar {
            Some(bar) => bar.set_position(rows),
            None if last_log.elapsed().as_secs() >= 30 => {
                log_progress(rows, total_rows);
                last_log = Instant::now();
            }
            None => {}
        }
    }
    match bar {
        Some(bar) => bar.finish_and_clear(),
        // The log's last progress line says where the stages ended.
        None => log_progress(rows_written.load(Ordering::Relaxed), total_rows),
    }
}

fn log_progress(rows: u64, total_rows: u64) {
    tracing::info!(target: crate::logging::PROGRESS_TARGET, rows, total_rows, "progress");
}

/// A stage's result, keeping the first error; a panic cancels the run too.
fn keep<T>(
    joined: std::thread::Result<Result<T>>,
    first_error: &mut Option<anyhow::Error>,
    cancel: &AtomicBool,
) -> Option<T> {
    match joined {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            first_error.get_or_insert(e);
            None
        }
        Err(_) => {
            cancel.store(true, Ordering::Relaxed);
            first_error.get_or_insert(anyhow::anyhow!("a pipeline stage panicked"));
            None
        }
    }
}

fn finish_run(
    config: &PipelineConfig,
    plan: &ReadPlan,
    stages: StageReports,
    settings: RunSettings,
    budget: &AtomicUsize,
    started: Instant,
) -> Result<RunReport> {
    let RunSettings {
        device,
        cudnn_benchmark,
        channels_last,
        allocator_conf,
        calibration,
    } = settings;
    let StageReports {
        readers,
        bucketing,
        worker,
        writers,
    } = stages;
    let dir = &config.writers.dir;
    let mut rejects: Vec<_> = writers
        .iter()
        .flat_map(|w| w.rejects.iter().cloned())
        .collect();
    let rows_out: u64 = writers.iter().map(|w| w.rows).sum();
    let rows_rejected = rejects.len() as u64;
    // The accounting invariant: every input row is predicted or rejected, once.
    if rows_out + rows_rejected != plan.total_rows {
        bail!(
            "row accounting failed: {} rows in, {} predicted + {} rejected; the output is incomplete",
            plan.total_rows,
            rows_out,
            rows_rejected
        );
    }
    writer::write_rejects(dir, &mut rejects, &plan.sources)?;
    let wall_s = started.elapsed().as_secs_f64();
    let secs = |d: std::time::Duration| d.as_secs_f64();
    let report = RunReport {
        input: config.readers.path.display().to_string(),
        output: dir.display().to_string(),
        device: format!("{device:?}"),
        model_dtype: format!("{:?}", config.model.dtype).to_lowercase(),
        input_files: plan.sources.len(),
        rows_in: plan.total_rows,
        rows_out,
        rows_rejected,
        batches: worker.batches.len() as u64,
        segments: bucketing.segments,
        padded_segments: bucketing.padded_segments,
        oversized_batches: bucketing.oversized_batches,
        max_segments: config.bucketing.max_segments,
        final_max_segments: Some(budget.load(Ordering::Relaxed)).filter(|&b| b != usize::MAX),
        size_classes: bucketing.size_classes.clone(),
        cudnn_benchmark,
        channels_last,
        allocator_conf: device.is_cuda().then_some(allocator_conf).flatten(),
        oom_events: worker.oom_events,
        oom_rejected_rows: rejects
            .iter()
            .filter(|r| r.kind == "oom_single_row")
            .count() as u64,
        wall_s,
        rows_per_s: plan.total_rows as f64 / wall_s.max(1e-9),
        segments_per_s: bucketing.segments as f64 / wall_s.max(1e-9),
        busy_s: StageBusy {
            readers: readers.iter().map(|r| secs(r.busy)).sum(),
            bucketing: secs(bucketing.busy),
            model: secs(worker.busy),
            writers: writers.iter().map(|w| secs(w.busy)).sum(),
        },
        device_busy_share: crate::report::device_busy_share(&worker.batches, wall_s),
        peak_rss_bytes: crate::report::peak_rss_bytes(),
        memory: memory_summary(&worker.batches),
        strategy: format!("{:?}", config.bucketing.strategy),
        calibration,
        batch_records: worker.batches,
    };
    report
        .write_json(dir)
        .with_context(|| format!("writing {}", dir.join("_report.json").display()))?;
    report
        .write_svg(dir)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", dir.join("_report.svg").display()))?;
    writer::write_success(dir)?;
    Ok(report)
}
