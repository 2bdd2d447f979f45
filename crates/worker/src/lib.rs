//! The model worker: the one thread that owns the model and the device.
//!
//! It takes batches, runs the model under no-grad in eval mode, and sends
//! label ids and scores to the writers. On a CUDA out-of-memory it frees the
//! cache, splits the batch in halves and retries, lowers the segment budget
//! for the rest of the run, and rejects a lone row that still does not fit.

pub mod alloc;
pub mod backend;
pub mod calibrate;
mod device;
mod model;
mod process;
mod run;
mod speed;
pub mod split;
mod torch_error;
mod warm;

use segpredict_core::exit::{Classify, Failure};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind};

pub use backend::ModelFormat;
pub use device::{choose_device, cuda_device_count, device_name, set_cudnn_benchmark};
use model::Model;
pub use process::prepare_process;
use run::{Launch, Run};
pub use torch_error::TorchError;

use segpredict_core::message::{Batch, InputSpec, MemoryStats, WorkerReport, WriterMsg};

/// `[model]`: the model file (TorchScript or AOTInductor package) and its
/// format, its labels and the device.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The model file. Required.
    pub path: PathBuf,
    /// How the model file was exported: `auto` (default), `torchscript`
    /// (`torch.jit.script(...).save(...)`) or `aoti` (an AOTInductor
    /// package, `torch._inductor.aoti_compile_and_package(...)`). `auto`
    /// tells them apart by the file's content. A package's device type and
    /// dtype are fixed when it is compiled: `device` must run it and `dtype`
    /// must be its own; `channels_last` and `jit_profiling` are TorchScript's
    /// and are refused for a package.
    #[serde(default)]
    pub format: ModelFormat,
    /// Label map: line i is the label of class i (UTF-8). Required.
    pub labels: PathBuf,
    /// `auto` (CUDA when present), `cpu`, `cuda` or `cuda:N`. Default `auto`.
    #[serde(default = "default_device")]
    pub device: String,
    /// Weights and activations: `f32`, `bf16` or `f16`. Default `f32`.
    /// bf16 halves memory and is much faster on recent GPUs; on CPU it is slow.
    #[serde(default)]
    pub dtype: ModelDtype,
    /// cuDNN benchmark mode: time every conv algorithm once per input shape
    /// and keep the fastest. Default false. Allowed only with
    /// `pad_to_size_classes` (a bounded set of shapes): with a new shape every
    /// batch it re-tunes every batch (17x slower in plain PyTorch). On the
    /// H200 the seed's convs ran faster without it.
    #[serde(default)]
    pub cudnn_benchmark: bool,
    /// `PYTORCH_ALLOC_CONF` for the run, unless the environment already sets
    /// it. Default `expandable_segments:True`, which lets reserved memory
    /// track allocated memory instead of ratcheting.
    #[serde(default = "default_allocator")]
    pub allocator: String,
    /// On CUDA out-of-memory: split the batch and retry, lowering the budget.
    /// Default true. When false, an out-of-memory ends the run.
    #[serde(default = "default_true")]
    pub oom_recovery: bool,
    /// Convert the model's 4-D weights to channels-last memory layout, so
    /// convolutions run NHWC (tensor cores on recent GPUs favour it: 1.45x
    /// faster and half the memory for the seed's convs in bf16 on an H200,
    /// benches/gpu/RESULTS.md; oneDNN's CPU convolutions too: digits-small
    /// ran 1.3-1.5x faster on a 2-core CPU, benches/cpu/results.md).
    /// Default: on when the model supports it, on any device. The numbers
    /// are the same up to rounding.
    pub channels_last: Option<bool>,
    /// TorchScript's profiling executor, which specialises the graph to the
    /// shapes it has seen. Default true (libtorch's default). Batches whose
    /// row count varies can make it re-profile; turning it off uses the
    /// simple executor.
    #[serde(default = "default_true")]
    pub jit_profiling: bool,
    /// On CUDA with padded batches: before the first row, run one synthetic
    /// batch of every size class, largest first, so the caching allocator
    /// reserves the run's peak and each shape's kernels (and cuDNN's
    /// choices, with `cudnn_benchmark`) are settled before the run: device
    /// memory does not grow during it, and a class that first appears late
    /// (the end of the input) does not pay its first-shape cost there.
    /// Costs one forward pass per size class at start-up. Default true.
    #[serde(default = "default_true")]
    pub warm_size_classes: bool,
    /// For a size-class bundle (`tools/make_models.py --aoti --size-classes`)
    /// on CUDA: capture each class's model once as a CUDA graph (at the
    /// class's second batch, so during the warm-up) and replay it for every
    /// batch of the class that fits the rows and ragged values it was
    /// captured for. Default true; the report's `model_paths` says which
    /// path each segment total ran.
    #[serde(default = "default_true")]
    pub cuda_graphs: bool,
    /// Testing aid: report a synthetic out-of-memory for every forward pass
    /// over more than this many (padded) segments, so recovery can be tested
    /// without a GPU. Default: none.
    pub fault_oom_above_segments: Option<usize>,
}

fn default_device() -> String {
    "auto".into()
}

fn default_allocator() -> String {
    "expandable_segments:True".into()
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModelDtype {
    #[default]
    F32,
    Bf16,
    F16,
}

impl ModelDtype {
    fn kind(self) -> Kind {
        match self {
            ModelDtype::F32 => Kind::Float,
            ModelDtype::Bf16 => Kind::BFloat16,
            ModelDtype::F16 => Kind::Half,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("model file {path} does not exist")]
    ModelMissing { path: PathBuf },
    #[error("cannot load model {path}")]
    ModelLoad {
        path: PathBuf,
        #[source]
        source: TorchError,
    },
    #[error("cannot load model {path}: converting to channels-last")]
    ChannelsLast {
        path: PathBuf,
        #[source]
        source: TorchError,
    },
    #[error(transparent)]
    Aoti(#[from] backend::AotiError),
    #[error("cannot read labels file {path}")]
    Labels {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read labels file {path}: the file holds no labels")]
    NoLabels { path: PathBuf },
    #[error("unknown device `{0}` (use auto, cpu, cuda or cuda:N)")]
    BadDevice(String),
    #[error("device {0} requested but CUDA is not available")]
    NoCuda(String),
    #[error("cudnn_benchmark = true needs pad_to_size_classes = true: unpadded, every batch is a new shape and re-tunes")]
    CudnnNeedsPadding,
    #[error("batch {seq} ({rows} rows, {segments} segments): the model failed")]
    Forward {
        seq: u64,
        rows: usize,
        segments: usize,
        #[source]
        source: TorchError,
    },
    #[error("model {path} with labels {labels} ({n_labels} labels): the check at start-up (one tiny forward pass) failed")]
    Probe {
        path: PathBuf,
        labels: PathBuf,
        n_labels: usize,
        // Boxed: two paths and a libtorch error would make every
        // `WorkerError` large.
        #[source]
        source: Box<TorchError>,
    },
    #[error("warming the size classes at start-up: the model failed on a synthetic batch of {segments} segments")]
    Warm {
        segments: usize,
        #[source]
        source: TorchError,
    },
    #[error("timing the model alone: it failed on a synthetic batch of {segments} segments")]
    Speed {
        segments: usize,
        #[source]
        source: TorchError,
    },
    #[error("--streams {0} needs a CUDA device: on the CPU a model runs on one stream")]
    StreamsNeedCuda(usize),
    #[error("reading allocator statistics")]
    Stats(#[from] alloc::ShimError),
    #[error(transparent)]
    Calibration(#[from] calibrate::CalibrationError),
}

impl Classify for WorkerError {
    /// A retry of the same command fails the same way: the model, its
    /// labels or its settings are wrong for these inputs. A device that
    /// failed (CUDA error, out of memory, no GPU on this node) may not.
    fn failure(&self) -> Failure {
        match self {
            WorkerError::ModelLoad { source, .. }
            | WorkerError::ChannelsLast { source, .. }
            | WorkerError::Forward { source, .. } => source.failure(),
            WorkerError::Probe { source, .. } => source.failure(),
            WorkerError::Warm { source, .. } | WorkerError::Speed { source, .. } => {
                source.failure()
            }
            WorkerError::NoCuda(_) | WorkerError::Stats(_) => Failure::Retryable,
            WorkerError::ModelMissing { .. }
            | WorkerError::Aoti(_)
            | WorkerError::Labels { .. }
            | WorkerError::NoLabels { .. }
            | WorkerError::BadDevice(_)
            | WorkerError::CudnnNeedsPadding
            | WorkerError::StreamsNeedCuda(_)
            | WorkerError::Calibration(_) => Failure::Permanent,
        }
    }
}

/// Reads the label map: one label per line, line i for class i.
pub fn load_labels(path: &std::path::Path) -> Result<Vec<String>, WorkerError> {
    let text = std::fs::read_to_string(path).map_err(|source| WorkerError::Labels {
        path: path.to_path_buf(),
        source,
    })?;
    let labels: Vec<String> = text.lines().map(|l| l.trim().to_string()).collect();
    let labels: Vec<String> = match labels.iter().rposition(|l| !l.is_empty()) {
        Some(last) => labels[..=last].to_vec(),
        None => Vec::new(),
    };
    if labels.is_empty() {
        return Err(WorkerError::NoLabels {
            path: path.to_path_buf(),
        });
    }
    Ok(labels)
}

/// What the worker needs besides its channels, built before any thread starts.
pub struct Worker {
    model: Model,
    /// When the run started: batch records' timestamps count from here.
    epoch: Instant,
    labels: Arc<Vec<String>>,
    inputs: InputSpec,
    cudnn_benchmark: bool,
    channels_last: bool,
    oom_recovery: bool,
    fault_oom_above: Option<usize>,
}

impl Worker {
    /// Labels, device, cuDNN mode and model: everything the worker needs,
    /// loaded and checked before any thread starts. `padded_shapes` says
    /// whether bucketing pads batches to size classes; `top_k` (`[writers]
    /// top_k`, at most the labels' count) asks each row's most probable
    /// classes too.
    pub fn load(
        config: &ModelConfig,
        inputs: InputSpec,
        padded_shapes: bool,
        top_k: Option<usize>,
    ) -> Result<Self, WorkerError> {
        // On a thread that then ends. libgomp keeps an OpenMP team for every
        // thread that ran a parallel operator, and while it manages more
        // threads than there are cores it stops spinning between parallel
        // regions: loaded here on the main thread, the model worker's team
        // thread slept and was woken at every operator of every batch.
        std::thread::scope(|scope| {
            scope
                .spawn(|| Self::load_here(config, inputs, padded_shapes, top_k))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    fn load_here(
        config: &ModelConfig,
        inputs: InputSpec,
        padded_shapes: bool,
        top_k: Option<usize>,
    ) -> Result<Self, WorkerError> {
        let labels = Arc::new(load_labels(&config.labels)?);
        let device = choose_device(&config.device)?;
        let cudnn_benchmark = set_cudnn_benchmark(config, padded_shapes, device)?;
        let loading = Instant::now();
        let mut model = Model::load(config, device, &inputs, labels.len(), top_k)?;
        tracing::debug!(seconds = loading.elapsed().as_secs_f64(), "model loaded");
        if device.is_cuda() {
            // Before the feeding threads start, so they keep off its core
            // (`pipeline::run` reserves it earlier still, before the readers).
            segpredict_core::cpu::reserve_core_for_worker();
        }
        let channels_last = config
            .channels_last
            .unwrap_or(model.supports_channels_last());
        if channels_last {
            model
                .convert_to_channels_last()
                .map_err(|source| WorkerError::ChannelsLast {
                    path: config.path.clone(),
                    source,
                })?;
        }
        let worker = Self {
            model,
            epoch: Instant::now(),
            labels,
            inputs,
            cudnn_benchmark,
            channels_last,
            oom_recovery: config.oom_recovery,
            fault_oom_above: config.fault_oom_above_segments,
        };
        let probing = Instant::now();
        worker.probe().map_err(|source| WorkerError::Probe {
            path: config.path.clone(),
            labels: config.labels.clone(),
            n_labels: worker.labels.len(),
            source: Box::new(source),
        })?;
        tracing::debug!(seconds = probing.elapsed().as_secs_f64(), "model probed");
        Ok(worker)
    }

    /// Counts the batch records' timestamps from `epoch` (the run's start)
    /// instead of from the model's loading.
    pub fn count_time_from(&mut self, epoch: Instant) {
        self.epoch = epoch;
    }

    /// Runs until the batch channel closes or the run is cancelled. `budget`
    /// is lowered here after an out-of-memory; the bucketing stage reads it.
    ///
    /// One batch is kept in flight: batch k+1 is uploaded and queued while
    /// batch k still runs on the device, and k's answers are collected after.
    /// The device then never waits for the host's per-batch work.
    pub fn run(
        self,
        batches: Receiver<Batch>,
        out: Sender<WriterMsg>,
        budget: &AtomicUsize,
        cancel: &AtomicBool,
    ) -> Result<WorkerReport, WorkerError> {
        // Inference mode is no-grad and more: no version counters or view
        // tracking for the tensors made here. Entered on this thread, which
        // owns the model.
        let _no_grad = tch::no_grad_guard();
        let _inference = alloc::InferenceModeGuard::enter();
        if self.model.device.is_cuda() {
            segpredict_core::cpu::claim_worker_core();
            // The worker's host work is small copies. libtorch would spread
            // them over an OpenMP team made by this thread, on this thread's
            // one core, and wait on its slowest member.
            tch::set_num_threads(1);
        }
        // The warm-up's batches are not the run's.
        drop(self.model.take_paths());
        let mut run = Run {
            worker: &self,
            out: &out,
            budget,
            report: WorkerReport::default(),
        };
        let mut in_flight = None;
        for batch in batches {
            if cancel.load(Ordering::Relaxed) {
                break;
            }
            let writers_open = match run.launch(batch, 0)? {
                Launch::Queued(next) => match in_flight.replace(next) {
                    Some(previous) => run.finish(previous)?,
                    None => true,
                },
                Launch::Failed(batch, failure) => {
                    // Collect what is queued first: its answers are due, and
                    // recovery empties the cache.
                    let previous_sent = match in_flight.take() {
                        Some(previous) => run.finish(previous)?,
                        None => true,
                    };
                    previous_sent && run.recover(batch, 0, failure)?
                }
            };
            if !writers_open {
                return Ok(self.with_paths(run.report));
            }
        }
        if let Some(last) = in_flight {
            run.finish(last)?;
        }
        Ok(self.with_paths(run.report))
    }

    fn with_paths(&self, mut report: WorkerReport) -> WorkerReport {
        report.model_paths = self.model.take_paths();
        report
    }

    /// Refuses a run whose size classes (`None`: batches are not padded)
    /// the model cannot take: a size-class bundle without its dynamic model
    /// and without a model for one of them. Call it with the classes in
    /// force, after calibration.
    pub fn check_size_classes(&self, classes: Option<&[usize]>) -> Result<(), WorkerError> {
        Ok(self.model.check_size_classes(classes)?)
    }

    /// The model queued on `batch` (see [`Model::launch`]), with the
    /// testing aid's injected out-of-memory. The caller keeps `batch`
    /// within the package's bound ([`Worker::max_segments`]).
    fn forward(&self, batch: &Batch) -> Result<model::Launched, TorchError> {
        if let Some(limit) = self.fault_oom_above {
            if batch.padded_segments > limit {
                // Classified like a real one: through `TorchError::from`.
                return Err(TorchError::from(tch::TchError::Torch(format!(
                    "CUDA out of memory (injected fault: {} segments > {limit})",
                    batch.padded_segments
                ))));
            }
        }
        self.model.launch(batch)
    }

    /// Runs the model on one row of one synthetic segment at start-up: a
    /// model whose outputs do not match the labels file, or whose `forward`
    /// does not take the pipeline's inputs, fails in seconds instead of at
    /// the first batch of the night (the model checks that it answers one
    /// score per label).
    fn probe(&self) -> Result<(), TorchError> {
        let _no_grad = tch::no_grad_guard();
        let batch = calibrate::synthetic_batch(&self.inputs, 1);
        self.model.launch(&batch)?.wait().map(|_| ())
    }

    /// Whether the weights were laid out channels-last.
    pub fn channels_last(&self) -> bool {
        self.channels_last
    }

    /// Whether cuDNN's benchmark mode is on.
    pub fn cudnn_benchmark(&self) -> bool {
        self.cudnn_benchmark
    }

    /// The most segments a batch may hold, when the model file bounds it
    /// (a CUDA package exported with a bound).
    pub fn max_segments(&self) -> Option<usize> {
        self.model.max_segments()
    }

    /// How the model file was exported: `TorchScript` or `Aoti`.
    pub fn format(&self) -> ModelFormat {
        self.model.format()
    }

    /// The label of each class id the model returns.
    pub fn labels(&self) -> Arc<Vec<String>> {
        self.labels.clone()
    }

    pub fn device(&self) -> Device {
        self.model.device
    }

    fn cuda_index(&self) -> Option<usize> {
        match self.model.device {
            Device::Cuda(i) => Some(i),
            _ => None,
        }
    }

    fn millis_since_epoch(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.epoch).as_secs_f64() * 1e3
    }

    fn reset_peaks(&self) -> Result<(), WorkerError> {
        match self.cuda_index() {
            Some(i) => Ok(alloc::reset_peaks(i)?),
            None => Ok(()),
        }
    }

    fn memory_stats(&self) -> Result<Option<MemoryStats>, WorkerError> {
        match self.cuda_index() {
            Some(i) => Ok(alloc::stats(i)?),
            None => Ok(None),
        }
    }
}
