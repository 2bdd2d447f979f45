//! The model behind the worker: one trait, one implementation per model
//! format. The worker builds the input tensors, uploads them, and turns the
//! logits into labels and scores; a backend only runs the model.

pub mod aoti;
pub mod classes;
mod graph;
mod kernels;
mod torchscript;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::device::prime_device;
use super::{ModelConfig, TorchError, WorkerError};
use segpredict_core::message::{InputSpec, ModelPath};

pub use aoti::{AotiError, AotiPackage};
pub use classes::SizeClassPackages;
pub use torchscript::TorchScript;

/// `[model] format`: how the model file was exported.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModelFormat {
    /// Told by the file's content (see [`aoti::archive_kind`]).
    #[default]
    Auto,
    /// `torch.jit.script(model).save(path)`.
    TorchScript,
    /// An AOTInductor package (`torch._inductor.aoti_compile_and_package`).
    Aoti,
}

/// A loaded model on its device.
pub trait ModelBackend: Send {
    /// Runs the model. `inputs` are on the model's device, in its calling
    /// order `(segments, segment_counts, *extras)`; returns logits
    /// `[rows, n_labels]`. May return before the device has finished (the
    /// caller waits on an event).
    fn forward(&self, inputs: &[Tensor]) -> Result<Tensor, tch::TchError>;

    /// The format this backend runs.
    fn format(&self) -> ModelFormat;

    /// The dtype the model takes its segments and float inputs in, when the
    /// model fixes it (a compiled package); `None`: the `dtype` asked for.
    fn input_kind(&self) -> Option<Kind> {
        None
    }

    /// The most segments a batch may hold, when the model file says so (a
    /// CUDA package exported with a bound: past it, its kernels' 32-bit
    /// indices would overflow); `None`: no bound.
    fn max_segments(&self) -> Option<usize> {
        None
    }

    /// Whether [`ModelBackend::convert_to_channels_last`] can re-lay the weights.
    fn supports_channels_last(&self) -> bool {
        false
    }

    /// Told the most rows a batch holds (`[bucketing] max_rows`): a
    /// size-class bundle's CUDA graphs are captured for that many.
    fn set_row_cap(&self, _max_rows: usize) {}

    /// Which path ran the batches since the last call (a size-class
    /// bundle's); empty for any other model.
    fn take_paths(&self) -> Vec<ModelPath> {
        Vec::new()
    }

    /// Refuses a run whose size classes (`None`: unpadded) the model cannot
    /// take (a size-class bundle without its dynamic model).
    fn check_size_classes(&self, _classes: Option<&[usize]>) -> Result<(), AotiError> {
        Ok(())
    }

    /// Re-lays every 4-D weight channels-last; returns how many. A format
    /// whose layout is fixed when it is compiled cannot.
    fn convert_to_channels_last(&mut self) -> Result<usize, tch::TchError> {
        Err(tch::TchError::Kind(format!(
            "a {:?} model's weight layout cannot be changed after export",
            self.format()
        )))
    }
}

/// Loads the model file of `config` on `device` with weights of `kind`.
/// A package must have had its inputs checked first, before the process's
/// threads started ([`crate::prepare_process`]); its outcome is reported here.
pub fn load_backend(
    config: &ModelConfig,
    device: Device,
    kind: Kind,
    inputs: &InputSpec,
) -> Result<Box<dyn ModelBackend>, WorkerError> {
    if !config.path.is_file() {
        return Err(WorkerError::ModelMissing {
            path: config.path.clone(),
        });
    }
    let load_error = |source: TorchError| WorkerError::ModelLoad {
        path: config.path.clone(),
        source,
    };
    match resolve_format(config)? {
        ModelFormat::Auto | ModelFormat::TorchScript => {
            let model = while_priming(device, kind, || {
                TorchScript::load(&config.path, device, kind, config.jit_profiling)
            })
            .map_err(load_error)?;
            Ok(Box::new(model))
        }
        ModelFormat::Aoti => {
            // Not primed: priming cuDNN and cuBLAS beside a package's
            // loading made the first batch later on the H200 (0.828 s
            // against 0.777, medians of 6; benches/gpu/RESULTS.md, session
            // 8), and a package's first run initialises them anyway.
            let settings = aoti_settings(config);
            if classes::is_bundle(&config.path) {
                let bundle = SizeClassPackages::load(
                    &config.path,
                    device,
                    settings,
                    inputs,
                    config.cuda_graphs,
                )?;
                return Ok(Box::new(bundle));
            }
            let package = AotiPackage::load(&config.path, device, settings)?;
            Ok(Box::new(package))
        }
    }
}

/// Whether `config`'s model file is an AOTInductor package (by its content,
/// or by `format` where the content is unclear); false for a missing file.
pub fn is_package(config: &ModelConfig) -> bool {
    config.path.is_file() && matches!(resolve_format(config), Ok(ModelFormat::Aoti))
}

/// Runs a package's start-up input check ([`aoti::check_inputs_of`]) and
/// records its outcome for [`AotiPackage::load`]. Nothing is recorded when
/// the labels or the device are wrong: loading reports those first.
pub fn check_package_inputs(config: &ModelConfig, inputs: &InputSpec) {
    let (Ok(labels), Ok(device)) = (
        crate::load_labels(&config.labels),
        crate::choose_device(&config.device),
    ) else {
        return;
    };
    let settings = aoti_settings(config);
    let checked = match classes::is_bundle(&config.path) {
        true => classes::check_inputs_of(&config.path, device, settings, inputs, labels.len()),
        false => aoti::check_inputs_of(&config.path, device, settings, inputs, labels.len()),
    };
    aoti::record_input_check(&config.path, checked);
}

fn aoti_settings(config: &ModelConfig) -> aoti::AotiSettings {
    aoti::AotiSettings {
        channels_last: config.channels_last,
        dtype: config.dtype,
        jit_profiling: config.jit_profiling,
    }
}

/// Runs `load` while a second thread initialises CUDA's libraries for
/// `device` ([`prime_device`]): on the H200 that took 0.38 s, which a
/// model's first forward pass would otherwise pay after its weights are on
/// the device.
fn while_priming<T>(device: Device, kind: Kind, load: impl FnOnce() -> T) -> T {
    std::thread::scope(|scope| {
        if device.is_cuda() {
            scope.spawn(|| prime_device(device, kind));
        }
        load()
    })
}

/// `auto` becomes the format the file's content shows. A format set in the
/// pipeline must agree with the content where the content is clear; where
/// it is not, the format's own loader says what is wrong.
fn resolve_format(config: &ModelConfig) -> Result<ModelFormat, AotiError> {
    let found = match aoti::archive_kind(&config.path) {
        Ok(aoti::ArchiveKind::TorchScript) => ModelFormat::TorchScript,
        Ok(aoti::ArchiveKind::Aoti) => ModelFormat::Aoti,
        Err(unclear) if config.format == ModelFormat::Auto => return Err(unclear),
        Err(_) => return Ok(config.format),
    };
    match config.format {
        ModelFormat::Auto => Ok(found),
        set if set == found => Ok(set),
        set => Err(AotiError::FormatContradicted {
            path: config.path.clone(),
            set: format_name(set),
            found: match found {
                ModelFormat::Aoti => "an AOTInductor package",
                _ => "a TorchScript module",
            },
        }),
    }
}

fn format_name(format: ModelFormat) -> &'static str {
    match format {
        ModelFormat::Auto => "auto",
        ModelFormat::TorchScript => "torchscript",
        ModelFormat::Aoti => "aoti",
    }
}
